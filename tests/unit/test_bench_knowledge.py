"""The generated data of the changing-knowledge benchmark (bench/knowledge.py): its kinds,
its phrasing halves, its values naming one memory each, and how a result is scored."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

# bench/ is not an installed package: make the repository root importable however
# pytest was started (``pytest`` alone does not put the working directory on sys.path).
from bench import knowledge
from bench.knowledge_data import ADDITIVE, KINDS, POOLS
from memoryd.errors import ValidationError
from memoryd.types import Memory, Recalled, ScoreComponents

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def test_there_are_at_least_eight_kinds_with_three_phrasings_per_side() -> None:
    assert len(KINDS) >= 8
    for kind in KINDS:
        for side in ("old", "new"):
            every = knowledge.phrasings(kind, side, "all")
            assert len(set(every)) == len(every) >= 3, (kind, side)
            assert all("{p}" in p and "{v}" in p for p in every), (kind, side)


def test_the_held_out_phrasings_are_disjoint_from_the_tune_half() -> None:
    for kind in KINDS:
        for side in ("old", "new"):
            tune = set(knowledge.phrasings(kind, side, "tune"))
            held_out = set(knowledge.phrasings(kind, side, "held-out"))
            assert tune and held_out and not tune & held_out, (kind, side)
            assert tune | held_out == set(knowledge.phrasings(kind, side, "all"))


@pytest.mark.parametrize("which", knowledge.PHRASING_SETS)
def test_a_dataset_uses_only_its_phrasing_half(which: str) -> None:
    data = knowledge.generate(40, seed=5, which=which, now=NOW)
    for q in data.questions:
        for side, fact in (("old", data.facts[q.old_fact]), ("new", data.facts[q.new_fact])):
            allowed = {p.format(p=q.person, v=fact.value, old=q.replaced)
                       for p in knowledge.phrasings(q.kind, side, which)}
            assert fact.content in allowed, (which, fact.content)


def test_the_generator_is_deterministic_for_a_seed() -> None:
    one = knowledge.generate(12, seed=7, which="tune", now=NOW)
    assert one == knowledge.generate(12, seed=7, which="tune", now=NOW)
    assert one != knowledge.generate(12, seed=8, which="tune", now=NOW)


def test_every_question_is_about_its_persons_replaced_attribute() -> None:
    data = knowledge.generate(40, seed=1, now=NOW)
    assert len(data.questions) == 40 and len({q.kind for q in data.questions}) == len(KINDS)
    assert len(data.facts) == 6 * 40
    for q in data.questions:
        old, new = data.facts[q.old_fact], data.facts[q.new_fact]
        assert (old.role, new.role) == ("old", "new")
        assert old.person == new.person == q.person and old.kind == new.kind == q.kind
        assert (old.value, new.value) == (q.replaced, q.current) and q.current != q.replaced
        assert q.person in q.text
        # Stated months ago, replaced days ago.
        assert old.created_at < NOW - timedelta(days=60) < NOW - timedelta(days=14) \
            < new.created_at < NOW


def test_every_expected_value_appears_in_exactly_one_memory() -> None:
    for which in knowledge.PHRASING_SETS:
        data = knowledge.generate(knowledge.MAX_PEOPLE, seed=2, which=which, now=NOW)
        for q in data.questions:
            holding = [i for i, f in enumerate(data.facts)
                       if q.current.lower() in f.content.lower()]
            assert holding == [q.new_fact], (which, q.current)


def test_no_pool_value_is_part_of_another() -> None:
    values = [v.lower() for pool in POOLS.values() for v in pool]
    assert len(values) == len(set(values))
    assert not [(a, b) for a in values for b in values if a != b and a in b]


def test_additive_facts_never_share_a_questions_attribute() -> None:
    assert not set(ADDITIVE) & set(KINDS)
    data = knowledge.generate(40, seed=3, now=NOW)
    asked = {(q.person, q.kind) for q in data.questions}
    additive = [f for f in data.facts if f.role == "additive"]
    assert len(additive) == 2 * 40
    assert not {(f.person, f.kind) for f in additive} & asked
    # Each distractor states the asked kind of value, but for someone else.
    for f in data.facts:
        if f.role == "distractor":
            assert (f.person, f.kind) in asked and f.value not in (
                q.current for q in data.questions)


def test_bad_sizes_and_phrasing_sets_are_refused_by_name() -> None:
    for people in (0, -1, knowledge.MAX_PEOPLE + 1, True):
        with pytest.raises(ValidationError) as raised:
            knowledge.generate(people, now=NOW)
        assert raised.value.field == "people"
    with pytest.raises(ValidationError) as raised:
        knowledge.generate(8, which="everything", now=NOW)
    assert raised.value.field == "phrasings"


def _hit(content: str, **metadata: object) -> Recalled:
    memory = Memory(id=uuid.uuid4(), agent_id="a", content=content, category="fact",
                    metadata=dict(metadata), importance=0.5, confidence=1.0,
                    created_at=NOW, updated_at=NOW)
    components = ScoreComponents(semantic=0.0, keyword=0.0, recency=0.0, importance=0.0,
                                 confidence=0.0)
    return Recalled(memory=memory, score=1.0, components=components)


def test_a_replaced_value_counts_until_a_result_is_marked_superseded() -> None:
    old = _hit("Ada lives in Lisbon.")
    new = _hit("Ada left Lisbon and moved to Oslo.")
    summary = _hit("Ada lives in Lisbon. Ada moved to Oslo.")
    ids = old.memory.id, new.memory.id
    # The new statement names the old value without stating it; a summary states both.
    assert [knowledge.states(h, "Lisbon", *ids) for h in (old, new, summary)] \
        == [True, False, True]
    assert [knowledge.states(h, "Oslo", *reversed(ids)) for h in (old, new, summary)] \
        == [False, True, True]
    assert knowledge.rank_of([new, old], "Lisbon", *ids, unmarked=True) == 2
    marked = _hit("Ada lives in Lisbon.", superseded=True)
    assert knowledge.marked_superseded(marked) and not knowledge.marked_superseded(old)
    assert knowledge.rank_of([new, marked], "Lisbon", marked.memory.id, new.memory.id,
                           unmarked=True) is None
