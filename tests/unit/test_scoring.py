"""Unit tests of recall's scoring rules (``memoryd.memory.scoring``) and ranking
(``memoryd.memory.ranking``): plain Python over hand-made candidates and a fixed clock,
no database."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memoryd import clock
from memoryd.config import Settings
from memoryd.memory import ranking, scoring
from memoryd.memory.scoring import Candidate, Parts

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
WEIGHTS = {"semantic": 0.5, "keyword": 0.25, "recency": 0.1, "importance": 0.1,
           "confidence": 0.05}


def _row(*, category: str = "fact", age_days: float = 0.0, importance: float = 0.5,
         confidence: float = 1.0, **extra: Any) -> dict[str, Any]:
    created = NOW - timedelta(days=age_days)
    return {"id": uuid.uuid4(), "agent_id": "a", "content": "c", "role": None,
            "session_id": None, "key": None, "category": category, "tags": [],
            "source": None, "metadata": None, "importance": importance,
            "confidence": confidence, "pinned": False, "access_count": 0,
            "last_accessed_at": None, "created_at": created, "updated_at": created,
            "expires_at": None, "archived_at": None, "valid_from": None, "valid_to": None,
            "superseded_by": None, "about": None, **extra}


def _candidate(semantic: float = 0.5, keyword_raw: float = 0.0,
               vector_rank: int | None = None, keyword_rank: int | None = None,
               **row: Any) -> Candidate:
    return Candidate(row=_row(**row), semantic=semantic, keyword_raw=keyword_raw,
                     vector_rank=vector_rank, keyword_rank=keyword_rank)


# --- recency ------------------------------------------------------------------------
@pytest.mark.parametrize(("category", "half_life"), [
    ("task", 7), ("event", 14), ("fact", 30), ("reflection", 60), ("preference", 90)])
def test_recency_halves_every_half_life_of_the_category(category: str,
                                                         half_life: float) -> None:
    def at(days: float) -> float:
        return scoring.recency(NOW - timedelta(days=days), category, NOW)

    assert at(0) == 1.0
    assert at(half_life) == pytest.approx(0.5)
    assert at(2 * half_life) == pytest.approx(0.25)


def test_a_decision_never_loses_recency() -> None:
    assert scoring.recency(NOW - timedelta(days=3650), "decision", NOW) == 1.0


def test_a_memory_dated_in_the_future_counts_as_new() -> None:
    assert scoring.recency(NOW + timedelta(days=5), "task", NOW) == 1.0


# --- components ---------------------------------------------------------------------
def test_semantic_and_keyword_are_relative_to_the_best_candidate() -> None:
    parts = scoring.components([_candidate(semantic=0.6, keyword_raw=4.0),
                                _candidate(semantic=0.3, keyword_raw=1.0)], NOW)
    assert (parts[0].semantic, parts[0].keyword) == (1.0, 1.0)
    assert parts[1].semantic == pytest.approx(0.5)
    assert parts[1].keyword == pytest.approx(0.25)


def test_semantic_is_relative_to_the_best_candidate_of_the_same_model() -> None:
    """Two models' cosines are never compared; the keyword side is shared."""
    found = [replace(_candidate(semantic=0.8, keyword_raw=2.0), model="old"),
             replace(_candidate(semantic=0.4), model="old"),
             replace(_candidate(semantic=0.5, keyword_raw=4.0), model="new"),
             replace(_candidate(semantic=0.25), model="new")]
    parts = scoring.components(found, NOW)
    assert [p.semantic for p in parts] == pytest.approx([1.0, 0.5, 1.0, 0.5])
    assert [p.keyword for p in parts] == pytest.approx([0.5, 0.0, 1.0, 0.0])


def test_negative_cosines_are_clipped_to_zero() -> None:
    parts = scoring.components([_candidate(semantic=0.4), _candidate(semantic=-0.2)], NOW)
    assert parts[1].semantic == 0.0


def test_without_any_keyword_match_every_keyword_component_is_zero() -> None:
    parts = scoring.components([_candidate(), _candidate(semantic=0.1)], NOW)
    assert [p.keyword for p in parts] == [0.0, 0.0]


def test_priors_come_from_the_row_and_the_clock() -> None:
    (parts,) = scoring.components([_candidate(category="task", age_days=7,
                                              importance=0.8, confidence=0.6)], NOW)
    assert parts.recency == pytest.approx(0.5)
    assert (parts.importance, parts.confidence) == (0.8, 0.6)


def test_no_candidates_have_no_components() -> None:
    assert scoring.components([], NOW) == []


# --- the weighted blend --------------------------------------------------------------
def test_the_weighted_score_is_the_sum_of_weight_times_component() -> None:
    parts = Parts(semantic=1.0, keyword=0.5, recency=0.25, importance=0.8, confidence=1.0)
    expected = 0.5 * 1.0 + 0.25 * 0.5 + 0.1 * 0.25 + 0.1 * 0.8 + 0.05 * 1.0
    assert scoring.weighted(parts, scoring.weight_vector(WEIGHTS)) == pytest.approx(expected)


