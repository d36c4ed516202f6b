"""Access counts gathered for the primary (``memory.access.AccessBuffer``, which counts
the recalls a replica serves): applied in one statement per flush, never waiting on a
row a job holds, and never lost to one."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

from sqlalchemy import text

from memoryd import clock
from memoryd.memory.access import AccessBuffer
from memoryd.memory.store import MemoryStore

AGENT = "access-agent"
HOUR = 3600.0


def _counts(store: MemoryStore) -> dict[Any, tuple[int, Any]]:
    with store.session() as session:
        return {r.id: (r.access_count, r.last_accessed_at) for r in session.execute(text(
            "SELECT id, access_count, last_accessed_at FROM memories WHERE agent_id = :a"),
            {"a": AGENT})}


def test_a_flush_adds_up_the_counts_and_keeps_the_newest_access_time(
        store: MemoryStore) -> None:
    first, second = (store.store(AGENT, t).id for t in ("Tea at four.", "Coffee at nine."))
    buffer = AccessBuffer(store.engine, every_s=HOUR)  # flushed by the test only
    earlier = clock.now() - timedelta(minutes=5)
    later = clock.now()
    buffer.add(AGENT, [first, second], earlier)
    buffer.add(AGENT, [first], later)
    assert _counts(store)[first][0] == 0  # nothing applied before the flush
    assert buffer.pending() == 2
    assert buffer.flush() == 2
    counts = _counts(store)
    assert counts[first] == (2, later) and counts[second] == (1, earlier)
    assert buffer.flush() == 0  # nothing left pending
    buffer.close()


def test_a_count_for_a_row_a_job_holds_waits_for_the_next_flush(store: MemoryStore) -> None:
    held, free = (store.store(AGENT, t).id for t in ("Tea at four.", "Coffee at nine."))
    buffer = AccessBuffer(store.engine, every_s=HOUR)  # flushed by the test only
    buffer.add(AGENT, [held, free], clock.now())
    flushed: list[int] = []
    with store.engine.connect() as job:
        job.execute(text("SELECT 1 FROM memories WHERE id = :id FOR UPDATE"), {"id": held})
        flushing = threading.Thread(target=lambda: flushed.append(buffer.flush()))
        flushing.start()
        flushing.join(10)
        waited = flushing.is_alive()
        while_held = _counts(store)
        job.rollback()  # lets a waiting flush finish either way
    flushing.join()
    assert not waited, "the flush waited for the row the job holds"
    assert flushed == [1]
    assert while_held[held][0] == 0 and while_held[free][0] == 1
    assert buffer.pending() == 1
    assert buffer.flush() == 1  # the held row's count, once the job let go
    assert {mid: count for mid, (count, _) in _counts(store).items()} == {held: 1, free: 1}
    assert buffer.pending() == 0
    buffer.close()


def test_counts_of_a_memory_deleted_meanwhile_are_dropped(store: MemoryStore) -> None:
    gone = store.store(AGENT, "Forgotten before the flush.").id
    buffer = AccessBuffer(store.engine, every_s=HOUR)  # flushed by the test only
    buffer.add(AGENT, [gone], clock.now())
    store.forget(AGENT, gone)
    assert buffer.pending() == 1
    assert buffer.flush() == 0  # counted nowhere
    assert buffer.pending() == 0  # and not kept for a later flush either
    buffer.close()
