"""structlog, configured once per process.

JSON lines when stderr is not a terminal (workers under a supervisor), a
readable console otherwise. The standard library's loggers (Celery, kombu,
SQLAlchemy) are routed through the same processors. Context bound with
``bind_contextvars`` (task id, task name, agent id) appears on every line.
Memory content and secrets never reach a log line in full.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

_SECRET_KEYS = re.compile(r"(api_?key|password|passwd|secret|token|authorization|credential)",
                          re.IGNORECASE)
_CONTENT_KEYS = {"content", "query", "text", "prompt", "messages"}
_URL_PASSWORD = re.compile(r"(://[^:/@\s]+:)([^@\s]+)(@)")
MAX_VALUE_CHARS = 200
MAX_EVENT_CHARS = 500  # third-party messages may embed payloads (task bodies, results)
_configured = False


def redact(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Mask secrets, shorten content, and strip passwords from URLs."""
    for key, value in list(event.items()):
        if _SECRET_KEYS.search(key):
            event[key] = "***"
        elif key in _CONTENT_KEYS and isinstance(value, str):
            event[key] = f"<{len(value)} chars>"
        elif isinstance(value, str):
            cleaned = _URL_PASSWORD.sub(r"\1***\3", value)
            limit = MAX_EVENT_CHARS if key == "event" else MAX_VALUE_CHARS
            if len(cleaned) > limit:
                cleaned = cleaned[:limit] + f"… [{len(cleaned)} chars]"
            event[key] = cleaned
    return event


def _shared_processors() -> list[Any]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact,
    ]


def configure(level: str = "INFO", *, json: bool | None = None, force: bool = False,
              stream: TextIO | None = None) -> None:
    """Configure structlog and the stdlib root logger; idempotent unless ``force``."""
    global _configured  # noqa: PLW0603 - configure-once flag
    if _configured and not force:
        return
    out = stream or sys.stderr
    use_json = (not out.isatty()) if json is None else json
    renderer: Any = (structlog.processors.JSONRenderer() if use_json
                     else structlog.dev.ConsoleRenderer(colors=False))
    structlog.configure(
        processors=[*_shared_processors(), structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_shared_processors(),
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, renderer],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("sqlalchemy.engine", "alembic", "httpx", "kombu"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    _configured = True


def bind(**values: Any) -> None:
    structlog.contextvars.bind_contextvars(**values)


def clear() -> None:
    structlog.contextvars.clear_contextvars()