def test_the_weight_vector_follows_the_order_of_the_components() -> None:
    vector = scoring.weight_vector({**WEIGHTS, "keyword": 0.9})
    assert vector.keyword == 0.9 and vector.semantic == 0.5
    assert vector._fields == Parts._fields


# --- reciprocal-rank fusion --------------------------------------------------------
def _no_priors() -> Parts:
    return Parts(semantic=0.0, keyword=0.0, recency=0.0, importance=0.0, confidence=0.0)


def test_first_in_both_lists_scores_one_plus_a_tiny_prior() -> None:
    first = _candidate(vector_rank=1, keyword_rank=1)
    assert scoring.rrf(first, _no_priors(), WEIGHTS) == pytest.approx(1.0)
    full = Parts(semantic=0.0, keyword=0.0, recency=1.0, importance=1.0, confidence=1.0)
    assert scoring.rrf(first, full, WEIGHTS) == pytest.approx(
        1.0 + scoring.PRIOR_TIE_BREAK * (0.1 + 0.1 + 0.05))


def test_rrf_sums_each_list_by_its_weight_over_k_plus_rank() -> None:
    only_vector = _candidate(vector_rank=3)
    best = (0.5 + 0.25) / (scoring.RRF_K + 1)
    assert scoring.rrf(only_vector, _no_priors(), WEIGHTS) == pytest.approx(
        0.5 / (scoring.RRF_K + 3) / best)
    assert scoring.rrf(_candidate(), _no_priors(), WEIGHTS) == 0.0


def test_priors_only_break_ties_in_rrf() -> None:
    """Full priors on the second in both lists do not lift it above the first."""
    full = Parts(semantic=0.0, keyword=0.0, recency=1.0, importance=1.0, confidence=1.0)
    first = scoring.rrf(_candidate(vector_rank=1, keyword_rank=1), _no_priors(), WEIGHTS)
    second = scoring.rrf(_candidate(vector_rank=2, keyword_rank=2), full, WEIGHTS)
    assert second < first


def test_rrf_without_retriever_weights_scores_only_the_priors() -> None:
    weights = {**WEIGHTS, "semantic": 0.0, "keyword": 0.0}
    full = Parts(semantic=0.0, keyword=0.0, recency=1.0, importance=1.0, confidence=1.0)
    assert scoring.rrf(_candidate(vector_rank=1, keyword_rank=1), full, weights) == \
        pytest.approx(scoring.PRIOR_TIE_BREAK * 0.25)


# --- session context --------------------------------------------------------------
def test_with_context_lends_own_scores_not_final_scores() -> None:
    """In a run a - b - c, b lends its own score to a and c, not the one a and c
    raised: a run of adjacent turns cannot pump itself up."""
    own = {"a": 0.2, "b": 0.9, "c": 0.4}
    neighbours = {"a": ["b"], "b": ["a", "c"], "c": ["b"]}
    out = scoring.with_context(own, neighbours, 0.5)
    assert out["b"] == pytest.approx((0.9 + 0.5 * 0.4, 0.4))  # the best neighbour's own
    assert out["a"] == pytest.approx((0.2 + 0.5 * 0.9, 0.9))
    assert out["c"] == pytest.approx((0.4 + 0.5 * 0.9, 0.9))


def test_a_candidate_without_neighbours_keeps_its_own_score() -> None:
    out = scoring.with_context({"a": 0.3, "b": 0.6}, {"b": ["x"]}, 0.5)
    assert out == {"a": (0.3, 0.0), "b": (0.6, 0.0)}  # "x" is no candidate
    assert scoring.with_context({"a": 0.3}, {}, 0.5) == {"a": (0.3, 0.0)}


# --- ranking ------------------------------------------------------------------------
@pytest.fixture
def fixed_clock() -> Iterator[None]:
    clock.set_clock(lambda: NOW)
    yield
    clock.set_clock(None)


def test_ranking_reads_memoryds_clock(fixed_clock: None) -> None:
    """A 7-day-old task has half its recency at the (fixed) time memoryd's clock says."""
    (scored,) = ranking.order([_candidate(category="task", age_days=7)], {}, Settings())
    assert scored.parts.recency == pytest.approx(0.5)


def test_ranking_orders_best_first(fixed_clock: None) -> None:
    found = [_candidate(semantic=0.2), _candidate(semantic=0.8), _candidate(semantic=0.5)]
    scored = ranking.order(found, {}, Settings())
    assert [s.id for s in scored] == [found[i].row["id"] for i in (1, 2, 0)]
    assert scored[0].score > scored[1].score > scored[2].score


