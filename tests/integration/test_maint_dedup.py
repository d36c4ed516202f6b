"""The ``deduplicate`` job against the real PostgreSQL: memories whose content differs
only in case, punctuation or spacing are merged into one, per agent."""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import text

from memoryd.memory.maintenance import JobContext, deduplicate, restore
from memoryd.memory.maintenance.sql import NIL_UUID
from memoryd.memory.store import MemoryStore
from tests.support.maint import (
    add,
    bulk_insert,
    count,
    days_ago,
    evicted,
    links,
    memory,
    run,
    scalar,
    snapshot,
    update,
)


def _group(store: MemoryStore, agent: str, texts: list[str],
           **fields: object) -> list[uuid.UUID]:
    """Memories created a day apart, oldest first."""
    start = days_ago(len(texts) + 1)
    return [add(store, agent, t, created_at=start + timedelta(days=i), **fields)
            for i, t in enumerate(texts)]


VARIANTS = ["Hello, World!", "hello world", "  HELLO   world. "]


def test_merges_variants_into_the_most_recent(store: MemoryStore) -> None:
    oldest, middle, newest = _group(store, "a", VARIANTS)
    update(store, [oldest], access_count=4, tags=["greeting"], importance=0.9)
    update(store, [middle], access_count=1, tags=["demo", "greeting"])
    update(store, [newest], access_count=2, tags=["intro"])
    distinct = add(store, "a", "Hello, new world!")
    other_agent = add(store, "b", "hello world")
    record = run(store, "deduplicate")
    assert record.complete and record.stats["merged"] == 2
    assert evicted(store) == {oldest: ("duplicate", record.run_id),
                              middle: ("duplicate", record.run_id)}
    row = memory(store, newest)
    assert (row.access_count, row.importance) == (7, 0.9)
    assert row.tags == ["intro", "demo", "greeting"]
    assert {(newest, oldest, "derived_from"), (newest, middle, "derived_from")} <= links(store)
    assert set(snapshot(store)) == {newest, distinct, other_agent}


def test_decisions_and_pinned_survive(store: MemoryStore) -> None:
    decision, newer = _group(store, "a", ["Use PostgreSQL.", "use postgresql"])
    update(store, [decision], category="decision")
    pinned_old, plain, pinned_new, newest = _group(
        store, "a", ["Ship on Fridays", "ship on fridays!", "SHIP ON FRIDAYS.",
                     "ship, on fridays"])
    update(store, [pinned_old, pinned_new], pinned=True)
    record = run(store, "deduplicate")
    # The decision absorbs its newer copy; of the pinned pair the newer one absorbs the
    # unpinned copies and the older pinned one stays as it is.
    assert evicted(store) == {newer: ("duplicate", record.run_id),
                              plain: ("duplicate", record.run_id),
                              newest: ("duplicate", record.run_id)}
    assert set(snapshot(store)) == {decision, pinned_old, pinned_new}
    assert (decision, newer, "derived_from") in links(store)


def test_scoped_dry_run_and_idempotence(store: MemoryStore) -> None:
    _group(store, "a", VARIANTS)
    b_ids = _group(store, "b", VARIANTS[:2])
    before = snapshot(store)
    dry = run(store, "deduplicate", dry_run=True)
    assert dry.stats["merged"] == 3
    assert snapshot(store) == before and evicted(store) == {}
    scoped = run(store, "deduplicate", agent_id="b")
    assert scoped.stats["merged"] == 1
    assert evicted(store) == {b_ids[0]: ("duplicate", scoped.run_id)}
    assert run(store, "deduplicate").stats["merged"] == 2
    after = snapshot(store)
    assert run(store, "deduplicate").stats["merged"] == 0
    assert snapshot(store) == after


