"""The ``evict`` and ``expire`` jobs against the real PostgreSQL: what they remove and
why, what they never touch, dry runs, batches, time budgets, idempotence, restore,
purging, and recovery after the worker is killed mid-run."""

from __future__ import annotations

import multiprocessing
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text

from memoryd.errors import NotFound, ValidationError
from memoryd.memory.maintenance import already_restored, restore, run_job
from memoryd.memory.maintenance.restoring import RESTORED_KEEP_DAYS
from memoryd.memory.store import MemoryStore
from tests.support.maint import (
    add,
    bulk_insert,
    count,
    days_ago,
    evicted,
    run,
    run_evict_in_child,
    snapshot,
)


def _retention_fixture(store: MemoryStore) -> dict[str, uuid.UUID]:
    """One memory per interesting case, for agent 'a' (and one for agent 'b')."""
    old = days_ago(60)
    return {
        "old_trivial": add(store, "a", "The coffee machine was cleaned on Monday.",
                           importance=0.1, created_at=old),
        "old_important": add(store, "a", "The production database runs PostgreSQL 16.",
                             importance=0.9, created_at=old),
        "recent_trivial": add(store, "a", "Lunch today was a sandwich.", importance=0.1),
        "old_but_recalled": add(store, "a", "The office wifi password rotates monthly.",
                                importance=0.1, created_at=old,
                                last_accessed_at=days_ago(2)),
        "doubtful": add(store, "a", "The client might prefer weekly reports.",
                        importance=0.6, confidence=0.05),
        "old_decision": add(store, "a", "We decided to use Celery for background jobs.",
                            category="decision", importance=0.1, created_at=old),
        "pinned_doubtful": add(store, "a", "The on-call phone number is in the wiki.",
                               importance=0.1, confidence=0.02, pinned=True, created_at=old),
        "other_agent_trivial": add(store, "b", "The coffee machine was cleaned on Monday.",
                                   importance=0.1, created_at=old),
    }


def test_evict_removes_by_reason_and_keeps_protected(store: MemoryStore) -> None:
    ids = _retention_fixture(store)
    record = run(store, "evict")
    assert record.complete
    assert record.stats | {"duration_ms": 0} == {
        "age": 2, "low_confidence": 1, "cap": 0, "purged": 0, "duration_ms": 0}
    assert evicted(store) == {
        ids["old_trivial"]: ("age", record.run_id),
        ids["other_agent_trivial"]: ("age", record.run_id),
        ids["doubtful"]: ("low_confidence", record.run_id),
    }
    kept = {"old_important", "recent_trivial", "old_but_recalled", "old_decision",
            "pinned_doubtful"}
    assert set(snapshot(store)) == {ids[name] for name in kept}


def test_evict_scoped_to_one_agent(store: MemoryStore) -> None:
    ids = _retention_fixture(store)
    record = run(store, "evict", agent_id="b")
    assert record.stats["age"] == 1
    assert evicted(store) == {ids["other_agent_trivial"]: ("age", record.run_id)}


def test_evict_dry_run_reports_and_changes_nothing(store: MemoryStore) -> None:
    _retention_fixture(store)
    bulk_insert(store, "c", 12, importance=0.5, age_days=1)
    before = snapshot(store)
    dry = run(store, "evict", dry_run=True, params={"cap": 5})
    assert snapshot(store) == before
    assert evicted(store) == {}
    real = run(store, "evict", params={"cap": 5})
    for reason in ("age", "low_confidence", "cap", "purged"):
        assert dry.stats[reason] == real.stats[reason], reason
    assert real.stats["cap"] == 7


def test_evict_twice_in_a_row_changes_nothing(store: MemoryStore) -> None:
    _retention_fixture(store)
    run(store, "evict")
    before, gone = snapshot(store), evicted(store)
    again = run(store, "evict")
    assert (again.stats["age"], again.stats["low_confidence"], again.stats["cap"]) == (0, 0, 0)
    assert snapshot(store) == before
    assert evicted(store) == gone


def test_cap_removes_least_important_then_oldest(store: MemoryStore) -> None:
    base = days_ago(3)
    ids = [add(store, "a", f"Release {i} shipped feature number {i}.",
               importance=0.3 + (i % 3) * 0.2, created_at=base + timedelta(hours=i))
           for i in range(9)]
    # The least important of all, but a decision: it keeps its place.
    decision = add(store, "a", "We decided to ship on Tuesdays.", category="decision",
                   importance=0.05, created_at=base)
    small = add(store, "b", "Agent b has a single memory.", importance=0.01)
    record = run(store, "evict", params={"cap": 6, "batch_size": 1})
    # importance 0.3 for i in {0, 3, 6}, 0.5 for {1, 4, 7}: the 0.3 ones go, then the
    # oldest 0.5 one (i=1), leaving 5 memories plus the decision.
    gone = {ids[0], ids[3], ids[6], ids[1]}
    assert record.stats["cap"] == 4
    assert evicted(store) == dict.fromkeys(gone, ("cap", record.run_id))
    assert set(snapshot(store)) == (set(ids) - gone) | {decision, small}


