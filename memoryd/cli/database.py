"""What the operator commands open: the process's database engine, as a store, a
session or a URL (the embedded PostgreSQL started on first use unless configured)."""

from __future__ import annotations

from typing import Any


def store() -> Any:
    from memoryd.db.engine import get_engine
    from memoryd.memory.store import MemoryStore

    return MemoryStore(engine=get_engine())


def session() -> Any:
    """A transaction: committed when the block ends, rolled back on an error."""
    from memoryd.db.engine import get_engine, session_scope

    return session_scope(get_engine())


def url() -> str:
    from memoryd.db.engine import database_url

    return str(database_url())
