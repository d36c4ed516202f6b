"""structlog, configured once per process.

JSON lines when stderr is not a terminal (workers under a supervisor, containers), a
readable console otherwise: the children of ``memoryd up`` inherit its terminal, so
they choose the same way. The standard library's loggers (Celery, kombu, SQLAlchemy)
are routed through the same processors; the chatty ones are kept at WARNING. Context
bound with ``bind_contextvars`` (task id, task name, agent id) appears on every line.
Memory content and secrets never reach a log line: content-like fields are reduced to
their size, and every text and traceback passes ``memoryd.redaction`` (a database
error's parameters and DETAIL, which may quote a row, are left out). Agents are named by
the SHA-256 of their id (``agent_sha256``), as the erasure audit names them: an erased
agent's id stays in no log memoryd writes. The gateway's access log names a request's
route by its template (``/v1/jobs/{job}/runs``), never the path as sent, which holds
agent ids and whatever else a caller puts in a path: uvicorn's own line is dropped
(``ACCESS_LOGGER``), and a path that reaches any other text loses all after
``/agents/`` and its query string.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import sys
import sysconfig
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any, TextIO

import structlog

from memoryd.redaction import AGENT_HASH_KEY, AGENT_KEYS, agent_digest, format_error, scrub

_SECRET_KEYS = re.compile(r"(api_?key|password|passwd|secret|token|authorization|credential)",
                          re.IGNORECASE)
_CONTENT_KEYS = {"content", "query", "text", "prompt", "messages"}
MAX_VALUE_CHARS = 200
MAX_EVENT_CHARS = 500  # third-party messages may embed payloads (task bodies, results)
# The gateway's paths name the agent (``/v1/agents/{agent}/...``, the id may hold
# slashes) and its query may quote metadata: all that follows ``/agents/`` is hidden in a
# logged text, unless it is a route's template (the access log's), which names no agent.
_AGENT_PATH = re.compile(r"(/agents/)(?!\{agent\}(?:/(?:[a-z_]+|\{[a-z_]+\}))*(?:$|[\s\"']))"
                         r"[^\s\"']+")
AGENT_PATH_HIDDEN = r"\1<agent>"
# A gateway path's query string holds the caller's values (an access log line): hidden.
_GATEWAY_QUERY = re.compile(r"(/v1/[^\s?#\"']*)\?[^\s\"']*")
# uvicorn's access logger: on with ``memoryd gateway --access-log``. uvicorn's own line
# on it prints the path as sent (and the client's address, which a proxy header may
# name); the gateway writes its own line there instead (``memoryd.gateway.app.AccessLog``),
# which names the route's template, and only lines written through structlog pass.
ACCESS_LOGGER = "uvicorn.access"

# Loggers that report their internals at INFO; kept at WARNING (at least) whatever the
# level asked for, so that --log-level INFO shows memoryd's own events.
NOISY_LOGGERS: dict[str, int] = {
    "sqlalchemy.engine": logging.WARNING,
    "alembic": logging.WARNING,
    "httpx": logging.WARNING,
    "kombu": logging.WARNING,
    "amqp": logging.WARNING,
    "urllib3": logging.WARNING,
    "onnxruntime": logging.WARNING,
    "onnx": logging.WARNING,
    # Deriving the int8 model advises the model's author ("consider pre-processing"),
    # not the operator: a fixed recipe runs on a fixed model.
    "onnxruntime.quantization": logging.ERROR,
    "celery.bootsteps": logging.WARNING,
    "celery.worker.consumer.mingle": logging.WARNING,
    "celery.worker.consumer.gossip": logging.WARNING,
}

# Celery's lines for every task ("Task ... received", "... succeeded in 0.01s"): two per
# task drown memoryd's own events, so they show at DEBUG only.
PER_TASK_LOGGERS = ("celery.app.trace", "celery.worker.strategy")


def redact(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Mask secrets, shorten content, name agents by their hash, and strip passwords
    from URLs."""
    for key, value in list(event.items()):
        if key in AGENT_KEYS:
            del event[key]
            if isinstance(value, str):
                event[AGENT_HASH_KEY] = agent_digest(value)
        elif _SECRET_KEYS.search(key):
            event[key] = "***"
        elif key in _CONTENT_KEYS and isinstance(value, str):
            event[key] = f"<{len(value)} chars>"
        elif isinstance(value, str):
            cleaned = _AGENT_PATH.sub(AGENT_PATH_HIDDEN, scrub(value))
            cleaned = _GATEWAY_QUERY.sub(r"\1?<query>", cleaned)
            limit = MAX_EVENT_CHARS if key == "event" else MAX_VALUE_CHARS
            if len(cleaned) > limit:
                cleaned = cleaned[:limit] + f"… [{len(cleaned)} chars]"
            event[key] = cleaned
    return event


