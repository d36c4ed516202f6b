"""The ``summarize`` job on the real PostgreSQL: what it summarizes and archives, what it
must never touch, what it groups together (key prefix, session, named subject; never
unrelated subjects), versions and links, idempotence, dry runs, chunking, the extractive
fallback, LLM outages and agents storing while it runs."""

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
    trips: list[str]  # keyed trip:...: grouped by the key prefix
    prefs: list[str]  # about Maria, no key, no session: grouped by their subject
    untouched: list[str]
    other_agent: list[str]


def _world(store: MemoryStore) -> World:
    trips = [_old(store, f"Day {i} of the Lisbon trip: visited place number {i}.",
                  key=f"trip:day{i}", category="event") for i in range(1, 4)]
    prefs = [_old(store, "Maria likes dark roast coffee.", category="preference"),
             _old(store, "Maria prefers aisle seats on planes.", category="preference")]
    # Two memories about nothing named: no key, no session, no subject, never summarized.
    nameless = [_old(store, "it rained all day on the hike.", category="event"),
                _old(store, "coffee tastes better with oat milk.", category="preference")]
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
    return World(trips, prefs, [decision, pinned, recent, lone, summary, *nameless], other)


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
    pref_summary = store.get_by_key(AGENT, f"summary:subject:maria:{day}")
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
    maria = store.get_by_key(AGENT, f"summary:subject:maria:{frozen_now.date().isoformat()}")
    assert "Maria" in maria.content


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


def test_same_day_rerun_makes_a_new_version_of_the_summary_folding_the_first_in(
        store: MemoryStore, frozen_now: datetime) -> None:
    world = _world(store)
    run_job(store, "summarize", agent_id=AGENT, llm=FakeLLM())
    day = frozen_now.date().isoformat()
    first = store.get_by_key(AGENT, f"summary:trip:{day}")
    late = [_old(store, f"Day {i} of the Lisbon trip, remembered late.", key=f"trip:late{i}",
                 category="event") for i in (7, 8)]
    fake = FakeLLM(reply=lambda prompt, n: "Folded summary.")
    run = run_job(store, "summarize", agent_id=AGENT, llm=fake)
    assert run.stats["summaries"] == 1 and run.stats["archived"] == 2
    again = store.get_by_key(AGENT, f"summary:trip:{day}")
    assert again.id != first.id and again.content == "Folded summary."
    assert first.content in fake.prompts[0]  # the earlier summary was not thrown away
    # the first is the key's earlier version, still linked to the originals it summarized;
    # the new one links the late originals and the first
    old = _row(store, str(first.id))
    assert old["valid_to"] is not None and old["superseded_by"] == again.id
    with store.session() as session:
        targets = {source: sorted(str(t) for t, in session.execute(text(
            "SELECT target_id FROM memory_links WHERE source_id = :s "
            "AND kind = 'derived_from'"), {"s": source}).all())
            for source in (first.id, again.id)}
    assert targets[first.id] == sorted(world.trips)
    assert targets[again.id] == sorted([*late, str(first.id)])
    assert all(_row(store, m)["archived_at"] is not None for m in late)


def test_llm_unavailable_propagates_and_leaves_the_group_untouched(
        store: MemoryStore, frozen_now: datetime) -> None:
    world = _world(store)
    with pytest.raises(LLMUnavailable) as caught:
        run_job(store, "summarize", agent_id=AGENT, llm=FakeLLM(fail_on=1))
    assert caught.value.retry_after == 7.0
    # key-prefix groups come first: trip (done, committed), then the subject maria
    # (failed, untouched)
    assert all(_row(store, m)["archived_at"] is not None for m in world.trips)
    assert all(_row(store, m)["archived_at"] is None for m in world.prefs)
    assert _scalar(store, "SELECT count(*) FROM memories WHERE key LIKE 'summary:subject:%'") \
        == 0
    assert _scalar(store, "SELECT status FROM maintenance_runs ORDER BY id DESC LIMIT 1") \
        == "failed"

    retry = run_job(store, "summarize", agent_id=AGENT, llm=FakeLLM())
    assert retry.stats["summaries"] == 1 and retry.stats["archived"] == 2


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


# --- what is summarized together ----------------------------------------------------------

