"""Access counts of recalls served by a replica, applied to the primary shortly after.

A replica cannot run recall's access bump (``recall.touch``, an UPDATE). A recall served
there reads the returned rows as they stand, shows them with this access counted (as
the primary's bump would), and leaves the bump to an ``AccessBuffer``: a helper thread
applies all that gathered, at most every ``FLUSH_EVERY_S`` or ``FLUSH_AT`` memories, in
one set-based UPDATE on the primary (``apply``: ``synchronous_commit`` off; rows a
maintenance job holds locked are skipped, as ``touch`` does, and their counts wait for
the next flush), and once more as the process exits. A crash loses at most the last
second or so of these access counts, never a memory.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import structlog
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from memoryd import clock
from memoryd.db.engine import session_scope
from memoryd.memory.recall import whole_rows

log = structlog.get_logger(__name__)

FLUSH_EVERY_S = 1.0
FLUSH_AT = 1000  # memories pending that wake the flusher at once
MAX_PENDING = 100_000  # beyond this (the primary unreachable for long), counts are dropped

# The counts, added to the rows no other transaction holds locked (the flush never
# waits on a job rewriting them, nor deadlocks with it). Returns each count's memory and
# whether it was counted, held (it exists, but was locked) or gone (deleted meanwhile).
_APPLY = text("""
    WITH b AS (
        SELECT * FROM unnest(CAST(:agents AS text[]), CAST(:ids AS uuid[]),
                             CAST(:ns AS int[]), CAST(:ats AS timestamptz[]))
                      AS b(agent_id, id, n, at)),
    free AS (
        SELECT m.id FROM memories m JOIN b ON m.id = b.id AND m.agent_id = b.agent_id
        FOR UPDATE OF m SKIP LOCKED),
    bumped AS (
        UPDATE memories AS m
        SET access_count = m.access_count + b.n,
            last_accessed_at = GREATEST(m.last_accessed_at, b.at)
        FROM b
        WHERE m.id = b.id AND m.agent_id = b.agent_id AND m.id IN (SELECT id FROM free)
          AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL
        RETURNING m.id)
    SELECT b.agent_id, b.id, b.id IN (SELECT id FROM bumped) AS counted, m.id IS NOT NULL AS kept
    FROM b LEFT JOIN memories m ON m.id = b.id AND m.agent_id = b.agent_id
""")

Key = tuple[str, Any]  # (agent id, memory id)


def apply(session: Session, batch: Mapping[Key, tuple[int, datetime]]
          ) -> tuple[int, list[Key]]:
    """Add ``batch``'s counts (count, newest access time) to their memories: how many
    memories were counted, and the keys of those another transaction held locked, whose
    counts were not applied (a deleted memory's count is neither)."""
    keys = list(batch)
    params = {"agents": [a for a, _ in keys], "ids": [i for _, i in keys],
              "ns": [batch[k][0] for k in keys], "ats": [batch[k][1] for k in keys]}
    rows = session.execute(_APPLY, params).all()
    held = [(str(r.agent_id), r.id) for r in rows if r.kept and not r.counted]
    return sum(1 for r in rows if r.counted), held


class AccessBuffer:
    """Access counts waiting for the primary: (agent, memory id) -> (count, newest time)."""

    def __init__(self, primary: Engine, every_s: float = FLUSH_EVERY_S) -> None:
        self.primary = primary
        self.every_s = every_s
        self._pending: dict[Key, tuple[int, datetime]] = {}
        self._lock = threading.Lock()
        self._flushing = threading.Lock()  # one flush at a time
        self._wake = threading.Event()
        self._pid = -1  # the process whose flusher runs (none yet)
        self._closed = False
        _BUFFERS.add(self)

    def touch(self, session: Session, agent_id: str, ids: list[Any]
              ) -> dict[Any, Mapping[Any, Any]]:
        """``recall.touch`` for a replica: the whole rows of ``ids``, read on
        ``session``, each showing this access, which is counted on the primary soon."""
        if not ids:
            return {}
        rows = whole_rows(session, agent_id, ids)
        at = clock.now()
        self.add(agent_id, list(rows), at)
        return {mid: {**row, "access_count": row["access_count"] + 1, "last_accessed_at": at}
                for mid, row in rows.items()}

    def add(self, agent_id: str, ids: list[Any], at: datetime) -> None:
        with self._lock:
            self._own_process()
            for mid in ids:
                count, _ = self._pending.get((agent_id, mid), (0, at))
                if count or len(self._pending) < MAX_PENDING:
                    self._pending[(agent_id, mid)] = (count + 1, at)
            full = len(self._pending) >= FLUSH_AT
        if full:
            self._wake.set()

    def _own_process(self) -> None:
        """Start this process's flusher; counts inherited across a fork are the parent's
        to apply, so a child drops them. Called under the lock."""
        if self._pid == os.getpid():
            return
        if self._pid != -1:
            self._pending.clear()
            self._wake = threading.Event()
            self._flushing = threading.Lock()  # the parent's flusher may have held it
        self._pid = os.getpid()
        threading.Thread(target=self._run, name="memoryd-access", daemon=True).start()

    def _run(self) -> None:
        pid = os.getpid()
        while not self._closed and self._pid == pid:
            self._wake.wait(self.every_s)
            self._wake.clear()
            self.flush()

    def flush(self) -> int:
        """Apply every pending count to the primary now; returns the memories counted.
        Flushes run one at a time, so this returns once what was pending when it was
        called is applied or put back. Counts that could not be applied (the primary
        failed, or a job held the row) wait for the next flush."""
        with self._lock:
            if self._pid != os.getpid():
                return 0
        with self._flushing:
            with self._lock:
                batch, self._pending = self._pending, {}
            if not batch:
                return 0
            try:
                with session_scope(self.primary) as session:
                    counted, held = apply(session, batch)
            except DBAPIError as exc:
                log.warning("access.flush_failed", memories=len(batch),
                            error=type(exc.orig).__name__)
                self._requeue(batch)
                return 0
            self._requeue({key: batch[key] for key in held})
            return counted

    def pending(self) -> int:
        """How many memories have counts waiting for a flush."""
        with self._lock:
            return len(self._pending)

    def _requeue(self, counts: Mapping[Key, tuple[int, datetime]]) -> None:
        with self._lock:
            for key, (count, at) in counts.items():
                if key in self._pending or len(self._pending) < MAX_PENDING:
                    more, newest = self._pending.get(key, (0, at))
                    self._pending[key] = (count + more, max(at, newest))

    def close(self) -> None:
        """Apply what is pending and stop the flusher."""
        self._closed = True
        self._wake.set()
        self.flush()


_BUFFERS: weakref.WeakSet[AccessBuffer] = weakref.WeakSet()


@atexit.register
def _flush_all() -> None:
    """Best effort at exit: what the last second of recalls counted."""
    for buffer in list(_BUFFERS):
        try:
            buffer.flush()
        except Exception:  # the process is ending: a lost count is not worth a trace
            log.warning("access.flush_at_exit_failed")
