"""Recall scoring: the weighted blend of components, or reciprocal-rank fusion.

Kept in plain Python over a few dozen candidates so the rules are testable
with a fixed clock; the database only produces candidates and raw components.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from memoryd.memory.classify import HALF_LIFE_DAYS
from memoryd.types import ScoreComponents

RRF_K = 60
PRIOR_TIE_BREAK = 1e-3


@dataclass(frozen=True)
class Candidate:
    row: Mapping[Any, Any]
    semantic: float          # cosine similarity
    keyword_raw: float       # sum of the matched terms' IDF, unnormalized
    vector_rank: int | None  # 1-based rank among vector candidates
    keyword_rank: int | None
    model: str = ""  # the embedding model ``semantic`` comes from, when an agent has two
    session_pos: int | None = None  # 1-based place in its session's message list, if read


class Parts(NamedTuple):
    """A candidate's components (``ScoreComponents`` without the context): a plain tuple,
    since recall scores every candidate and returns only the best few."""

    semantic: float
    keyword: float
    recency: float
    importance: float
    confidence: float

    def public(self, context: float) -> ScoreComponents:
        return ScoreComponents(**self._asdict(), context=context)


def recency(created_at: datetime, category: str, now: datetime) -> float:
    """0.5 ** (age_days / half_life); decisions (no half-life) never decay."""
    half_life = HALF_LIFE_DAYS.get(category)
    if half_life is None:
        return 1.0
    age_days = max(0.0, (now - created_at).total_seconds() / 86400.0)
    return float(0.5 ** (age_days / half_life))


def components(candidates: Sequence[Candidate], now: datetime) -> list[Parts]:
    """Each candidate's components. Semantic and keyword are both relative to the best
    candidate (its cosine, clipped to 0..1, and its keyword score are 1.0): the two
    retrievers' raw scores live on different scales (MiniLM cosines of related texts
    sit far below 1), and normalizing only one of them let the other count for less
    than its weight (see the LoCoMo results in bench/README.md). Semantic is relative to
    the best candidate of the same embedding model: cosines of two models are never
    compared (an agent whose memories are being re-embedded has both)."""
    best_semantic: dict[str, float] = {}
    for c in candidates:
        best_semantic[c.model] = max(best_semantic.get(c.model, 0.0), _clip(c.semantic))
    best_keyword = max((c.keyword_raw for c in candidates), default=0.0)
    return [
        Parts(
            semantic=_ratio(_clip(c.semantic), best_semantic[c.model]),
            keyword=_ratio(c.keyword_raw, best_keyword),
            recency=recency(c.row["created_at"], str(c.row["category"]), now),
            importance=float(c.row["importance"]),
            confidence=float(c.row["confidence"]),
        )
        for c in candidates
    ]


def _clip(value: float) -> float:
    return max(0.0, min(1.0, value))


def _ratio(value: float, best: float) -> float:
    return value / best if best > 0 else 0.0


def weight_vector(weights: Mapping[str, float]) -> Parts:
    """``weights`` (by component name) in the order of ``Parts``, for ``weighted``."""
    return Parts(**{name: float(weights[name]) for name in Parts._fields})


def weighted(parts: Parts, weights: Parts) -> float:
    """The weighted sum of ``parts`` (``weights`` from ``weight_vector``)."""
    return float(sum(map(operator.mul, parts, weights)))


def rrf(candidate: Candidate, parts: Parts, weights: Mapping[str, float]) -> float:
    """Weighted reciprocal-rank fusion of the vector and keyword rankings.

    Scaled so that first place in both lists scores 1.0. The priors (recency,
    importance, confidence) only break ties here: at k = 60 neighbouring ranks
    differ by about 1 %, so adding the priors at full weight would let a mildly
    more important memory outrank the one both retrievers put first.
    """
    w_vec, w_kw = weights["semantic"], weights["keyword"]
    fused = sum(w / (RRF_K + rank) for w, rank in ((w_vec, candidate.vector_rank),
                                                  (w_kw, candidate.keyword_rank))
                if rank is not None)
    best = (w_vec + w_kw) / (RRF_K + 1)
    priors = sum(weights[name] * float(getattr(parts, name))
                 for name in ("recency", "importance", "confidence"))
    return (fused / best if best > 0 else 0.0) + PRIOR_TIE_BREAK * priors


def with_context(scores: Mapping[Any, float], neighbours: Mapping[Any, Sequence[Any]],
                 weight: float) -> dict[Any, tuple[float, float]]:
    """Each candidate's (final score, context): context is the best own score among its
    session neighbours (0 if none), and the final score adds ``weight`` x context. Own
    scores, not final ones, are lent, so a run of adjacent turns cannot pump itself up."""
    if not neighbours:
        return {key: (own, 0.0) for key, own in scores.items()}
    out = {}
    for key, own in scores.items():
        context = max((scores[n] for n in neighbours.get(key, ()) if n in scores), default=0.0)
        out[key] = (own + weight * context, context)
    return out
