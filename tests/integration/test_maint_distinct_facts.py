"""Maintenance never merges or summarizes away a different fact, on the real PostgreSQL
with the real embedder: numbered notes the embedding puts above the merge line stay
apart in ``consolidate``, pairs that normalize alike but state other numbers stay apart
in ``deduplicate``, and the extractive ``summarize`` archives only the originals whose
facts its summary states. True duplicates still merge."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from memoryd.memory.maintenance import restore
from memoryd.memory.maintenance.context import JobContext
from memoryd.memory.maintenance.merging import Merge, merge_into
from memoryd.memory.store import MemoryStore
from tests.support.maint import add, days_ago, evicted, frozen_clock, memory, run

NOTE = ("Note {i}: the pricing team mentioned item {i} during the weekly sync about the new "
        "subscription tiers, discounts for annual plans and the rollout schedule for "
        "enterprise customers.")
NOTES = range(100, 300)
COPIES = (120, 150, 180, 210, 240)  # stored again in other case, without the full stop


def _live_contents(store: MemoryStore, agent: str) -> list[str]:
    with store.session() as session:
        return list(session.execute(text(
            "SELECT content FROM memories WHERE agent_id = :a AND archived_at IS NULL"),
            {"a": agent}).scalars())


def _close_pairs(store: MemoryStore, agent: str) -> int:
    """Pairs of this agent's memories at cosine 0.95 or more."""
    with store.session() as session:
        return int(session.execute(text("""
            SELECT count(*) FROM memories x JOIN memories y
              ON x.agent_id = y.agent_id AND x.id < y.id
            WHERE x.agent_id = :a AND 1 - (x.embedding <=> y.embedding) >= 0.95"""),
            {"a": agent}).scalar_one())


def test_consolidate_keeps_numbered_notes_apart_and_merges_their_true_copies(
        store: MemoryStore) -> None:
    created = days_ago(3)
    store.store_many("a", [{"content": NOTE.format(i=i), "created_at": created}
                           for i in NOTES])
    copies = {i: r.id for i, r in zip(COPIES, store.store_many(
        "a", [{"content": NOTE.format(i=i).upper().rstrip(".")} for i in COPIES]),
        strict=True)}
    assert _close_pairs(store, "a") > 50  # the embedding alone would merge many of them
    dry = run(store, "consolidate", dry_run=True)
    assert dry.stats["merged"] == len(COPIES) and dry.stats["skipped_distinct_facts"] > 0
    record = run(store, "consolidate")
    assert record.stats["merged"] == len(COPIES)
    assert record.stats["skipped_distinct_facts"] > 0
    # Each copy and its original became one memory (the newer copy survives); every
    # note's number is still there exactly once.
    assert len(evicted(store)) == len(COPIES)
    numbers = sorted(int(re.match(r"note (\d+)", c, re.IGNORECASE)[1])  # type: ignore[index]
                     for c in _live_contents(store, "a"))
    assert numbers == list(NOTES)
    assert all(memory(store, copy) is not None for copy in copies.values())
    assert run(store, "consolidate").stats["merged"] == 0


def test_consolidate_keeps_apart_near_duplicates_of_other_facts(store: MemoryStore) -> None:
    pairs = [("Order 4411 shipped to the customer today.",
              "Order 4412 shipped to the customer today."),
             # (a meeting moved to another day would be a replaced fact, judged at store
             # time; two backups on two days are two facts)
             ("The backup ran on 2024-03-05 and finished in an hour.",
              "The backup ran on 2024-03-06 and finished in an hour.")]
    ids = [add(store, "a", text_) for pair in pairs for text_ in pair]
    record = run(store, "consolidate")
    assert record.stats["merged"] == 0 and record.stats["skipped_distinct_facts"] == 2
    assert all(memory(store, i) is not None for i in ids)


