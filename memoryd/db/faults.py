"""Which database errors a retry can fix, and what the caller hears of the others.

SQLAlchemy sorts psycopg's errors by DB-API class, and that class puts errors no retry
can fix (an index row over the size limit, SQLSTATE class 54) under
``OperationalError`` beside a dropped connection. The SQLSTATE decides instead."""

from __future__ import annotations

import re

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from memoryd.errors import MemorydError, ValidationError, WorkerError

# SQLSTATE classes a later try can pass: connection exceptions, transaction rollbacks
# (serialization failures, deadlocks), insufficient resources, operator intervention
# (shutdown, statement timeout) and system errors; and a lock that was not available.
TRANSIENT_CLASSES = frozenset({"08", "40", "53", "57", "58"})
TRANSIENT_STATES = frozenset({"55P03"})

# What a permanent error means to the caller, by SQLSTATE or by its class.
_REASONS = {"22": "is a value the database cannot store (out of range or malformed)",
            "23505": "conflicts with what is stored",
            "23": "breaks one of the database's constraints",
            "54": "is too large for the database's index"}
# The field an index or constraint guards, where the database names one.
_GUARDS = {"uq_memories_agent_key": "key", "uq_memories_agent_hash": "content",
           "sessions_pkey": "session_id", "kg_entities_pkey": "entity.id",
           "kg_relations_pkey": "entity.relations"}
_INDEX_NAMED = re.compile(r'index "([^"]+)"')


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE psycopg reported for ``exc`` (None for a client-side failure)."""
    state = getattr(getattr(exc, "orig", exc), "sqlstate", None)
    return state if isinstance(state, str) else None


def transient(exc: BaseException) -> bool:
    """A database error that another try may not meet: the connection, a conflict with
    another transaction, or the server busy or restarting."""
    if not isinstance(exc, DBAPIError):
        return False
    state = sqlstate(exc)
    if state is None:  # no answer from the server at all: the connection failed
        return isinstance(exc, OperationalError | InterfaceError)
    return state[:2] in TRANSIENT_CLASSES or state in TRANSIENT_STATES


def refusal(exc: BaseException) -> MemorydError:
    """A permanent database error as the caller should hear it: a ``ValidationError``
    naming the field where the index or column tells it, otherwise a ``WorkerError``;
    never the database's text (it can quote the values)."""
    state = sqlstate(exc) or ""
    reason = _REASONS.get(state) or _REASONS.get(state[:2])
    if reason is None:
        return WorkerError(f"database error (SQLSTATE {state or 'unknown'})")
    return ValidationError(_field(exc), reason)


def _field(exc: BaseException) -> str:
    diag = getattr(getattr(exc, "orig", None), "diag", None)
    named = _INDEX_NAMED.search(str(getattr(diag, "message_primary", None) or ""))
    for guard in (getattr(diag, "constraint_name", None), named and named.group(1)):
        if guard in _GUARDS:
            return _GUARDS[guard]
    column = getattr(diag, "column_name", None)
    return column if isinstance(column, str) and column else "input"