def test_evict_batches_and_time_budget(store: MemoryStore) -> None:
    bulk_insert(store, "a", 10)
    first = run(store, "evict", params={"batch_size": 3}, time_budget_s=1e-6)
    assert not first.complete
    assert first.stats["age"] == 3
    assert count(store) == 7
    second = run(store, "evict", params={"batch_size": 3})
    assert second.complete
    assert second.stats["age"] == 7
    assert count(store) == 0
    assert {reason for reason, _ in evicted(store).values()} == {"age"}


def test_restore_and_store_again_after_eviction(store: MemoryStore) -> None:
    ids = _retention_fixture(store)
    run(store, "evict")
    restored = restore(store, str(ids["old_trivial"]))
    assert restored == ids["old_trivial"]
    assert store.get("a", restored).content == "The coffee machine was cleaned on Monday."
    assert ids["old_trivial"] not in evicted(store)
    # Eviction freed the content's dedup hash: the same content can be stored anew.
    again = store.store("a", "The client might prefer weekly reports.")
    assert again.stored and not again.duplicate


def _eviction_number(store: MemoryStore, memory_id: uuid.UUID) -> int:
    with store.session() as session:
        return int(session.execute(text(
            "SELECT eviction_id FROM evicted_memories WHERE memory_id = :m"),
            {"m": memory_id}).scalar_one())


def test_a_restored_eviction_number_is_remembered_as_its_memory(store: MemoryStore) -> None:
    ids = _retention_fixture(store)
    run(store, "evict")
    number = _eviction_number(store, ids["old_trivial"])
    assert already_restored(store, number) is None  # not restored yet
    assert restore(store, number) == ids["old_trivial"]
    assert already_restored(store, number) == ids["old_trivial"]
    with pytest.raises(NotFound):  # an operator restoring twice is told
        restore(store, number)
    store.forget("a", ids["old_trivial"])
    assert already_restored(store, number) is None  # gone again: nothing to answer with
    assert already_restored(store, number + 1000) is None


def test_restored_eviction_numbers_are_forgotten_after_a_week(store: MemoryStore) -> None:
    ids = _retention_fixture(store)
    run(store, "evict")
    first = _eviction_number(store, ids["old_trivial"])
    restore(store, first)
    with store.session() as session:
        session.execute(text("UPDATE restored_evictions SET restored_at = now() - "
                             f"interval '{RESTORED_KEEP_DAYS} days 1 hour'"))
    second = _eviction_number(store, ids["doubtful"])
    restore(store, second)  # a restore forgets the old numbers
    assert already_restored(store, first) is None
    assert already_restored(store, second) == ids["doubtful"]


@pytest.mark.usefixtures("worker")
def test_the_restore_task_answers_a_redelivery_with_the_memory_it_restored(
        store: MemoryStore, client: Any) -> None:
    ids = _retention_fixture(store)
    run(store, "evict")
    number = _eviction_number(store, ids["old_trivial"])
    # The same message delivered twice (a worker killed before its ack): both answers
    # name the restored memory, by eviction number and by memory id alike.
    assert client.restore(number) == ids["old_trivial"]
    assert client.restore(number) == ids["old_trivial"]
    assert client.restore(ids["old_trivial"]) == ids["old_trivial"]
    assert store.get("a", ids["old_trivial"]).content == (
        "The coffee machine was cleaned on Monday.")
    with pytest.raises(NotFound):
        client.restore(number + 1000)


def test_purge_after_retention(store: MemoryStore) -> None:
    bulk_insert(store, "a", 5)
    bulk_insert(store, "b", 4)
    run(store, "evict")
    with store.session() as session:
        session.execute(text(
            "UPDATE evicted_memories SET evicted_at = now() - interval '40 days'"))
    dry = run(store, "evict", dry_run=True, agent_id="a")
    assert dry.stats["purged"] == 5 and count(store, "evicted_memories") == 9
    record = run(store, "evict", agent_id="a", params={"batch_size": 2})
    assert record.stats["purged"] == 5
    assert {agent for agent, in _evicted_agents(store)} == {"b"}
    assert run(store, "evict", params={"retention_days": 50}).stats["purged"] == 0