def test_a_named_period_lifts_its_memories_by_the_boost(fixed_clock: None) -> None:
    old, new = _candidate(semantic=0.8, age_days=40), _candidate(semantic=0.7, age_days=1)
    period = (NOW - timedelta(days=2), NOW)
    plain = {s.id: s.score for s in ranking.order([old, new], {}, Settings())}
    lifted = ranking.order([old, new], {}, Settings(recall_time_boost=0.5), period=period)
    assert lifted[0].id == new.row["id"]
    assert lifted[0].score == pytest.approx(plain[new.row["id"]] + 0.5)
    assert lifted[1].score == pytest.approx(plain[old.row["id"]])


def test_hits_come_from_the_whole_rows_and_skip_memories_without_one(
        fixed_clock: None) -> None:
    """The candidate query reads only what ranking needs; a hit is built from the row
    ``recall.touch`` read, and a memory deleted meanwhile (no row) is left out."""
    found = [_candidate(semantic=0.9), _candidate(semantic=0.5)]
    scored = ranking.order(found, {}, Settings())
    whole = {found[1].row["id"]: {**found[1].row, "content": "the whole row"}}
    (hit,) = ranking.hits(scored, whole)
    assert hit.id == found[1].row["id"] and hit.content == "the whole row"
    assert hit.score == scored[1].score


# --- the score's range ----------------------------------------------------------------
def _highest_score(settings: Settings) -> float:
    """The documented maximum: the best own score (the sum of the weights; with rrf 1.0
    plus the priors' tie-break), lifted by the context share of an equally good
    neighbour and by the named period's boost."""
    weights = settings.weights()
    priors = sum(weights[name] for name in ("recency", "importance", "confidence"))
    own = (1.0 + scoring.PRIOR_TIE_BREAK * priors if settings.recall_fusion == "rrf"
           else sum(weights.values()))
    return own * (1.0 + settings.recall_context_weight) + settings.recall_time_boost


def _perfect() -> Candidate:
    """A candidate with every component at its top: the best cosine and keyword score,
    vector and keyword rank 1, new, a decision (never decays), importance and confidence
    1."""
    return _candidate(semantic=1.0, keyword_raw=3.0, vector_rank=1, keyword_rank=1,
                      category="decision", importance=1.0, confidence=1.0)


@pytest.mark.parametrize("settings", [Settings(), Settings(recall_fusion="rrf"),
                                      Settings(weight_semantic=0.9, recall_time_boost=0.0),
                                      Settings(recall_context_weight=1.0)],
                         ids=["defaults", "rrf", "heavier-semantic-no-boost", "full-context"])
def test_a_perfect_turn_next_to_a_perfect_turn_in_the_named_period_scores_the_maximum(
        fixed_clock: None, settings: Settings) -> None:
    a, b = _perfect(), _perfect()
    neighbours = {a.row["id"]: [b.row["id"]], b.row["id"]: [a.row["id"]]}
    period = (NOW - timedelta(days=1), NOW + timedelta(days=1))
    scored = ranking.order([a, b], neighbours, settings, period=period)
    assert [s.score for s in scored] == pytest.approx([_highest_score(settings)] * 2)


def test_no_candidate_scores_above_the_maximum(fixed_clock: None) -> None:
    rng = random.Random(7)
    period = (NOW - timedelta(days=30), NOW)
    for fusion in ("weighted", "rrf"):
        settings = Settings(recall_fusion=fusion)
        found = [_candidate(semantic=rng.uniform(-0.2, 1.0), keyword_raw=rng.uniform(0, 5),
                            vector_rank=rng.choice([None, *range(1, 20)]),
                            keyword_rank=rng.choice([None, *range(1, 20)]),
                            category=rng.choice(["fact", "decision", "task"]),
                            age_days=rng.uniform(0, 60), importance=rng.random(),
                            confidence=rng.random()) for _ in range(200)]
        ids = [c.row["id"] for c in found]
        neighbours = {key: [ids[i - 1], ids[(i + 1) % len(ids)]] for i, key in enumerate(ids)}
        top = ranking.order(found, neighbours, settings, period=period)[0].score
        assert 0.0 < top <= _highest_score(settings) + 1e-6


def test_a_memory_stating_the_asked_attribute_is_lifted_and_a_relatives_lowered() -> None:
    from memoryd.memory import asking

    asked = asking.asked("Where does Ilvar Ostberg live?")
    answer = _candidate(semantic=0.8, about=["ilvar ostberg||residence"])
    sister = _candidate(semantic=0.9, about=["ilvar ostberg|sister|residence"])
    other = _candidate(semantic=0.85, about=None)
    settings = Settings()
    plain = {s.id: s.score for s in ranking.order([answer, sister, other], {}, settings)}
    fitted = ranking.order([answer, sister, other], {}, settings, asked=asked)
    assert fitted[0].id == answer.row["id"]
    by_id = {s.id: s.score for s in fitted}
    boost = settings.recall_fit_boost
    assert by_id[answer.row["id"]] == pytest.approx(plain[answer.row["id"]] + boost)
    assert by_id[sister.row["id"]] == pytest.approx(plain[sister.row["id"]] - boost)
    assert by_id[other.row["id"]] == pytest.approx(plain[other.row["id"]])
