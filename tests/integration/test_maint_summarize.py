"""The ``summarize`` job on the real PostgreSQL: what it summarizes and archives, what it
must never touch, idempotence, dry runs, chunking, the extractive fallback, LLM outages
and agents storing while it runs."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
from sqlalchemy import text

from memoryd import validation as check
from memoryd.errors import LLMUnavailable
from memoryd.memory.maintenance import run_job
from memoryd.memory.maintenance.new_memories import bounded
from memoryd.memory.maintenance.summarize import chunk_sizes
from memoryd.memory.store import MemoryStore
from tests.support.maint import FakeLLM as SharedFakeLLM
from tests.support.maint import frozen_clock
from tests.support.maint import memory_row as _row
from tests.support.maint import scalar as _scalar

AGENT = "agent-sum"
OTHER = "agent-sum-other"


# The shared fake with this module's defaults: replies "Fake summary number <n>." unless
# given ``reply(prompt, n)``; from call ``fail_on`` (0-based) on it raises
# ``LLMUnavailable`` with retry_after 7.
FakeLLM = partial(SharedFakeLLM, word="Fake summary number", retry_after=7.0)


@pytest.fixture(autouse=True)
def frozen_now() -> Iterator[datetime]:
    yield from frozen_clock()


def _old(store: MemoryStore, content: str, days: int = 40, agent: str = AGENT,
         **fields: Any) -> str:
    created = datetime.now(UTC) - timedelta(days=days)
    return str(store.store(agent, content, created_at=created, **fields).id)


def _snapshot(store: MemoryStore) -> list[tuple[Any, ...]]:
    with store.session() as session:
        memories = session.execute(text(
            "SELECT id, content, archived_at, key FROM memories ORDER BY id")).all()
        links = session.execute(text(
            "SELECT source_id, target_id FROM memory_links ORDER BY 1, 2")).all()
    return [tuple(r) for r in memories] + [tuple(r) for r in links]


@dataclass
class World:
    trips: list[str]
    prefs: list[str]
    untouched: list[str]
    other_agent: list[str]


def _world(store: MemoryStore) -> World:
    trips = [_old(store, f"Day {i} of the Lisbon trip: visited place number {i}.",
                  key=f"trip:day{i}", category="event") for i in range(1, 4)]
    prefs = [_old(store, "The user likes dark roast coffee.", category="preference"),
             _old(store, "The user prefers aisle seats on planes.", category="preference")]
    decision = _old(store, "We decided to use PostgreSQL for storage.", category="decision")
    pinned = _old(store, "Pinned: the user's passport expires in March.", category="fact")
    with store.session() as session:
        session.execute(text("UPDATE memories SET pinned = true WHERE id = :id"), {"id": pinned})
    recent = _old(store, "Day 4 of the Lisbon trip: a tram ride.", days=5, key="trip:day4",
                  category="event")
    lone = _old(store, "A single old note about gardening.", key="garden:tip1",
                category="fact")
    summary = _old(store, "An older summary of things.", category="summary")
    other = [_old(store, f"Other agent's trip note {i}.", agent=OTHER, key=f"trip:n{i}",
                  category="event") for i in range(2)]
    return World(trips, prefs, [decision, pinned, recent, lone, summary], other)


def test_groups_become_summaries_and_originals_are_archived_and_linked(
        store: MemoryStore, frozen_now: datetime) -> None:
    world = _world(store)
    fake = FakeLLM()
    run = run_job(store, "summarize", agent_id=AGENT, llm=fake)

    assert run.status == "ok" and run.complete
    assert run.stats["archived"] == 5 and run.stats["summaries"] == 2
    assert run.stats["llm"] == "fake-model"
    day = frozen_now.date().isoformat()
    trip_summary = store.get_by_key(AGENT, f"summary:trip:{day}")
    pref_summary = store.get_by_key(AGENT, f"summary:preference:{day}")
    assert trip_summary.category == pref_summary.category == "summary"
    assert {trip_summary.content, pref_summary.content} == {
        "Fake summary number 1.", "Fake summary number 2."}
    # the prompt carried the group's originals
    trip_prompt = next(p for p in fake.prompts if "Lisbon" in p)
    assert all(f"visited place number {i}" in trip_prompt for i in range(1, 4))

    for memory_id in world.trips + world.prefs:
        assert _row(store, memory_id)["archived_at"] == frozen_now
    for memory_id in world.untouched + world.other_agent:
        assert _row(store, memory_id)["archived_at"] is None
    with store.session() as session:
        links = session.execute(text(
            "SELECT target_id FROM memory_links WHERE source_id = :s AND kind = 'derived_from'"),
            {"s": trip_summary.id}).scalars().all()
    assert sorted(str(t) for t in links) == sorted(world.trips)
    # recall leaves archived originals out by default, but can still reach them
    hits = store.recall(AGENT, "Lisbon trip visited place", limit=20)
    ids = {str(h.id) for h in hits}
    assert not ids & set(world.trips)
    assert str(trip_summary.id) in ids
    archived = store.recall(AGENT, "Lisbon trip visited place", limit=20, include_archived=True)
    assert set(world.trips) <= {str(h.id) for h in archived}


def test_second_run_changes_nothing(store: MemoryStore) -> None:
    _world(store)
    run_job(store, "summarize", agent_id=AGENT, llm=FakeLLM())
    before = _snapshot(store)
    fake = FakeLLM()
    again = run_job(store, "summarize", agent_id=AGENT, llm=fake)
    assert again.stats["archived"] == 0 and again.stats["summaries"] == 0
    assert fake.prompts == []
    assert _snapshot(store) == before


def test_dry_run_reports_and_changes_nothing(store: MemoryStore) -> None:
    _world(store)
    before = _snapshot(store)
    fake = FakeLLM()
    run = run_job(store, "summarize", agent_id=AGENT, dry_run=True, llm=fake)
    assert run.stats["archived"] == 5 and run.stats["summaries"] == 2
    assert fake.prompts == []
    assert _snapshot(store) == before


def test_fleet_wide_run_covers_every_agent(store: MemoryStore) -> None:
    world = _world(store)
    run = run_job(store, "summarize", llm=FakeLLM(reply=lambda p, n: f"Summary {n} of {p[:40]}"))
    assert run.stats["summaries"] == 3
    assert all(_row(store, m)["archived_at"] is not None for m in world.other_agent)


def test_extractive_fallback_is_used_and_reported(store: MemoryStore,
                                                  frozen_now: datetime) -> None:
    _world(store)
    run = run_job(store, "summarize", agent_id=AGENT)  # no API key in tests
    assert run.stats["llm"] == "extractive"
    assert run.stats["summaries"] == 2
    summary = store.get_by_key(AGENT, f"summary:trip:{frozen_now.date().isoformat()}")
    assert summary.content.startswith("Day 1 of the Lisbon trip")
    assert "Key terms:" in summary.content


def test_large_groups_are_chunked(store: MemoryStore, frozen_now: datetime) -> None:
    ids = [_old(store, f"Reading note {i}: chapter {i} was about topic {i}.",
                key=f"book:{i}", category="fact") for i in range(5)]
    run = run_job(store, "summarize", agent_id=AGENT, llm=FakeLLM(), params={"max_group": 3})
    # 5 by at most 3 -> 3 + 2
    assert run.stats["summaries"] == 2 and run.stats["archived"] == 5
    day = frozen_now.date().isoformat()
    first = store.get_by_key(AGENT, f"summary:book:{day}")
    second = store.get_by_key(AGENT, f"summary:book:{day}:2")
    with store.session() as session:
        counts: dict[Any, int] = dict(session.execute(text(
            "SELECT source_id, count(*) FROM memory_links GROUP BY source_id")).all())
    assert counts == {first.id: 3, second.id: 2}
    assert all(_row(store, m)["archived_at"] is not None for m in ids)


def test_chunk_sizes_are_near_equal() -> None:
    assert chunk_sizes(201, 200) == [101, 100]
    assert chunk_sizes(200, 200) == [200]
    assert chunk_sizes(5, 3) == [3, 2]
    assert chunk_sizes(450, 200) == [150, 150, 150]


def test_same_day_rerun_folds_into_the_existing_summary(store: MemoryStore,
                                                        frozen_now: datetime) -> None:
    _world(store)
    run_job(store, "summarize", agent_id=AGENT, llm=FakeLLM())
    day = frozen_now.date().isoformat()
    first = store.get_by_key(AGENT, f"summary:trip:{day}")
    late = [_old(store, f"Day {i} of the Lisbon trip, remembered late.", key=f"trip:late{i}",
                 category="event") for i in (7, 8)]
    fake = FakeLLM(reply=lambda prompt, n: "Folded summary.")
    run = run_job(store, "summarize", agent_id=AGENT, llm=fake)
    assert run.stats["summaries"] == 1 and run.stats["archived"] == 2
    again = store.get_by_key(AGENT, f"summary:trip:{day}")
    assert again.id == first.id and again.content == "Folded summary."
    assert first.content in fake.prompts[0]  # the earlier summary was not thrown away
    assert _scalar(store, "SELECT count(*) FROM memory_links WHERE source_id = :s",
                   s=first.id) == 5
    assert all(_row(store, m)["archived_at"] is not None for m in late)


def test_llm_unavailable_propagates_and_leaves_the_group_untouched(
        store: MemoryStore, frozen_now: datetime) -> None:
    world = _world(store)
    with pytest.raises(LLMUnavailable) as caught:
        run_job(store, "summarize", agent_id=AGENT, llm=FakeLLM(fail_on=1))
    assert caught.value.retry_after == 7.0
    # groups go in name order: preference (done, committed), then trip (failed, untouched)
    assert all(_row(store, m)["archived_at"] is not None for m in world.prefs)
    assert all(_row(store, m)["archived_at"] is None for m in world.trips)
    assert _scalar(store, "SELECT count(*) FROM memories WHERE key LIKE 'summary:trip:%'") == 0
    assert _scalar(store, "SELECT status FROM maintenance_runs ORDER BY id DESC LIMIT 1") \
        == "failed"

    retry = run_job(store, "summarize", agent_id=AGENT, llm=FakeLLM())
    assert retry.stats["summaries"] == 1 and retry.stats["archived"] == 3


def test_out_of_time_returns_incomplete_and_resumes(store: MemoryStore) -> None:
    _world(store)
    first = run_job(store, "summarize", agent_id=AGENT, llm=FakeLLM(), time_budget_s=1e-9)
    assert not first.complete and first.stats["summaries"] == 0
    rest = run_job(store, "summarize", agent_id=AGENT, llm=FakeLLM())
    assert rest.complete and rest.stats["summaries"] == 2


def test_concurrent_stores_during_a_run(store: MemoryStore) -> None:
    for group in range(6):
        for i in range(2):
            _old(store, f"Group {group} note {i} about subject {group}.", key=f"g{group}:{i}",
                 category="fact")
    stored: list[str] = []
    errors: list[BaseException] = []

    def agent_writes() -> None:
        try:
            for i in range(15):
                stored.append(str(store.store(AGENT, f"Fresh memory {i} while summarizing.",
                                              key=f"g{i % 6}:fresh{i}").id))
        except BaseException as exc:
            errors.append(exc)

    writer = threading.Thread(target=agent_writes)
    writer.start()
    run = run_job(store, "summarize", agent_id=AGENT, llm=FakeLLM(delay_s=0.05))
    writer.join()
    assert not errors and run.status == "ok"
    assert run.stats["summaries"] == 6 and run.stats["archived"] == 12
    assert len(stored) == 15
    assert all(_row(store, m)["archived_at"] is None for m in stored)


def test_long_group_names_give_bounded_keys() -> None:
    key = bounded("summary:" + "x" * 600 + ":2026-01-01")
    assert len(key) == 512 and key == bounded("summary:" + "x" * 600 + ":2026-01-01")
    assert bounded("short") == "short"


def test_long_four_byte_group_names_give_keys_within_the_byte_limit() -> None:
    long = "summary:" + "\U0001F600" * 600
    key = bounded(long)
    assert len(key.encode("utf-8")) <= check.MAX_TEXT_BYTES
    assert check.short_text("key", key) == key
    assert key == bounded(long) and key != bounded(long + "x")