def _format_exc_info(exc_info: Any) -> str:
    return format_error(exc_info[1])


def _shared_processors() -> list[Any]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact,
    ]


@functools.cache
def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(sorted({str(Path(paths[key]).resolve()) for key in ("purelib", "platlib")},
                        key=len, reverse=True))


@functools.cache
def _module_name(pathname: str) -> str | None:
    """The dotted module name of an installed library's file, or None."""
    path = str(Path(pathname).resolve())
    for root in _library_roots():
        if path.startswith(root + "/"):
            return path[len(root) + 1:].removesuffix(".py").replace("/", ".")
    return None


class _NameRootRecords(logging.Filter):
    """Some libraries (onnxruntime's quantization) log with ``logging.info(...)``, i.e.
    through the root logger: such a record is named after the module that logged it and
    held to that logger's level, so it can be kept quiet like any other."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != "root":
            return True
        module = _module_name(record.pathname)
        if module is None:
            return True
        record.name = module
        return record.levelno >= logging.getLogger(module).getEffectiveLevel()


class _OwnAccessLines(logging.Filter):
    """Lets through the access logger only the lines memoryd wrote (through structlog,
    whose records carry their event as a dict), not uvicorn's."""

    def filter(self, record: logging.LogRecord) -> bool:
        return isinstance(record.msg, dict)


class _LineHandler(logging.StreamHandler[TextIO]):
    """Writes each record as a whole line after flushing stdout: a command's printed
    output and its log lines keep their order when both reach the same file or pipe."""

    def emit(self, record: logging.LogRecord) -> None:
        if self.stream is not sys.stdout:
            # Closed or gone: the log line still goes out.
            with contextlib.suppress(AttributeError, OSError, ValueError):
                sys.stdout.flush()
        super().emit(record)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def configure(level: str = "INFO", *, json: bool | None = None, force: bool = False,
              stream: TextIO | None = None) -> None:
    """Configure structlog and the stdlib root logger; idempotent unless ``force``.

    ``json=None``: JSON lines unless ``stream`` (default stderr) is a terminal."""
    # Configured once per process: the root logger holding memoryd's handler says so.
    if not force and any(isinstance(h, _LineHandler) for h in logging.getLogger().handlers):
        return
    out = stream or sys.stderr
    use_json = (not _is_terminal(out)) if json is None else json
    renderer: Any = (structlog.processors.JSONRenderer() if use_json
                     else structlog.dev.ConsoleRenderer(colors=_is_terminal(out)))
    structlog.configure(
        processors=[*_shared_processors(), structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_shared_processors(),
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.ExceptionRenderer(_format_exc_info), renderer],
    )
    handler = _LineHandler(out)
    handler.setFormatter(formatter)
    handler.addFilter(_NameRootRecords())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    access = logging.getLogger(ACCESS_LOGGER)
    if not any(isinstance(f, _OwnAccessLines) for f in access.filters):
        access.addFilter(_OwnAccessLines())
    for name, floor in NOISY_LOGGERS.items():
        logging.getLogger(name).setLevel(max(floor, root.level))
    for name in PER_TASK_LOGGERS:
        logging.getLogger(name).setLevel(
            logging.NOTSET if root.level <= logging.DEBUG else max(logging.WARNING, root.level))


def bind(**values: Any) -> None:
    structlog.contextvars.bind_contextvars(**values)


def clear() -> None:
    structlog.contextvars.clear_contextvars()
