"""What memoryd lets out of a process besides the answer itself: log lines, task events
(Flower), stored errors and error bodies. Values are reduced to their identifiers and
sizes, and errors to their class and a message that holds no row values.

Memory contents and queries travel in task bodies and results, to the caller; never in
the monitoring path. An agent is named there by the SHA-256 of its id (``agent_digest``),
as the erasure audit names it: an erased agent leaves its id in no log line or task event,
and an operator still finds an agent's lines by hashing the id they were asked about.

memoryd's own errors (``MemorydError``) are written to be shown; anything else is
described by its class and, for a database error, the SQLSTATE name and the schema
objects involved: the server's message and DETAIL may quote a row (``Failing row
contains (...)``, ``Key (agent_id, key)=(...)``), and SQLAlchemy's may list the
statement's parameters.
"""

from __future__ import annotations

import hashlib
import re
import traceback
from collections.abc import Callable, Collection, Mapping
from typing import Any
from uuid import UUID

from pydantic import BaseModel

from memoryd import types
from memoryd.errors import MemorydError, WorkerError
from memoryd.schedules.names import JOB_NAMES

# A maintenance run's states (the ``maintenance_runs.status`` column's).
RUN_STATUSES = ("running", "ok", "failed", "skipped")


def _one_of(known: Collection[str]) -> Callable[[str], bool]:
    return lambda value: value in known


def _an_id(value: str) -> bool:
    """A memory's, run's or task's id: a number, or a UUID as memoryd writes one (the
    parser takes other spellings, which could carry a caller's words)."""
    if value.isdigit() and value.isascii():
        return len(value) <= 20
    try:
        return str(UUID(value)) == value
    except ValueError:
        return False


# Texts shown as they are in summaries, each by the values it may take: identifiers and
# options. Any other text (content, tags, session ids, entity ids, and these keys'
# values when they are not what memoryd allows: a hand-crafted message's, before a
# worker refuses it) is shown by its size. Numbers, booleans and None are shown anywhere.
SHOWN_TEXTS: dict[str, Callable[[str], bool]] = {
    "job": _one_of(JOB_NAMES), "mode": _one_of(types.RECALL_MODES),
    "category": _one_of(types.CATEGORIES), "role": _one_of(types.ROLES),
    "status": _one_of(RUN_STATUSES), "order": _one_of(("newest", "key")),
    **dict.fromkeys(("id", "memory_id", "run_id", "task_id", "target", "review_id"), _an_id),
}
SHOWN_KEYS = frozenset(SHOWN_TEXTS)
# The names of a summary's fields shown as they are: the parameters of memoryd's tasks
# and the fields of their results (``tests/unit/test_redaction.py`` keeps this list
# complete). Any other name (a hand-crafted message's keyword) is shown by its size.
FIELD_NAMES = frozenset({
    *SHOWN_KEYS, "agent_id", "content", "items", "entity", "start_id", "field", "params",
    "limit", "offset", "depth", "follow_up", "after", "broker", "results", "stats",
    "complete", "error", "accept", "tag", "structured",
    *(name for model in vars(types).values()
      if isinstance(model, type) and issubclass(model, BaseModel)
      and model.__module__ == types.__name__ for name in model.model_fields)})
# Shown by their hash (``agent_digest``), under ``AGENT_HASH_KEY``.
AGENT_KEYS = frozenset({"agent_id"})
AGENT_HASH_KEY = "agent_sha256"
MAX_MESSAGE_CHARS = 200
# A URL's password, also without a user name (Redis: ``redis://:PASSWORD@host``).
_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)([^@\s]+)(@)")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
# Where a database error's text starts quoting values; nothing after it is kept.
_VALUES_FOLLOW = re.compile(r"\[parameters:|\[SQL parameters|^\s*(DETAIL|CONTEXT|HINT):"
                            r"|Failing row contains|\bKey \(", re.MULTILINE)
_DIAG_NAMES = ("table_name", "column_name", "constraint_name", "datatype_name")


def agent_digest(agent_id: str) -> str:
    """What everything but the caller's answer and the database keeps of an agent's id:
    its SHA-256 (hex), as the erasure audit keeps it."""
    return hashlib.sha256(agent_id.encode("utf-8")).hexdigest()