def test_agent_ranges_batches_and_time_budget(store: MemoryStore) -> None:
    agents = [f"agent-{i:02d}" for i in range(6)]
    survivors = {agent: _group(store, agent, VARIANTS)[-1] for agent in agents}
    partial = run(store, "deduplicate", params={"batch_size": 3}, time_budget_s=1e-6)
    assert not partial.complete and partial.stats["merged"] == 2  # the first agent's range
    rest = run(store, "deduplicate", params={"batch_size": 3})
    assert rest.complete and rest.stats["resumed"] and rest.stats["merged"] == 10
    assert set(snapshot(store)) == set(survivors.values())
    fresh = run(store, "deduplicate", params={"batch_size": 3})
    assert not fresh.stats["resumed"] and fresh.stats["merged"] == 0


def test_restore_and_store_again(store: MemoryStore) -> None:
    oldest, _, newest = _group(store, "a", VARIANTS)
    run(store, "deduplicate")
    assert restore(store, str(oldest)) == oldest
    assert memory(store, oldest).content == "Hello, World!"
    assert count(store) == 2
    run(store, "deduplicate")
    assert store.store("a", "Hello, World!").stored
    assert memory(store, newest) is not None


def test_stored_hash_is_the_normalized_content(store: MemoryStore) -> None:
    ids = _group(store, "a", [*VARIANTS, "hello worlds", "?!", "- -"])
    hashes = [memory(store, i).content_norm_hash for i in ids]
    assert len(set(hashes[:3])) == 1 and hashes[0] is not None
    assert hashes[3] not in (None, hashes[0])
    assert hashes[4:] == [None, None]  # normalized to nothing: never a duplicate
    assert scalar(store, f"""
        SELECT count(*) FROM memories m WHERE m.content_norm_hash IS DISTINCT FROM
            CAST(md5(nullif({deduplicate.normalized("m")}, '')) AS uuid)""") == 0


def test_empty_normalized_contents_are_never_merged(store: MemoryStore) -> None:
    _group(store, "a", ["?!", "...", "- -"])
    assert run(store, "deduplicate").stats["merged"] == 0
    assert count(store) == 3


def test_archived_memories_are_neither_merged_nor_survivors(store: MemoryStore) -> None:
    oldest, middle, newest = _group(store, "a", VARIANTS)
    lone, archived = _group(store, "a", ["Tea at five.", "tea at five"])
    update(store, [newest, archived], archived_at=days_ago(0))
    record = run(store, "deduplicate")
    assert evicted(store) == {oldest: ("duplicate", record.run_id)}
    assert (middle, oldest, "derived_from") in links(store)
    assert set(snapshot(store)) == {middle, newest, lone, archived}


def test_a_group_larger_than_a_batch_is_merged_in_batches(store: MemoryStore) -> None:
    big = _group(store, "a", [*VARIANTS, "hello  world!", "HELLO WORLD"])
    small = _group(store, "b", VARIANTS[:2])
    record = run(store, "deduplicate", params={"batch_size": 2})
    assert record.complete and record.stats["merged"] == 5
    assert set(snapshot(store)) == {big[-1], small[-1]}
    assert memory(store, big[-1]).access_count == 0
    assert {(big[-1], loser, "derived_from") for loser in big[:-1]} <= links(store)


def test_groups_are_found_from_the_hash_index(store: MemoryStore) -> None:
    for agent in ("a", "b", "c"):
        bulk_insert(store, agent, 1000)
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM (ANALYZE) memories"))
    ctx = JobContext(store=store, run_id=None, agent_id=None, dry_run=False,
                     batch_size=5000, deadline=0.0, now=days_ago(0))
    pick = deduplicate._PICK.format(groups=deduplicate._groups_sql(ctx)).rstrip().rstrip(",")
    with store.session() as session:
        plan = "\n".join(session.execute(text(f"EXPLAIN WITH {pick} SELECT * FROM picked"), {
            "lo_agent": "", "lo_hash": NIL_UUID, "batch": 5000,
            "groups": 2500}).scalars())
    assert "Index Only Scan using ix_memories_agent_norm_hash" in plan, plan
    assert "Seq Scan" not in plan, plan