PEOPLE = ["Alice Moreau", "Bruno Keller", "Chen Wei", "Dana Levi", "Emeka Obi",
          "Farah Haddad", "Goran Petrovic", "Hana Sato", "Ivan Novak", "Julia Costa"]


def _derived_from(store: MemoryStore) -> dict[str, set[str]]:
    """Each summary's id -> the ids it links derived_from."""
    with store.session() as session:
        rows = session.execute(text(
            "SELECT source_id, target_id FROM memory_links WHERE kind = 'derived_from'")).all()
    out: dict[str, set[str]] = {}
    for source, target in rows:
        out.setdefault(str(source), set()).add(str(target))
    return out


def test_facts_about_different_people_are_never_summarized_together(
        store: MemoryStore) -> None:
    # One fact about each of ten people, as 38 facts about 40 people once became one summary.
    singles = [_old(store, f"{person} works as an engineer in city number {i}.",
                    category="fact") for i, person in enumerate(PEOPLE)]
    run = run_job(store, "summarize", agent_id=AGENT, llm=FakeLLM())
    assert run.stats["summaries"] == 0 and run.stats["archived"] == 0
    assert all(_row(store, m)["archived_at"] is None for m in singles)


def test_several_facts_about_one_person_are_summarized_together_and_apart_from_others(
        store: MemoryStore, frozen_now: datetime) -> None:
    by_person = {person: [_old(store, f"{person} lives in city number {i}.", category="fact"),
                          _old(store, f"{person}'s sister studies topic number {i}.",
                               category="fact"),
                          _old(store, f"{person} plays chess on Sundays, {i} times a month.",
                               category="event")]
                 for i, person in enumerate(PEOPLE)}
    run = run_job(store, "summarize", agent_id=AGENT, llm=FakeLLM())
    assert run.stats["summaries"] == 10 and run.stats["archived"] == 30
    derived = _derived_from(store)
    assert sorted(map(sorted, derived.values())) == sorted(map(sorted, by_person.values()))
    day = frozen_now.date().isoformat()
    summary = store.get_by_key(AGENT, f"summary:subject:alice moreau:{day}")
    assert derived[str(summary.id)] == set(by_person["Alice Moreau"])
    assert summary.metadata["group"] == "subject:alice moreau"


def _unlist(store: MemoryStore, keep: int = 0) -> None:
    """Every session's list cut to its last ``keep`` messages, as compaction leaves it."""
    with store.session() as session:
        session.execute(text(
            "UPDATE sessions SET messages = CASE WHEN :keep = 0 THEN '[]'::jsonb ELSE "
            "(SELECT jsonb_agg(e ORDER BY n) FROM jsonb_array_elements(messages) "
            "WITH ORDINALITY AS x(e, n) WHERE n > jsonb_array_length(messages) - :keep) END"),
            {"keep": keep})


def test_messages_compacted_out_of_their_session_are_summarized_by_session(
        store: MemoryStore) -> None:
    sessions = {sid: [_old(store, f"Message {i} of the {sid} conversation about topic {i}.",
                           session_id=sid, category="context") for i in range(4)]
                for sid in ("chat-a", "chat-b")}
    _unlist(store, keep=1)
    run = run_job(store, "summarize", agent_id=AGENT, llm=FakeLLM())
    assert run.stats["summaries"] == 2 and run.stats["archived"] == 6
    # the message each session still lists stays as it is
    assert sorted(map(sorted, _derived_from(store).values())) == \
        sorted(sorted(ids[:3]) for ids in sessions.values())
    assert all(_row(store, ids[3])["archived_at"] is None for ids in sessions.values())


def test_messages_their_session_still_lists_are_never_summarized(store: MemoryStore) -> None:
    listed = [_old(store, f"Message {i} of a conversation about topic {i}.",
                   session_id="chat", category="context") for i in range(5)]
    run = run_job(store, "summarize", agent_id=AGENT, llm=FakeLLM())
    assert run.stats["groups"] == 0 and run.stats["summaries"] == 0
    assert all(_row(store, m)["archived_at"] is None for m in listed)


