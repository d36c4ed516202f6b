"""What maintenance leaves behind for history, on the real PostgreSQL: a version of every
row a job changes, written before the change and naming the run (eviction, restore,
merges, repair's edits, compaction), and a ``derived_from`` link from every memory a job
derives to each memory it came from (cortex facts and gists, compaction summaries)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import text

from memoryd.memory.maintenance import restore
from memoryd.memory.store import MemoryStore
from tests.support.maint import FakeLLM, add, days_ago, frozen_clock, run, update

AGENT = "agent-hist"


@pytest.fixture(autouse=True)
def frozen_now() -> Iterator[datetime]:
    yield from frozen_clock()


def _versions(store: MemoryStore, memory_id: Any) -> list[Any]:
    with store.session() as session:
        return list(session.execute(text(
            "SELECT cause, actor, data FROM memory_versions WHERE memory_id = :m ORDER BY id"),
            {"m": memory_id}).all())


def _derived_from(store: MemoryStore, source: Any) -> set[str]:
    with store.session() as session:
        return {str(t) for t in session.execute(text(
            "SELECT target_id FROM memory_links WHERE source_id = :s "
            "AND kind = 'derived_from' AND agent_id = :a"),
            {"s": source, "a": AGENT}).scalars()}


# --- versions ------------------------------------------------------------------------------


def test_an_eviction_and_its_restore_each_leave_a_version(store: MemoryStore) -> None:
    memory_id = add(store, AGENT, "An unimportant remark from long ago.",
                    created_at=days_ago(60), importance=0.1)
    record = run(store, "evict", agent_id=AGENT)
    assert record.stats["age"] == 1
    [evicted] = _versions(store, memory_id)
    assert (evicted.cause, evicted.actor) == ("evicted", f"run:{record.run_id}")
    assert evicted.data["content"] == "An unimportant remark from long ago."
    assert "embedding" not in evicted.data
    restore(store, str(memory_id), actor="operator")
    assert [(v.cause, v.actor) for v in _versions(store, memory_id)] == [
        ("evicted", f"run:{record.run_id}"), ("restored", "operator")]


def test_a_merge_keeps_the_loser_and_the_survivor_as_they_were(store: MemoryStore) -> None:
    loser = add(store, AGENT, "The quarterly report is ready.", created_at=days_ago(2),
                tags=["finance"])
    survivor = add(store, AGENT, "the quarterly report is ready", created_at=days_ago(1))
    record = run(store, "deduplicate")
    assert record.stats["merged"] == 1
    [lost] = _versions(store, loser)
    [kept] = _versions(store, survivor)
    assert {lost.cause, kept.cause} == {"merged"}
    assert lost.actor == kept.actor == f"run:{record.run_id}"
    assert lost.data["tags"] == ["finance"]
    assert kept.data["tags"] == []  # the survivor before it took the loser's tags


def test_repair_keeps_a_version_of_each_memory_it_rewrites(store: MemoryStore) -> None:
    first = store.store(AGENT, "I need a hotel in Porto.", role="user", session_id="s").id
    second = store.store(AGENT, "Near the river, please.", role="user", session_id="s").id
    long_text = "Long log line with details. " * 200
    big = store.store(AGENT, long_text, role="tool", session_id="s").id
    record = run(store, "repair_sessions", agent_id=AGENT,
                 params={"max_message_bytes": 2000})
    assert record.stats["merged"] == 1 and record.stats["truncated"] == 1
    actor = f"run:{record.run_id}"
    assert [(v.cause, v.actor, v.data["content"]) for v in _versions(store, first)] == [
        ("merged", actor, "I need a hotel in Porto.")]
    assert [(v.cause, v.actor) for v in _versions(store, second)] == [("merged", actor)]
    assert [(v.cause, v.actor, v.data["content"]) for v in _versions(store, big)] == [
        ("edited", actor, long_text)]


# --- derived_from -------------------------------------------------------------------------


def test_compaction_links_its_summary_to_each_message_it_summarizes(
        store: MemoryStore) -> None:
    ids = [r.id for r in store.store_many(AGENT, [
        {"content": f"Message {i} of a long chat.", "role": ("user", "assistant")[i % 2],
         "session_id": "long"} for i in range(35)])]
    record = run(store, "compact_sessions", agent_id=AGENT, llm=FakeLLM())
    [summary_id] = record.stats["summary_ids"]
    assert _derived_from(store, summary_id) == {str(i) for i in ids[:25]}
    for memory_id in ids[:25]:
        assert [(v.cause, v.actor) for v in _versions(store, memory_id)] == [
            ("compacted", f"run:{record.run_id}")]
    assert all(_versions(store, memory_id) == [] for memory_id in ids[25:])


def _facts(store: MemoryStore) -> list[Any]:
    with store.session() as session:
        return list(session.execute(text(
            "SELECT id, content FROM memories WHERE agent_id = :a AND category = 'fact' "
            "AND source = 'session:chat' ORDER BY content"), {"a": AGENT}).all())


CHAT = ["Hi there, good morning.", "Good morning! How can I help?",
        "Thanks for asking. I prefer green tea in the mornings.",
        "Noted: green tea in the mornings."]


def _chat(store: MemoryStore) -> list[uuid.UUID]:
    return [r.id for r in store.store_many(AGENT, [
        {"content": m, "role": ("user", "assistant")[i % 2], "session_id": "chat"}
        for i, m in enumerate(CHAT)])]


def test_an_extracted_fact_links_the_message_that_states_it(store: MemoryStore) -> None:
    ids = _chat(store)
    run(store, "cortex", agent_id=AGENT)  # no API key in tests: the extractive fallback
    [fact] = _facts(store)
    assert fact.content == "I prefer green tea in the mornings."
    assert _derived_from(store, fact.id) == {str(ids[2])}


def test_facts_and_gists_an_llm_paraphrased_link_every_message_it_read(
        store: MemoryStore) -> None:
    ids = _chat(store)
    update(store, [ids[1]], valid_to=days_ago(0), superseded_by=ids[0])  # not read
    fake = FakeLLM(facts="The user likes tea.\nThe user talks in the morning.",
                   gist="A chat about tea.")
    run(store, "cortex", agent_id=AGENT, llm=fake)
    read = {str(ids[0]), str(ids[2]), str(ids[3])}
    facts = _facts(store)
    assert [f.content for f in facts] == ["The user likes tea.", "The user talks in the morning."]
    assert all(_derived_from(store, f.id) == read for f in facts)
    gist = store.get_by_key(AGENT, "session-index:chat")
    assert _derived_from(store, gist.id) == read
