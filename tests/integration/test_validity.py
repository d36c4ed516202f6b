"""Validity in time on the real PostgreSQL: supersession (explicit, by key, judged),
what recall, list and context return by default, ``include_superseded``, ``as_of``,
undo, history, the review queue and erasure of every copy."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from memoryd.errors import NotFound, ValidationError
from memoryd.memory.store import MemoryStore

AGENT = "agent-validity"
OTHER = "agent-validity-other"
MONTHS_AGO = datetime.now(UTC) - timedelta(days=120)
DAYS_AGO = datetime.now(UTC) - timedelta(days=3)


@pytest.fixture
def unjudged(store: MemoryStore) -> Iterator[MemoryStore]:
    """The store with store-time judging off: only explicit and keyed supersession."""
    saved = store.settings
    store.settings = saved.model_copy(update={"judge": "off"})
    yield store
    store.settings = saved


def _count(store: MemoryStore, table: str, agent: str = AGENT) -> int:
    with store.session() as session:
        return int(session.execute(text(f"SELECT count(*) FROM {table} WHERE agent_id = :a"),
                                   {"a": agent}).scalar_one())


def test_explicit_supersedes_marks_the_old_memory_and_keeps_it(unjudged: MemoryStore) -> None:
    old = unjudged.store(AGENT, "The deploy window is Tuesday.", created_at=MONTHS_AGO)
    new = unjudged.store(AGENT, "The deploy window moved to Thursday.", supersedes=[old.id],
                         created_at=DAYS_AGO)
    assert new.superseded == (old.id,)
    replaced = unjudged.get(AGENT, old.id)
    assert not replaced.current and replaced.superseded_by == new.id
    assert replaced.valid_to == unjudged.get(AGENT, new.id).valid_from
    assert _count(unjudged, "memories") == 2


def test_recall_leaves_superseded_memories_out_unless_asked(unjudged: MemoryStore) -> None:
    old = unjudged.store(AGENT, "The deploy window is Tuesday.", created_at=MONTHS_AGO)
    new = unjudged.store(AGENT, "The deploy window is Thursday.", supersedes=[old.id])
    default = [h.id for h in unjudged.recall(AGENT, "deploy window")]
    assert default == [new.id]
    both = {h.id: h.memory for h in unjudged.recall(AGENT, "deploy window",
                                                    include_superseded=True)}
    assert set(both) == {old.id, new.id}
    assert both[old.id].current is False and both[old.id].superseded_by == new.id
    assert [m.id for m in unjudged.list(AGENT).items] == [new.id]
    assert unjudged.list(AGENT, include_superseded=True).total == 2
    assert "Tuesday" not in unjudged.context(AGENT, "deploy window")


def test_as_of_answers_with_what_was_true_then(unjudged: MemoryStore) -> None:
    old = unjudged.store(AGENT, "The deploy window is Tuesday.", created_at=MONTHS_AGO)
    new = unjudged.store(AGENT, "The deploy window is Thursday.", supersedes=[old.id],
                         created_at=DAYS_AGO)
    then = DAYS_AGO - timedelta(days=10)
    assert [h.id for h in unjudged.recall(AGENT, "deploy window", as_of=then)] == [old.id]
    assert [h.id for h in unjudged.recall(AGENT, "deploy window",
                                          as_of=datetime.now(UTC))] == [new.id]
    assert "Tuesday" in unjudged.context(AGENT, "deploy window", as_of=then)
    assert [m.id for m in unjudged.list(AGENT, as_of=then).items] == [old.id]
    before_anything = MONTHS_AGO - timedelta(days=1)
    assert unjudged.recall(AGENT, "deploy window", as_of=before_anything) == []


def test_valid_from_given_by_the_caller_is_what_as_of_compares(unjudged: MemoryStore) -> None:
    since = datetime(2024, 5, 1, tzinfo=UTC)
    stored = unjudged.store(AGENT, "The office is in Leeds.", valid_from=since)
    assert unjudged.get(AGENT, stored.id).valid_from == since
    assert unjudged.recall(AGENT, "office", as_of=since - timedelta(days=1)) == []
    assert [h.id for h in unjudged.recall(AGENT, "office", as_of=since)] == [stored.id]


@pytest.mark.parametrize("moment", ["not a time", "2026-01-01T00:00:00",
                                    "3000-01-01T00:00:00+00:00"])
def test_as_of_out_of_range_is_refused_by_name(store: MemoryStore, moment: str) -> None:
    with pytest.raises(ValidationError) as refused:
        store.recall(AGENT, "anything", as_of=moment)
    assert refused.value.field == "as_of"


def test_supersedes_naming_a_missing_or_foreign_memory_writes_nothing(
        unjudged: MemoryStore) -> None:
    foreign = unjudged.store(OTHER, "The other agent's fact.")
    for target in (uuid.uuid4(), foreign.id):
        with pytest.raises(NotFound, match=r"supersedes\[0\]"):
            unjudged.store(AGENT, "A new fact.", supersedes=[target])
    assert _count(unjudged, "memories") == 0
    assert unjudged.get(OTHER, foreign.id).current


def test_a_cycle_of_supersessions_is_refused(unjudged: MemoryStore) -> None:
    a = unjudged.store(AGENT, "The build uses Make.")
    b = unjudged.store(AGENT, "The build uses Bazel.", supersedes=[a.id])
    assert unjudged.restore_superseded(AGENT, a.id)
    with pytest.raises(ValidationError) as refused:
        unjudged.supersede(AGENT, a.id, [b.id])
    assert refused.value.field == "supersedes"
    with pytest.raises(ValidationError):
        unjudged.supersede(AGENT, a.id, [a.id])
    assert unjudged.get(AGENT, b.id).current


def test_storing_under_a_key_with_new_content_makes_a_new_version(
        unjudged: MemoryStore) -> None:
    first = unjudged.store(AGENT, "Ship date: March 3.", key="ship-date")
    second = unjudged.store(AGENT, "Ship date: April 9.", key="ship-date")
    assert second.id != first.id and second.superseded == (first.id,)
    assert unjudged.get_by_key(AGENT, "ship-date").id == second.id
    old = unjudged.get(AGENT, first.id)
    assert not old.current and old.key == "ship-date" and old.content == "Ship date: March 3."
    history = unjudged.history(AGENT, first.id)
    assert [v.cause for v in history.versions] == ["superseded"]
    assert history.versions[0].data["content"] == "Ship date: March 3."
    assert [(s.cause, s.new_id) for s in history.supersessions] == [("key", second.id)]
    # The old content can become current again as a new version.
    third = unjudged.store(AGENT, "Ship date: March 3.", key="ship-date")
    assert third.stored and third.id not in (first.id, second.id)


def test_metadata_change_under_a_key_is_kept_as_a_version(unjudged: MemoryStore) -> None:
    first = unjudged.store(AGENT, "Ship date: March 3.", key="ship", metadata={"v": 1})
    again = unjudged.store(AGENT, "Ship date: March 3.", key="ship", metadata={"v": 2})
    assert again.id == first.id
    versions = unjudged.history(AGENT, first.id).versions
    assert [(v.cause, v.data["metadata"]) for v in versions] == [("updated", {"v": 1})]


def test_restore_undoes_a_supersession_and_is_audited(unjudged: MemoryStore) -> None:
    old = unjudged.store(AGENT, "Standup is at 9:30.")
    unjudged.store(AGENT, "Standup is at 10:00.", supersedes=[old.id])
    assert unjudged.restore_superseded(AGENT, old.id, actor="operator:test")
    assert unjudged.get(AGENT, old.id).current
    assert not unjudged.restore_superseded(AGENT, old.id)
    history = unjudged.history(AGENT, old.id)
    assert [v.cause for v in history.versions] == ["superseded", "restored"]
    assert [s.status for s in history.supersessions] == ["undone"]


def test_a_changed_fact_is_superseded_at_store_time_by_the_offline_judge(
        store: MemoryStore) -> None:
    old = store.store(AGENT, "Ilvar Ostberg lives in Lisbon.", created_at=MONTHS_AGO)
    hobby = store.store(AGENT, "Ilvar Ostberg has been into rowing for years.",
                        created_at=MONTHS_AGO)
    sister = store.store(AGENT, "Ilvar Ostberg's sister lives in Porto.", created_at=MONTHS_AGO)
    new = store.store(AGENT, "Ilvar Ostberg moved to Oslo last week.", created_at=DAYS_AGO)
    assert new.superseded == (old.id,)
    assert store.get(AGENT, old.id).superseded_by == new.id
    assert store.get(AGENT, hobby.id).current and store.get(AGENT, sister.id).current
    hits = [h.id for h in store.recall(AGENT, "Where does Ilvar Ostberg live?", limit=3)]
    assert new.id in hits and old.id not in hits


def test_an_old_value_imported_after_the_new_one_is_the_one_superseded(
        store: MemoryStore) -> None:
    new = store.store(AGENT, "Mirren Vellacott now works for Halcyon Robotics.",
                      created_at=DAYS_AGO)
    old = store.store(AGENT, "Mirren Vellacott works at Northgate Foods.",
                      created_at=MONTHS_AGO)
    assert store.get(AGENT, old.id).superseded_by == new.id
    assert store.get(AGENT, new.id).current


def test_memories_under_keys_of_their_own_are_never_judged_replaced(
        store: MemoryStore) -> None:
    old = store.store(AGENT, "Ilvar Ostberg lives in Lisbon.", key="ilvar-then",
                      created_at=MONTHS_AGO)
    new = store.store(AGENT, "Ilvar Ostberg moved to Oslo last week.", key="ilvar-now",
                      created_at=DAYS_AGO)
    unkeyed = store.store(AGENT, "Ilvar Ostberg moved to Bergen yesterday.")
    assert new.superseded == () and unkeyed.superseded == ()
    assert store.get(AGENT, old.id).current and store.get(AGENT, new.id).current


def test_a_second_hobby_is_not_a_replacement(store: MemoryStore) -> None:
    first = store.store(AGENT, "Tovah Drummage has been into pottery for years.")
    second = store.store(AGENT, "Tovah Drummage has also taken up climbing.")
    assert second.superseded == ()
    assert store.get(AGENT, first.id).current


def test_erasure_reaches_versions_and_derived_memories(unjudged: MemoryStore) -> None:
    first = unjudged.store(AGENT, "Ship date: March 3.", key="ship-date")
    second = unjudged.store(AGENT, "Ship date: April 9.", key="ship-date")
    other = unjudged.store(AGENT, "Launch party in the atrium.")
    summary = unjudged.store(AGENT, "Ship date April 9, party in the atrium.")
    with unjudged.session() as session:
        session.execute(text("UPDATE memories SET archived_at = now() WHERE id = :other"),
                        {"other": other.id})
        session.execute(text("""
            INSERT INTO memory_links (agent_id, source_id, target_id, kind)
            VALUES (:a, :s, :second, 'derived_from'), (:a, :s, :other, 'derived_from')"""),
            {"a": AGENT, "s": summary.id, "second": second.id, "other": other.id})
    assert unjudged.forget(AGENT, second.id)
    left = {m.id for m in unjudged.list(AGENT, include_superseded=True).items}
    assert left == {other.id}
    assert unjudged.get(AGENT, other.id).archived_at is None
    assert _count(unjudged, "memory_versions") == 1  # the atrium's unarchiving
    assert _count(unjudged, "memory_supersessions") == 0
    with pytest.raises(NotFound):
        unjudged.get(AGENT, first.id)


def test_forgetting_a_replacement_makes_the_replaced_memory_current_again(
        unjudged: MemoryStore) -> None:
    old = unjudged.store(AGENT, "Standup is at 9:30.")
    new = unjudged.store(AGENT, "Standup is at 10:00.", supersedes=[old.id])
    assert unjudged.forget(AGENT, new.id)
    assert unjudged.get(AGENT, old.id).current


def test_forget_agent_removes_versions_and_decisions(unjudged: MemoryStore) -> None:
    unjudged.store(AGENT, "Ship date: March 3.", key="ship-date")
    unjudged.store(AGENT, "Ship date: April 9.", key="ship-date")
    unjudged.forget_agent(AGENT)
    for table in ("memories", "memory_versions", "memory_supersessions"):
        assert _count(unjudged, table) == 0


class ScriptedJudge:
    """A fake LLM of the ``LLM`` protocol answering every numbered pair with one verdict."""

    name = "scripted-judge"

    def __init__(self, verdict: str) -> None:
        self.verdict = verdict
        self.calls = 0

    def complete(self, system: str, prompt: str, max_tokens: int) -> str:
        self.calls += 1
        pairs = prompt.count("\nNEW: ")
        return "\n".join(f"{i}: {self.verdict}" for i in range(1, pairs + 1))


@pytest.fixture
def llm_judge(store: MemoryStore) -> Iterator[ScriptedJudge]:
    from memoryd.memory import llm

    judge = ScriptedJudge("unrelated 0.9 none")
    llm.set_llm(judge)
    yield judge
    llm.set_llm(None)


def _reviews_of(store: MemoryStore) -> list[tuple[uuid.UUID, uuid.UUID]]:
    return [(r.old_id, r.new_id) for r in store.reviews(AGENT)]


def test_judges_that_disagree_put_the_pair_in_the_review_queue(
        store: MemoryStore, llm_judge: ScriptedJudge) -> None:
    old = store.store(AGENT, "Ilvar Ostberg lives in Lisbon.", created_at=MONTHS_AGO)
    new = store.store(AGENT, "Ilvar Ostberg moved to Oslo last week.", created_at=DAYS_AGO)
    assert llm_judge.calls >= 1
    assert new.superseded == () and store.get(AGENT, old.id).current
    assert _reviews_of(store) == [(old.id, new.id)]
    related = {r.memory.id: r.kind for r in store.related(AGENT, new.id)}
    assert related[old.id] == "contradicts"


def test_an_accepted_review_supersedes_and_a_rejected_one_drops_the_link(
        store: MemoryStore, llm_judge: ScriptedJudge) -> None:
    old = store.store(AGENT, "Ilvar Ostberg lives in Lisbon.", created_at=MONTHS_AGO)
    new = store.store(AGENT, "Ilvar Ostberg moved to Oslo last week.", created_at=DAYS_AGO)
    other_old = store.store(AGENT, "Mirren Vellacott works at Northgate Foods.",
                            created_at=MONTHS_AGO)
    other_new = store.store(AGENT, "Mirren Vellacott now works for Halcyon Robotics.",
                            created_at=DAYS_AGO)
    first, second = store.reviews(AGENT)
    accepted = store.decide_review(first.id, accept=True, actor="operator:test")
    assert accepted.status == "applied" and accepted.reviewed_by == "operator:test"
    assert store.get(AGENT, old.id).superseded_by == new.id
    rejected = store.decide_review(second.id, accept=False)
    assert rejected.status == "rejected"
    assert store.get(AGENT, other_old.id).current and store.get(AGENT, other_new.id).current
    assert other_old.id not in {r.memory.id for r in store.related(AGENT, other_new.id)
                                if r.kind == "contradicts"}
    assert store.reviews(AGENT) == []
    with pytest.raises(NotFound):
        store.decide_review(second.id, accept=True)


def test_judges_that_agree_supersede_with_the_higher_confidence(store: MemoryStore) -> None:
    from memoryd.memory import llm

    llm.set_llm(ScriptedJudge("replaces 0.97 residence"))
    try:
        old = store.store(AGENT, "Ilvar Ostberg lives in Lisbon.", created_at=MONTHS_AGO)
        new = store.store(AGENT, "Ilvar Ostberg moved to Oslo last week.", created_at=DAYS_AGO)
    finally:
        llm.set_llm(None)
    assert new.superseded == (old.id,)
    (decision,) = store.history(AGENT, old.id).supersessions
    assert (decision.judge, decision.confidence, decision.cause) == ("offline+llm", 0.97, "judge")


class DownJudge:
    """A fake LLM that is unavailable."""

    name = "down-judge"

    def complete(self, system: str, prompt: str, max_tokens: int) -> str:
        from memoryd.errors import LLMUnavailable

        raise LLMUnavailable("the model is down", retry_after=1.0)


def test_a_store_whose_llm_judge_is_down_is_judged_offline(store: MemoryStore) -> None:
    from memoryd.memory import llm

    llm.set_llm(DownJudge())
    try:
        old = store.store(AGENT, "Ilvar Ostberg lives in Lisbon.", created_at=MONTHS_AGO)
        new = store.store(AGENT, "Ilvar Ostberg moved to Oslo last week.", created_at=DAYS_AGO)
    finally:
        llm.set_llm(None)
    assert new.superseded == (old.id,)
    (decision,) = store.history(AGENT, old.id).supersessions
    assert decision.judge == "offline"