def test_memories_recalled_within_the_window_are_not_summarized(store: MemoryStore) -> None:
    facts = [_old(store, f"Maria visited museum number {i}.", category="event")
             for i in range(3)]
    with store.session() as session:
        session.execute(text(
            "UPDATE memories SET last_accessed_at = now() - interval '3 days' WHERE id = :id"),
            {"id": facts[0]})
    run = run_job(store, "summarize", agent_id=AGENT, llm=FakeLLM())
    assert run.stats["archived"] == 2
    assert _row(store, facts[0])["archived_at"] is None
    assert _derived_from(store) and all(facts[0] not in t for t in _derived_from(store).values())


def test_a_memory_with_no_subject_and_no_session_stays_unsummarized(
        store: MemoryStore) -> None:
    nameless = [_old(store, "it rained all day.", category="event"),
                _old(store, "the meeting was moved to 3 pm.", category="event"),
                _old(store, "coffee tastes better with oat milk.", category="preference"),
                _old(store, "the build is green again.", category="fact")]
    run = run_job(store, "summarize", agent_id=AGENT, llm=FakeLLM())
    assert run.stats["groups"] == 0 and run.stats["summaries"] == 0
    assert all(_row(store, m)["archived_at"] is None for m in nameless)


def test_each_archived_original_keeps_a_version_naming_the_run(store: MemoryStore) -> None:
    world = _world(store)
    run = run_job(store, "summarize", agent_id=AGENT, llm=FakeLLM())
    with store.session() as session:
        rows = session.execute(text(
            "SELECT memory_id, cause, actor, data FROM memory_versions "
            "WHERE agent_id = :a ORDER BY id"), {"a": AGENT}).all()
    versions = {str(r.memory_id): r for r in rows}
    assert sorted(versions) == sorted(world.trips + world.prefs)  # one each, nothing else
    for memory_id, version in versions.items():
        assert (version.cause, version.actor) == ("summarized", f"run:{run.run_id}")
        # the row as it was before: not yet archived, with its content
        assert version.data["archived_at"] is None
        assert version.data["content"] == _row(store, memory_id)["content"]


def test_a_superseded_memory_is_never_summarized(store: MemoryStore) -> None:
    world = _world(store)
    replaced, replacement = world.trips[0], world.trips[1]
    with store.session() as session:
        session.execute(text(
            "UPDATE memories SET valid_to = now(), superseded_by = :by WHERE id = :id"),
            {"by": replacement, "id": replaced})
    before = _row(store, replaced)
    run = run_job(store, "summarize", agent_id=AGENT, llm=FakeLLM())
    assert run.stats["archived"] == 4  # two trips and the two preferences
    assert dict(_row(store, replaced)) == dict(before)
    assert all(replaced not in targets for targets in _derived_from(store).values())
    assert _scalar(store, "SELECT count(*) FROM memory_versions WHERE memory_id = :m",
                   m=replaced) == 0


def test_the_extractive_summary_archives_only_the_turns_it_holds_word_for_word(
        store: MemoryStore) -> None:
    # Turns of one conversation share their date and speaker: a summary of the first few
    # states every turn's "facts" (the date, the name) without holding what they say.
    turns = [_old(store, f"(1:56 pm on 8 May, 2023) Caroline: I tried hobby number {i} "
                         f"and it was {word} for the whole afternoon.",
                  session_id="chat", category="context")
             for i, word in enumerate(["lovely", "tiring", "calm", "loud", "strange", "fun",
                                       "messy", "quiet", "bright", "odd", "long", "brief"])]
    _unlist(store)
    run = run_job(store, "summarize", agent_id=AGENT)  # no API key in tests: extractive
    assert run.stats["llm"] == "extractive" and run.stats["summaries"] == 1
    [summary] = _summaries(store)
    archived = [t for t in turns if _row(store, t)["archived_at"] is not None]
    live = [t for t in turns if _row(store, t)["archived_at"] is None]
    assert archived and live
    assert run.stats["skipped_distinct_facts"] == len(live)
    for memory_id in archived:
        assert _row(store, memory_id)["content"].split(": ", 1)[1] in summary
    for memory_id in live:
        assert _row(store, memory_id)["content"].split(": ", 1)[1] not in summary


def _summaries(store: MemoryStore) -> list[str]:
    with store.session() as session:
        return list(session.execute(text(
            "SELECT content FROM memories WHERE category = 'summary'")).scalars())