def summarize(value: Any) -> str:
    """A value as monitoring shows it: numbers, booleans and identifiers (``SHOWN_TEXTS``)
    as they are, an agent's id by its hash, the size of anything else (``<23 chars>``,
    ``<3 items>``, ``<5 keys>``), a field name memoryd does not use included."""
    if value is None or isinstance(value, bool | int | float):
        return repr(value)
    if isinstance(value, str):
        return f"<{len(value)} chars>"
    if isinstance(value, Mapping):
        return "{" + ", ".join(_field(key, item) for key, item in value.items()) + "}"
    if isinstance(value, list | tuple | set | frozenset):
        return f"<{len(value)} items>"
    return f"<{type(value).__name__}>"


def _field(key: object, value: Any) -> str:
    if key in AGENT_KEYS and isinstance(value, str):
        return f"{AGENT_HASH_KEY!r}: {agent_digest(value)!r}"
    name = repr(key) if key in FIELD_NAMES else summarize(key)
    return f"{name}: {_entry(key, value)}"


def _entry(key: object, value: Any) -> str:
    if isinstance(value, str) and key in SHOWN_TEXTS and SHOWN_TEXTS[str(key)](value):
        return repr(value)
    if isinstance(value, Mapping):
        return f"<{len(value)} keys>"
    return summarize(value)


def scrub(text: str) -> str:
    """Free text (a log message, an exception's string) without what may quote values:
    URL passwords masked, and everything from a database error's DETAIL or SQLAlchemy's
    parameters on cut off."""
    text = _URL_PASSWORD.sub(r"\1***\3", text)
    found = _VALUES_FOLLOW.search(text)
    return text if found is None else text[:found.start()].rstrip() + " [values hidden]"


def describe_error(exc: BaseException) -> str:
    """``Class: message`` without values: memoryd's own errors as they are, a database
    error by its condition and the schema objects it names, anything else by the first
    line of its text with quoted values masked."""
    name = type(exc).__name__
    if isinstance(exc, MemorydError):
        return f"{name}: {exc}" if str(exc) else name
    driver = getattr(exc, "orig", None)  # SQLAlchemy's wrapper of the driver's error
    if isinstance(driver, BaseException):
        inner = _database_error(driver)
        return f"{name}: {inner.removeprefix(name + ': ')}"
    if getattr(exc, "sqlstate", None):
        return _database_error(exc)
    first = scrub(str(exc)).strip().split("\n", 1)[0]
    message = _QUOTED.sub("'…'", first)[:MAX_MESSAGE_CHARS]
    return f"{name}: {message}" if message else name


def _database_error(exc: BaseException) -> str:
    """The driver's error: a server error by its condition (the class psycopg names
    after the SQLSTATE) and the schema objects involved; a client-side one (no SQLSTATE:
    the connection failed) like any other error, its first line quoting no row."""
    state = getattr(exc, "sqlstate", None)
    if not state:
        return describe_error(exc)
    diag = getattr(exc, "diag", None)
    names = [f"{field.removesuffix('_name')} {value}" for field in _DIAG_NAMES
             if (value := getattr(diag, field, None))]
    return f"{type(exc).__name__} (SQLSTATE {state})" + (f" on {', '.join(names)}"
                                                         if names else "")


def format_error(exc: BaseException) -> str:
    """A traceback as Python prints it (frames, causes, contexts), with each
    exception's line replaced by ``describe_error``: frames show code, never values."""
    blocks: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        frames = "".join(traceback.format_tb(current.__traceback__))
        header = "Traceback (most recent call last):\n" if frames else ""
        module = type(current).__module__
        prefix = "" if module == "builtins" else f"{module}."
        blocks.append(f"{header}{frames}{prefix}{describe_error(current)}")
        if current.__cause__ is not None:
            blocks.append("\nThe above exception was the direct cause of the following "
                          "exception:\n")
            current = current.__cause__
        elif current.__context__ is not None and not current.__suppress_context__:
            blocks.append("\nDuring handling of the above exception, another exception "
                          "occurred:\n")
            current = current.__context__
        else:
            current = None
    return "\n".join(reversed(blocks))


def redacted(exc: BaseException) -> BaseException:
    """The exception to let out in place of ``exc``: memoryd's own errors as they are;
    anything else as a ``WorkerError`` saying what ``describe_error`` says, with the
    original frames but neither its text nor its chain."""
    if isinstance(exc, MemorydError):
        return exc
    return WorkerError(describe_error(exc)).with_traceback(exc.__traceback__)