def _evicted_agents(store: MemoryStore) -> list[tuple[str]]:
    with store.session() as session:
        return [(r.agent_id,) for r in session.execute(text(
            "SELECT agent_id FROM evicted_memories"))]


def test_evict_rejects_bad_params(store: MemoryStore) -> None:
    for params in ({"cap": 0}, {"min_importance": 2}, {"max_age_days": "x"},
                   {"batch_size": 0}):
        with pytest.raises(ValidationError):
            run_job(store, "evict", params=params)


# --- expire ----------------------------------------------------------------------


def test_expire(store: MemoryStore) -> None:
    past, future = days_ago(1), days_ago(-1)
    gone_a = add(store, "a", "The promo code SPRING is valid until yesterday.",
                 expires_at=past)
    gone_b = add(store, "b", "The staging server is down for maintenance.", expires_at=past)
    kept = {
        add(store, "a", "The conference starts tomorrow.", expires_at=future),
        add(store, "a", "The team uses trunk-based development."),
        add(store, "a", "We decided to freeze the API until the audit ends.",
            category="decision", expires_at=past),
        add(store, "a", "The escalation contact is the CTO.", expires_at=past, pinned=True),
    }
    before = snapshot(store)
    assert run(store, "expire", dry_run=True).stats["expired"] == 2
    assert snapshot(store) == before
    scoped = run(store, "expire", agent_id="a", params={"batch_size": 1})
    assert evicted(store) == {gone_a: ("expired", scoped.run_id)}
    record = run(store, "expire")
    assert record.stats["expired"] == 1
    assert evicted(store)[gone_b] == ("expired", record.run_id)
    assert set(snapshot(store)) == kept
    assert run(store, "expire").stats["expired"] == 0
    assert store.store("a", "The promo code SPRING is valid until yesterday.").stored


# --- a worker killed mid-run ----------------------------------------------------------


def _final_state(store: MemoryStore) -> tuple[set[tuple[str, str]], list[tuple[str, str]]]:
    with store.session() as session:
        kept = {(r.agent_id, r.content) for r in session.execute(text(
            "SELECT agent_id, content FROM memories"))}
        gone = sorted((r.content, r.reason) for r in session.execute(text(
            "SELECT data ->> 'content' AS content, reason FROM evicted_memories")))
    return kept, gone


def _crash_data(store: MemoryStore) -> None:
    with store.session() as session:
        session.execute(text("TRUNCATE memories, evicted_memories, maintenance_runs, "
                             "memory_links"))
    bulk_insert(store, "a", 150, prefix="stale")
    bulk_insert(store, "b", 100, prefix="stale", confidence=0.05, age_days=1)
    bulk_insert(store, "b", 50, prefix="fresh", importance=0.8, age_days=1)


def _wait(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.slow
def test_evict_killed_after_first_batch_then_rerun(store: MemoryStore, pg_url: str) -> None:
    _crash_data(store)
    run(store, "evict", params={"batch_size": 5})
    clean = _final_state(store)

    _crash_data(store)
    child = multiprocessing.get_context("spawn").Process(
        target=run_evict_in_child, args=(pg_url, 5))
    # Hold every candidate row but the first batch, so the child commits exactly one
    # batch and then waits on a row lock: it dies mid-run, deterministically.
    with store.engine.connect() as blocker:
        # (In a subquery: rows an OFFSET skips at the locking level are locked too.)
        blocker.execute(text("SELECT id FROM memories WHERE id IN (SELECT id FROM memories "
                             "WHERE agent_id = 'a' ORDER BY id OFFSET 5) FOR UPDATE"))
        child.start()
        try:
            _wait(lambda: count(store, "evicted_memories") > 0, "the first batch")
            assert count(store, "evicted_memories") == 5
        finally:
            child.kill()
            child.join(10)
        blocker.rollback()
    assert child.exitcode == -9
    with store.session() as session:
        stale = session.execute(text("SELECT status, finished_at FROM maintenance_runs")).all()
    assert [(r.status, r.finished_at) for r in stale] == [("running", None)]
    _wait(lambda: _advisory_locks(store) == 0, "the dead worker's lock to go")

    rerun = run(store, "evict", params={"batch_size": 5})
    assert rerun.complete
    assert _final_state(store) == clean
    assert rerun.stats["age"] + 5 == 150 and rerun.stats["low_confidence"] == 100


def _advisory_locks(store: MemoryStore) -> int:
    with store.session() as session:
        return int(session.execute(text(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")).scalar_one())
