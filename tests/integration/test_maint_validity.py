"""Maintenance leaves superseded memories alone, on the real PostgreSQL: a memory whose
``valid_to`` is set is history, never merged, evicted, expired, decayed, summarized or
read by cortex and compaction, whatever the job's conditions say of it otherwise.

Supersession is set with plain SQL here (``valid_to``, ``superseded_by``), as the
store-time judge or an explicit ``supersedes`` would leave it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import text

from memoryd.memory.store import MemoryStore
from tests.support.maint import (
    FakeLLM,
    add,
    bulk_insert,
    days_ago,
    evicted,
    frozen_clock,
    run,
    update,
)

AGENT = "agent-valid"


@pytest.fixture(autouse=True)
def frozen_now() -> Iterator[datetime]:
    yield from frozen_clock()


def _supersede(store: MemoryStore, old: uuid.UUID, new: uuid.UUID) -> dict[str, Any]:
    """Mark ``old`` replaced by ``new``; its row as it then is."""
    with store.session() as session:
        session.execute(text(
            "UPDATE memories SET valid_to = now(), superseded_by = :new WHERE id = :old"),
            {"old": old, "new": new})
    return _row(store, old)


def _row(store: MemoryStore, memory_id: uuid.UUID) -> dict[str, Any]:
    with store.session() as session:
        row = session.execute(text("SELECT * FROM memories WHERE id = :id"),
                              {"id": memory_id}).mappings().one()
    return dict(row)


def _versions(store: MemoryStore, memory_id: uuid.UUID) -> int:
    with store.session() as session:
        return int(session.execute(text(
            "SELECT count(*) FROM memory_versions WHERE memory_id = :m"),
            {"m": memory_id}).scalar_one())


def _untouched(store: MemoryStore, memory_id: uuid.UUID, before: dict[str, Any]) -> bool:
    return (_row(store, memory_id) == before and _versions(store, memory_id) == 0
            and memory_id not in evicted(store))


def test_deduplicate_never_merges_a_superseded_copy(store: MemoryStore) -> None:
    oldest, middle, newest = (add(store, AGENT, text_, created_at=days_ago(days))
                              for text_, days in (("The quarterly report is ready.", 3),
                                                  ("the quarterly report is ready", 2),
                                                  ("THE QUARTERLY REPORT IS READY!", 1)))
    # The newest would be the survivor; replaced, it takes no part.
    before = _supersede(store, newest, middle)
    record = run(store, "deduplicate")
    assert record.stats["merged"] == 1
    assert evicted(store) == {oldest: ("duplicate", record.run_id)}
    assert _untouched(store, newest, before)


def test_consolidate_neither_decays_nor_merges_a_superseded_memory(
        store: MemoryStore) -> None:
    note = "The deploy pipeline finished without errors tonight."
    idle = {"created_at": days_ago(30), "importance": 0.5}
    kept, copy = add(store, AGENT, note, **idle), add(store, AGENT, note.upper(), **idle)
    other = "The staging database was vacuumed after the release."
    twin, twin_copy = add(store, AGENT, other, **idle), add(store, AGENT, other.upper(), **idle)
    before = _supersede(store, copy, kept)
    record = run(store, "consolidate")
    # Only the current pair merges; the current memories decay, the superseded does not.
    assert record.stats["merged"] == 1
    assert set(evicted(store)) & {twin, twin_copy} and kept not in evicted(store)
    assert _row(store, kept)["confidence"] < 1.0
    assert _untouched(store, copy, before)


def test_evict_never_removes_superseded_memories_and_does_not_count_them(
        store: MemoryStore) -> None:
    old = {"created_at": days_ago(60), "importance": 0.1}
    current = [add(store, AGENT, f"Unimportant remark number {i}.", **old) for i in range(3)]
    replaced = add(store, AGENT, "Unimportant remark, since replaced.", **old)
    before = _supersede(store, replaced, current[0])
    # Another agent at its cap of 3 current memories, with 2 replaced ones beside them.
    bulk_insert(store, "capped", 5, importance=0.9, age_days=1)
    with store.session() as session:
        extra = list(session.execute(text(
            "SELECT id FROM memories WHERE agent_id = 'capped' ORDER BY id LIMIT 2")).scalars())
    capped = {memory_id: _supersede(store, memory_id, current[0]) for memory_id in extra}
    record = run(store, "evict", params={"cap": 3})
    assert record.stats["age"] == 3 and record.stats["cap"] == 0
    assert set(evicted(store)) == set(current)
    assert _untouched(store, replaced, before)
    assert all(_untouched(store, m, row) for m, row in capped.items())


def test_expire_never_removes_a_superseded_memory(store: MemoryStore) -> None:
    gone, replaced = (add(store, AGENT, text_) for text_ in (
        "A reminder that has run its course.", "An older reminder that has run its course."))
    update(store, [gone, replaced], expires_at=days_ago(1))
    before = _supersede(store, replaced, gone)
    record = run(store, "expire")
    assert record.stats["expired"] == 1 and set(evicted(store)) == {gone}
    assert _untouched(store, replaced, before)


def test_cortex_never_evicts_a_stale_superseded_memory(store: MemoryStore) -> None:
    stale = {"created_at": days_ago(100), "importance": 0.1}
    gone = add(store, AGENT, "An old remark about the weather.", **stale)
    replaced = add(store, AGENT, "An old remark about the wind.", **stale)
    before = _supersede(store, replaced, gone)
    record = run(store, "cortex", agent_id=AGENT, llm=FakeLLM())
    assert record.stats["stale_removed"] == 1 and set(evicted(store)) == {gone}
    assert _untouched(store, replaced, before)


def test_cortex_and_compaction_never_read_a_superseded_message(store: MemoryStore) -> None:
    results = store.store_many(AGENT, [
        {"content": f"Message {i} of the trip planning.", "session_id": "s1",
         "role": ("user", "assistant")[i % 2]} for i in range(6)]
        + [{"content": "We will fly to Zanzibar in May.", "session_id": "s1", "role": "user"}])
    replaced = results[-1].id
    before = _supersede(store, replaced, results[0].id)
    fake = FakeLLM(facts="The user plans a trip.", gist="Trip planning.")
    run(store, "cortex", agent_id=AGENT, llm=fake)
    run(store, "compact_sessions", agent_id=AGENT, llm=fake,
        params={"threshold": 5, "keep": 0})
    assert len(fake.prompts) == 3  # facts, gist, the compaction's summary
    assert all("Zanzibar" not in prompt for prompt in fake.prompts)
    assert _untouched(store, replaced, before)
    with store.session() as session:
        linked = session.execute(text(
            "SELECT count(*) FROM memory_links WHERE target_id = :m"),
            {"m": replaced}).scalar_one()
    assert linked == 0
