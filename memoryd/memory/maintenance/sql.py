"""SQL pieces every job shares: which memories no job may touch, where a keyset on
ids starts, and how a batch that carries its own checkpoint commits."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session

NIL_UUID = "00000000-0000-0000-0000-000000000000"  # sorts before every generated id


def current(alias: str = "m") -> str:
    """SQL true for memories still current (``valid_to`` unset): the only ones a job may
    merge, summarize, evict, expire, decay or read. A superseded memory is history, kept
    as it was for ``as_of`` and ``history``."""
    return f"{alias}.valid_to IS NULL"


def protected(alias: str = "m") -> str:
    """SQL true for memories no job may remove, expire, merge away or decay."""
    return f"({alias}.pinned OR {alias}.category = 'decision')"


def commit_without_waiting(session: Session) -> None:
    """Let the caller's transaction commit without waiting for its WAL to reach disk
    (``synchronous_commit = off`` for this transaction only).

    For batches that write their checkpoint in the same transaction: a crash can lose
    the last few of them, but each batch and its checkpoint commit or vanish together,
    so the job resumes exactly where the surviving checkpoint says, without a disk
    flush at each of a pass's many commits."""
    session.execute(text("SET LOCAL synchronous_commit = off"))
