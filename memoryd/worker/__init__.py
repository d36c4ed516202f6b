"""The Celery worker: ``celery -A memoryd.worker worker|beat|flower`` finds ``app`` here."""

from memoryd.worker import signals as _signals  # noqa: F401 - connects the handlers
from memoryd.worker.app import create_app

app = create_app()

__all__ = ["app", "create_app"]
