"""The ``reconcile`` job against the real PostgreSQL: replaced facts that store time did
not judge (stored with judging off) are superseded with cause ``reconcile``, additive
facts and other people's are left alone, a dry run writes nothing, a second run changes
nothing, and a sweep resumes from its checkpoint."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from memoryd.errors import LLMUnavailable
from memoryd.memory import supersession
from memoryd.memory.llm import set_llm
from memoryd.memory.maintenance import run_job
from memoryd.memory.store import MemoryStore
from tests.support.maint import FakeLLM, run, snapshot

AGENT = "agent-reconcile"
OTHER = "agent-reconcile-other"
MONTHS_AGO = datetime.now(UTC) - timedelta(days=200)
DAYS_AGO = datetime.now(UTC) - timedelta(days=3)
LIVES = "Ilvar Ostberg lives in Lisbon."
MOVED = "Ilvar Ostberg moved to Oslo."


@pytest.fixture
def unjudged(store: MemoryStore) -> Iterator[MemoryStore]:
    """The store with store-time judging off (and no LLM): what a bulk import or a
    deployment that stores without judging leaves for the job."""
    saved = store.settings
    store.settings = saved.model_copy(update={"judge": "off"})
    set_llm(None)
    yield store
    store.settings = saved


def _put(store: MemoryStore, content: str, when: datetime, agent: str = AGENT) -> uuid.UUID:
    result = store.store(agent, content, created_at=when)
    assert result.stored and not result.superseded
    return result.id


def _row(store: MemoryStore, memory_id: uuid.UUID) -> Any:
    with store.session() as session:
        return session.execute(text("SELECT * FROM memories WHERE id = :id"),
                               {"id": memory_id}).one()


def _decisions(store: MemoryStore) -> list[Any]:
    with store.session() as session:
        return list(session.execute(text(
            "SELECT agent_id, old_id, new_id, cause, judge, attribute, status, actor "
            "FROM memory_supersessions ORDER BY id")))


def _count(store: MemoryStore, table: str) -> int:
    with store.session() as session:
        return int(session.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


def _moved(store: MemoryStore, agent: str = AGENT) -> tuple[uuid.UUID, uuid.UUID]:
    """An old residence stored months ago and the move that replaces it, days ago."""
    return _put(store, LIVES, MONTHS_AGO, agent), _put(store, MOVED, DAYS_AGO, agent)


def test_reconcile_supersedes_an_old_fact_store_time_did_not_judge(
        unjudged: MemoryStore) -> None:
    old, new = _moved(unjudged)
    unrelated = _put(unjudged, "The deploy window is Tuesday.", DAYS_AGO)
    record = run(unjudged, "reconcile")
    assert record.complete
    assert record.stats["superseded"] == 1 and record.stats["queued"] == 0
    assert record.stats["judged"] >= 1 and record.stats["scanned"] == 3
    assert record.stats["judge"] == "offline"
    replaced, current = _row(unjudged, old), _row(unjudged, new)
    assert replaced.superseded_by == new
    assert replaced.valid_to == current.valid_from
    assert current.valid_to is None and _row(unjudged, unrelated).valid_to is None
    actor = f"run:{record.run_id}"
    [decision] = _decisions(unjudged)
    assert (decision.old_id, decision.new_id, decision.cause, decision.status,
            decision.attribute, decision.actor) == (old, new, "reconcile", "applied",
                                                    "residence", actor)
    with unjudged.session() as session:
        version = session.execute(text(
            "SELECT cause, actor, data ->> 'content' AS content FROM memory_versions "
            "WHERE memory_id = :id"), {"id": old}).one()
    assert (version.cause, version.actor, version.content) == ("superseded", actor, LIVES)
    assert [h.id for h in unjudged.recall(AGENT, "Where does Ilvar Ostberg live?")][:1] == [new]


def test_the_old_value_is_replaced_even_when_it_was_stored_last(
        unjudged: MemoryStore) -> None:
    new = _put(unjudged, MOVED, DAYS_AGO)
    old = _put(unjudged, LIVES, MONTHS_AGO)  # a bulk import brings the old value last
    assert run(unjudged, "reconcile").stats["superseded"] == 1
    assert _row(unjudged, old).superseded_by == new
    assert _row(unjudged, new).valid_to is None


def test_additive_facts_and_other_peoples_are_left_alone(unjudged: MemoryStore) -> None:
    ids = [_put(unjudged, LIVES, MONTHS_AGO),
           _put(unjudged, "Ilvar Ostberg plays the violin.", MONTHS_AGO),
           _put(unjudged, "Ilvar Ostberg also took up chess.", DAYS_AGO),
           _put(unjudged, "Ilvar Ostberg visited Paris.", MONTHS_AGO),
           _put(unjudged, "Ilvar Ostberg visited Rome.", DAYS_AGO),
           _put(unjudged, "Ilvar Ostberg's sister lives in Oslo.", DAYS_AGO),
           _put(unjudged, "Marta Quist lives in Oslo.", DAYS_AGO)]
    record = run(unjudged, "reconcile")
    assert record.stats["judged"] > 0
    assert (record.stats["superseded"], record.stats["queued"]) == (0, 0)
    assert all(_row(unjudged, i).valid_to is None for i in ids)
    assert _decisions(unjudged) == [] and _count(unjudged, "memory_versions") == 0


def test_a_dry_run_counts_what_a_run_would_do_and_writes_nothing(
        unjudged: MemoryStore) -> None:
    old, _ = _moved(unjudged)
    before = snapshot(unjudged)
    dry = run(unjudged, "reconcile", dry_run=True)
    assert dry.complete and dry.stats["superseded"] == 1
    assert snapshot(unjudged) == before
    assert _decisions(unjudged) == [] and _count(unjudged, "memory_versions") == 0
    assert _row(unjudged, old).valid_to is None
    # It left no checkpoint: the real run walks the same memories.
    assert run(unjudged, "reconcile").stats["superseded"] == 1


def test_a_second_run_changes_nothing(unjudged: MemoryStore) -> None:
    _moved(unjudged)
    assert run(unjudged, "reconcile").stats["superseded"] == 1
    before = (snapshot(unjudged), _decisions(unjudged), _count(unjudged, "memory_versions"),
              _count(unjudged, "memory_links"))
    again = run(unjudged, "reconcile")
    assert (again.stats["superseded"], again.stats["queued"]) == (0, 0)
    assert (snapshot(unjudged), _decisions(unjudged), _count(unjudged, "memory_versions"),
            _count(unjudged, "memory_links")) == before


def test_memories_stored_after_a_sweep_are_judged_by_the_next(unjudged: MemoryStore) -> None:
    old = _put(unjudged, LIVES, MONTHS_AGO)
    assert run(unjudged, "reconcile").stats["superseded"] == 0
    new = _put(unjudged, MOVED, DAYS_AGO)
    assert run(unjudged, "reconcile").stats["superseded"] == 1
    assert _row(unjudged, old).superseded_by == new


def test_one_agents_run_touches_only_that_agent(unjudged: MemoryStore) -> None:
    old, _ = _moved(unjudged)
    other_old, other_new = _moved(unjudged, OTHER)
    assert run(unjudged, "reconcile", agent_id=AGENT).stats["superseded"] == 1
    assert _row(unjudged, old).valid_to is not None
    assert _row(unjudged, other_old).valid_to is None
    assert run(unjudged, "reconcile").stats["superseded"] == 1
    assert _row(unjudged, other_old).superseded_by == other_new


def test_a_sweep_out_of_time_resumes_where_it_stopped(unjudged: MemoryStore) -> None:
    old, new = _moved(unjudged)
    _put(unjudged, "The deploy window is Tuesday.", DAYS_AGO)
    runs = []
    while not runs or not runs[-1].complete:
        runs.append(run(unjudged, "reconcile", params={"batch_size": 1},
                        time_budget_s=1e-6))
        assert len(runs) <= 5
    # One memory per run, then a run that finds the sweep's end.
    assert [r.stats["scanned"] for r in runs] == [1, 1, 1, 0]
    assert [r.stats["resumed"] for r in runs] == [False, True, True, True]
    assert sum(r.stats["superseded"] for r in runs) == 1
    assert _row(unjudged, old).superseded_by == new


def _llm_says(verdict: str) -> FakeLLM:
    """An LLM judging every pair of each prompt ``verdict`` (e.g. "additive 0.9 residence")."""
    return FakeLLM(reply=lambda prompt, _n: "\n".join(
        f"{i}: {verdict}" for i in range(1, prompt.count("\nNEW: ") + 1)))


def test_judges_that_disagree_send_the_pair_to_review_once(store: MemoryStore) -> None:
    saved = store.settings
    store.settings = saved.model_copy(update={"judge": "off"})
    try:
        old, new = _moved(store)
    finally:
        store.settings = saved.model_copy(update={"judge": "auto"})
    llm = _llm_says("additive 0.9 residence")
    try:
        first = run(store, "reconcile", llm=llm)
        assert llm.prompts  # the LLM judged beside the offline judge
        assert first.stats["judge"] == "offline+llm"
        assert (first.stats["superseded"], first.stats["queued"]) == (0, 1)
        with store.session() as session:
            [queued] = supersession.reviews(session, AGENT)
        assert (queued.old_id, queued.new_id, queued.cause) == (old, new, "reconcile")
        with store.session() as session:
            supersession.decide(session, queued.id, accept=False, actor="key:operator")
        # A rejected pair is never judged again: no new review, no contradicts link back.
        again = run(store, "reconcile", llm=llm)
        assert (again.stats["superseded"], again.stats["queued"]) == (0, 0)
        assert _count(store, "memory_links") == 0
        assert [d.status for d in _decisions(store)] == ["rejected"]
        assert _row(store, old).valid_to is None
    finally:
        store.settings = saved


def test_a_run_with_an_unavailable_llm_fails_and_keeps_nothing_half_done(
        store: MemoryStore) -> None:
    saved = store.settings
    store.settings = saved.model_copy(update={"judge": "off"})
    try:
        old, _ = _moved(store)
    finally:
        store.settings = saved.model_copy(update={"judge": "auto"})
    try:
        with pytest.raises(LLMUnavailable):
            run_job(store, "reconcile", llm=FakeLLM(fail_on=0))
        assert _row(store, old).valid_to is None and _decisions(store) == []
        # The retry, with the LLM back, does the work.
        retried = run(store, "reconcile", llm=_llm_says("replaces 0.9 residence"))
        assert retried.stats["superseded"] == 1
    finally:
        store.settings = saved
