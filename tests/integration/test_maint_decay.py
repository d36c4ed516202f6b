"""The ``consolidate`` job against the real PostgreSQL: confidence decay of idle
memories (once per pass, resumable) and merging of near-duplicates by embedding."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from memoryd.errors import ValidationError
from memoryd.memory.maintenance import heap, restore, run_job
from memoryd.memory.maintenance.sql import NIL_UUID
from memoryd.memory.store import MemoryStore
from tests.support.maint import (
    add,
    bulk_insert,
    clock_at,
    count,
    days_ago,
    evicted,
    links,
    memory,
    run,
    snapshot,
    update,
)

IDLE = days_ago(10)


def _decay_fixture(store: MemoryStore) -> dict[str, uuid.UUID]:
    return {
        "idle": add(store, "a", "The build uses Poetry for dependencies.", importance=0.5,
                    created_at=IDLE),
        "idle_trivial": add(store, "a", "Someone mentioned the weather was nice.",
                            importance=0.0, created_at=IDLE),
        "near_floor": add(store, "a", "The old staging URL was staging2.example.com.",
                          importance=0.0, created_at=IDLE, confidence=0.051),
        "at_floor": add(store, "a", "A rumour says the team will move offices.",
                        importance=0.0, created_at=IDLE, confidence=0.05),
        "essential": add(store, "a", "The customer's legal name is Acme Holdings GmbH.",
                         importance=1.0, created_at=IDLE),
        "decision": add(store, "a", "We decided to deploy only from the main branch.",
                        category="decision", importance=0.3, created_at=IDLE),
        "pinned": add(store, "a", "The escalation path is on the team wiki.",
                      importance=0.3, created_at=IDLE, pinned=True),
        "recalled": add(store, "a", "Invoices are sent on the first of the month.",
                        importance=0.5, created_at=IDLE, last_accessed_at=days_ago(1)),
        "new": add(store, "a", "The sprint review moved to Thursday.", importance=0.5),
        "other_agent": add(store, "b", "Agent b prefers concise answers.", importance=0.5,
                           created_at=IDLE),
    }


def _confidences(store: MemoryStore) -> dict[uuid.UUID, float]:
    return {mid: row[1] for mid, row in snapshot(store).items()}


def test_decay_lowers_confidence_of_idle_memories_only(store: MemoryStore) -> None:
    ids = _decay_fixture(store)
    record = run(store, "consolidate")
    conf = _confidences(store)
    assert record.stats["decay"] == "started" and record.stats["decayed"] == 4
    assert conf[ids["idle"]] == pytest.approx(1 - 0.05 * 0.5)
    assert conf[ids["idle_trivial"]] == pytest.approx(0.95)
    assert conf[ids["near_floor"]] == pytest.approx(0.05)  # 0.051 * 0.95, held at the floor
    assert conf[ids["other_agent"]] == pytest.approx(0.975)
    for name in ("at_floor", "essential", "decision", "pinned", "recalled", "new"):
        expected = 0.05 if name == "at_floor" else 1.0
        assert conf[ids[name]] == pytest.approx(expected), name
    assert evicted(store) == {}


def test_decay_once_per_pass_and_again_after_the_interval(store: MemoryStore) -> None:
    ids = _decay_fixture(store)
    run(store, "consolidate")
    before = snapshot(store)
    again = run(store, "consolidate")
    assert (again.stats["decay"], again.stats["decayed"], again.stats["merged"]) == (
        "skipped", 0, 0)
    assert snapshot(store) == before
    # The schedule's next run, six hours on, decays once more.
    with clock_at(datetime.now(UTC) + timedelta(hours=6)):
        later = run(store, "consolidate")
    assert later.stats["decay"] == "started"
    assert _confidences(store)[ids["idle"]] == pytest.approx(0.975 ** 2)


def test_decay_scoped_to_one_agent(store: MemoryStore) -> None:
    ids = _decay_fixture(store)
    record = run(store, "consolidate", agent_id="b")
    assert record.stats["decayed"] == 1
    conf = _confidences(store)
    assert conf[ids["other_agent"]] == pytest.approx(0.975)
    assert conf[ids["idle"]] == 1.0
    # Passes are per scope: the fleet-wide pass has not run yet.
    assert run(store, "consolidate").stats["decayed"] == 4


def test_dry_run_reports_and_changes_nothing(store: MemoryStore) -> None:
    _decay_fixture(store)
    survivor, loser = _near_duplicates(store, "a")
    before, before_links = snapshot(store), links(store)
    dry = run(store, "consolidate", dry_run=True)
    assert (dry.stats["decayed"], dry.stats["merged"]) == (4, 1)
    assert snapshot(store) == before and links(store) == before_links
    assert evicted(store) == {}
    real = run(store, "consolidate")  # the dry run did not use up the pass
    assert (real.stats["decayed"], real.stats["merged"]) == (4, 1)
    assert evicted(store) == {loser: ("merged", real.run_id)}
    assert memory(store, survivor) is not None


def test_time_budget_resumes_the_pass_without_decaying_twice(store: MemoryStore) -> None:
    bulk_insert(store, "a", 10, importance=0.0, age_days=20)
    first = run(store, "consolidate", params={"batch_size": 3}, time_budget_s=1e-6)
    assert not first.complete and first.stats["decayed"] == 3
    resumed = run(store, "consolidate", params={"batch_size": 3})
    assert resumed.complete
    assert (resumed.stats["decay"], resumed.stats["decayed"]) == ("resumed", 7)
    assert sorted(_confidences(store).values()) == pytest.approx([0.95] * 10)


def test_crashed_pass_resumes_from_its_checkpoint(store: MemoryStore) -> None:
    bulk_insert(store, "a", 10, importance=0.0, age_days=20)
    first = run(store, "consolidate", params={"batch_size": 4}, time_budget_s=1e-6)
    # What a worker killed right after that batch leaves: a 'running' row whose stats
    # hold only the checkpoint written with the batch.
    with store.session() as session:
        session.execute(text("""
            UPDATE maintenance_runs SET status = 'running', finished_at = NULL,
                   stats = jsonb_build_object('checkpoint', stats -> 'checkpoint')
            WHERE id = :id"""), {"id": first.run_id})
    rerun = run(store, "consolidate", params={"batch_size": 4})
    assert (rerun.stats["decay"], rerun.stats["decayed"]) == ("resumed", 6)
    assert sorted(_confidences(store).values()) == pytest.approx([0.95] * 10)


def _pages(store: MemoryStore) -> dict[uuid.UUID, int]:
    with store.session() as session:
        rows = session.execute(text(
            "SELECT id, (ctid::text::point)[0] AS page FROM memories")).all()
    return {r.id: int(r.page) for r in rows}


def test_pass_walks_the_heap_in_windows_once_per_row(store: MemoryStore,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # Windows of a few pages (a real store has thousands), three rows a page.
    monkeypatch.setattr(heap, "HEAP_WINDOW_MIN_PAGES", 1)
    bulk_insert(store, "a", 60, importance=0.0, age_days=20)
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("ANALYZE memories"))
    before = _pages(store)
    last_page = max(before.values())
    recalled = next(i for i, page in before.items() if page == last_page)
    positions, runs = set(), 0
    while True:
        record = run(store, "consolidate", params={"batch_size": 4, "merge": False},
                     time_budget_s=1e-6)
        runs += 1
        positions.add(record.stats["checkpoint"]["decay"]["after_tid"])
        if runs == 2:  # an agent recalls a row the pass has not reached yet
            update(store, [recalled], last_accessed_at=days_ago(0))
        if record.complete:
            break
    assert runs > 10 and len(positions) > 5
    conf = _confidences(store)
    assert conf.pop(recalled) == 1.0  # touched since the pass started: the next pass's
    assert sorted(conf.values()) == pytest.approx([0.95] * 59)
    # Some decayed rows found no room on their page and moved past the end of the
    # table, ahead of the walk: they were not decayed a second time.
    after = _pages(store)
    assert any(after[i] > last_page for i in conf)
    assert run(store, "consolidate", params={"merge": False}).stats["decay"] == "skipped"


def test_a_pass_of_the_older_checkpoint_format_is_started_afresh(store: MemoryStore) -> None:
    bulk_insert(store, "a", 5, importance=0.0, age_days=20)
    with store.session() as session:
        session.execute(text("""
            INSERT INTO maintenance_runs (job, status, stats) VALUES ('consolidate', 'ok',
                jsonb_build_object('checkpoint', jsonb_build_object('decay', jsonb_build_object(
                    'started', now(), 'after', CAST(:nil AS text), 'done', false, 'page', 0,
                    'window', 1024, 'horizon', '1'))))"""), {"nil": NIL_UUID})
    record = run(store, "consolidate", params={"merge": False})
    assert (record.stats["decay"], record.stats["decayed"]) == ("started", 5)


def test_bad_params_are_rejected(store: MemoryStore) -> None:
    for params in ({"decay_rate": 1.5}, {"merge_threshold": 0.2}, {"floor": True}):
        with pytest.raises(ValidationError):
            run_job(store, "consolidate", params=params)


# --- merging near-duplicates ---------------------------------------------------------


def _near_duplicates(store: MemoryStore, agent: str) -> tuple[uuid.UUID, uuid.UUID]:
    """Two memories of the same fact (cosine about 0.97); the second is more important."""
    loser = add(store, agent, "Alice lives in Berlin.", importance=0.4, tags=["people"],
                created_at=days_ago(2))
    survivor = add(store, agent, "Alice is living in Berlin.", importance=0.7,
                   tags=["location"], created_at=days_ago(3))
    update(store, [loser], access_count=2, confidence=0.9, last_accessed_at=days_ago(1))
    update(store, [survivor], access_count=3, confidence=0.6)
    return survivor, loser


def _cosine(store: MemoryStore, a: uuid.UUID, b: uuid.UUID) -> float:
    with store.session() as session:
        return float(session.execute(text(
            "SELECT 1 - (x.embedding <=> y.embedding) FROM memories x, memories y "
            "WHERE x.id = :a AND y.id = :b"), {"a": a, "b": b}).scalar_one())


def test_merge_folds_near_duplicates_into_the_more_important(store: MemoryStore) -> None:
    survivor, loser = _near_duplicates(store, "a")
    assert _cosine(store, survivor, loser) >= 0.95
    unrelated = add(store, "a", "The quarterly report is due in March.")
    b_copy = add(store, "b", "Alice lives in Berlin.", importance=0.4)
    record = run(store, "consolidate")
    assert record.stats["merged"] == 1 and record.stats["compared"] == 4
    assert evicted(store) == {loser: ("merged", record.run_id)}
    row = memory(store, survivor)
    assert (row.importance, row.confidence, row.access_count) == (0.7, 0.9, 5)
    assert row.tags == ["location", "people"]
    assert row.last_accessed_at is not None
    assert (survivor, loser, "derived_from") in links(store)
    assert memory(store, unrelated) is not None and memory(store, b_copy) is not None
    # Idempotent: the second run compares the changed survivor and merges nothing.
    before = snapshot(store)
    again = run(store, "consolidate")
    assert again.stats["merged"] == 0
    assert snapshot(store) == before


def test_merge_never_removes_decisions_or_pinned(store: MemoryStore) -> None:
    decision = add(store, "a", "We decided to release every second Tuesday.",
                   category="decision", importance=0.2)
    normal = add(store, "a", "We decided to release every second Tuesday!", importance=0.9)
    pinned_1 = add(store, "a", "The incident hotline number is in the runbook.",
                   importance=0.5, pinned=True)
    pinned_2 = add(store, "a", "The incident hotline number is in the runbook!",
                   importance=0.5, pinned=True)
    assert _cosine(store, decision, normal) >= 0.95 and _cosine(store, pinned_1, pinned_2) >= 0.95
    record = run(store, "consolidate")
    assert evicted(store) == {normal: ("merged", record.run_id)}
    assert memory(store, decision).importance == 0.9  # the decision survived and absorbed it
    assert memory(store, pinned_1) is not None and memory(store, pinned_2) is not None


def _insert_with_vector(store: MemoryStore, content: str, importance: float,
                        x: float, y: float) -> uuid.UUID:
    """A memory whose embedding is (x, y, 0, ..., 0): a crafted geometry."""
    vector = "[" + ",".join([str(x), str(y)] + ["0"] * 382) + "]"
    with store.session() as session:
        return session.execute(text("""
            INSERT INTO memories (agent_id, content, content_hash, category, importance,
                                  embedding, embedding_model)
            VALUES ('a', :content, md5(:content), 'fact', :importance, CAST(:v AS vector),
                    'minilm')
            RETURNING id"""), {"content": content, "importance": importance,
                               "v": vector}).scalar_one()


def test_merge_chain_resolves_without_merging_unrelated_ends(store: MemoryStore) -> None:
    # cos(a, b) = 0.958 and cos(b, c) = 0.969, but cos(a, c) = 0.857: b merges into a,
    # and c, whose only close neighbour was b, stays.
    a = _insert_with_vector(store, "The service runs in eu-west.", 0.9, 1, 0)
    b = _insert_with_vector(store, "the service runs in eu-west", 0.6, 1, 0.3)
    c = _insert_with_vector(store, "The service runs in the EU.", 0.3, 1, 0.6)
    record = run(store, "consolidate")
    assert evicted(store) == {b: ("merged", record.run_id)}
    assert set(snapshot(store)) == {a, c}
    assert run(store, "consolidate").stats["merged"] == 0


def test_merge_is_incremental_batched_and_resumable(store: MemoryStore) -> None:
    facts = ["The API rate limit is 100 requests per minute.",
             "Backups run nightly at 2 am.", "The design system uses the Inter font.",
             "Support tickets are answered within one business day.",
             "The mobile app supports iOS 16 and later."]
    originals = [add(store, "a", f, importance=0.6, created_at=days_ago(5)) for f in facts]
    first = run(store, "consolidate")
    assert (first.stats["compared"], first.stats["merged"]) == (5, 0)
    # New copies (trailing "!" keeps the meaning, cosine about 0.98) arrive later.
    copies = [add(store, "a", f[:-1] + "!", importance=0.3) for f in facts]
    partial = run(store, "consolidate", params={"batch_size": 2}, time_budget_s=1e-6)
    assert not partial.complete and partial.stats["merged"] == 2
    rest = run(store, "consolidate", params={"batch_size": 2})
    assert rest.complete and rest.stats["merged"] == 3
    assert set(evicted(store)) == set(copies)
    assert set(snapshot(store)) == set(originals)


def test_restore_a_merged_memory_and_store_it_again(store: MemoryStore) -> None:
    _, loser = _near_duplicates(store, "a")
    run(store, "consolidate")
    assert restore(store, str(loser)) == loser
    assert memory(store, loser).content == "Alice lives in Berlin."
    assert count(store) == 2
    run(store, "consolidate")  # merged again: it is still a near-duplicate
    assert store.store("a", "Alice lives in Berlin.").stored
