"""Watching PostgreSQL's lock table: how tests hold a worker mid-write before they kill it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text


def lock_waiters(store: Any) -> int:
    """Sessions waiting for a lock on ``memories`` (a worker blocked inside a write)."""
    with store.session() as session:
        return int(session.execute(text(
            "SELECT count(*) FROM pg_locks WHERE NOT granted "
            "AND relation = 'memories'::regclass")).scalar_one())
