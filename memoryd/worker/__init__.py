"""The Celery worker: ``celery -A memoryd.worker worker|beat|flower`` finds ``app`` here.

The app, its signals and delivery guards import the layers up to the schedules; the
task modules, a layer above, are named in ``include`` and never imported from here."""

from memoryd.worker import signals as _signals  # noqa: F401 - connects the handlers
from memoryd.worker.app import create_app

app = create_app()

__all__ = ["app", "create_app"]