def test_a_pair_edited_after_planning_is_not_merged(store: MemoryStore) -> None:
    survivor = add(store, "a", "Alice is living in Berlin.", importance=0.7)
    loser = add(store, "a", "Alice lives in Berlin.", importance=0.4)
    # The planned pair goes only while both contents are those compared.
    ctx = JobContext(store=store, run_id=None, agent_id=None, dry_run=False, batch_size=100,
                     deadline=math.inf, now=datetime.now(UTC))
    with store.session() as session:
        hashes = dict(session.execute(text(
            "SELECT id, content_hash FROM memories")).all())
    stale = Merge(loser, survivor, 0.97, "0" * 64, hashes[survivor])
    with store.session() as session:
        assert merge_into(session, ctx, [stale], "merged") == 0
    fresh = Merge(loser, survivor, 0.97, hashes[loser], hashes[survivor])
    with store.session() as session:
        assert merge_into(session, ctx, [fresh], "merged") == 1


DEDUP_DISTINCT = [("The freezer runs at -5 degrees.", "The freezer runs at 5 degrees"),
                  ("The ratio is 4.5", "The ratio is 4,5"),
                  ("The plan costs $5", "The plan costs 5%"),
                  ("I like C++", "I like C")]


def test_deduplicate_keeps_apart_contents_that_normalize_alike_but_differ_in_facts(
        store: MemoryStore) -> None:
    ids = [add(store, "a", t, created_at=days_ago(2 - n))
           for pair in DEDUP_DISTINCT for n, t in enumerate(pair)]
    older = add(store, "a", "User prefers dark mode.", created_at=days_ago(3))
    newer = add(store, "a", "user prefers  dark mode", created_at=days_ago(1))
    dry = run(store, "deduplicate", dry_run=True)
    assert (dry.stats["merged"], dry.stats["skipped_distinct_facts"]) == (1, 4)
    record = run(store, "deduplicate")
    assert (record.stats["merged"], record.stats["skipped_distinct_facts"]) == (1, 4)
    assert evicted(store) == {older: ("duplicate", record.run_id)}
    assert all(memory(store, i) is not None for i in [*ids, newer])
    assert restore(store, str(older)) == older


def test_deduplicate_merges_each_copy_into_the_survivor_of_its_own_facts(
        store: MemoryStore) -> None:
    minus_old, plus_old, minus_new, plus_new = [
        add(store, "a", t, created_at=days_ago(5 - n)) for n, t in enumerate(
            ["Set the freezer to -5.", "set the freezer to 5", "SET THE FREEZER TO -5",
             "Set the freezer to 5!"])]
    record = run(store, "deduplicate")
    assert record.stats["merged"] == 2
    assert evicted(store) == {minus_old: ("duplicate", record.run_id),
                              plus_old: ("duplicate", record.run_id)}
    assert memory(store, minus_new) is not None and memory(store, plus_new) is not None


@pytest.fixture
def frozen_now() -> Iterator[datetime]:
    yield from frozen_clock()


def test_extractive_summary_archives_only_the_originals_whose_facts_it_states(
        store: MemoryStore, frozen_now: datetime) -> None:
    created = datetime.now(UTC) - timedelta(days=40)
    results = store.store_many("a", [
        {"content": f"Invoice {1000 + i} for the Lisbon office was paid on 2024-03-{i + 1:02d} "
                    f"by the finance team after the quarterly review.",
         "key": f"invoice:{i}", "created_at": created + timedelta(minutes=i)}
        for i in range(12)])
    ids = [r.id for r in results]
    record = run(store, "summarize", agent_id="a")  # no API key in tests: extractive
    assert record.stats["llm"] == "extractive"
    summary = store.get_by_key("a", f"summary:invoice:{frozen_now.date().isoformat()}")
    archived = {i for i in ids if memory(store, i).archived_at is not None}
    live = set(ids) - archived
    # The summary's budget holds some invoices, not all twelve: those it states are
    # archived, the rest stay live, each number still readable where recall looks.
    assert archived and live
    assert record.stats["archived"] == len(archived)
    assert record.stats["skipped_distinct_facts"] == len(live)
    for memory_id in archived:
        number = re.match(r"Invoice (\d+)", memory(store, memory_id).content)[1]  # type: ignore[index]
        assert number in summary.content
    for memory_id in live:
        number = re.match(r"Invoice (\d+)", memory(store, memory_id).content)[1]  # type: ignore[index]
        assert number not in summary.content
