"""Recall's last steps: the candidates scored (``scoring``) and ordered, and in deep mode
reordered by the LLM."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import structlog

from memoryd import clock
from memoryd.config import Settings
from memoryd.errors import LLMError
from memoryd.memory import asking, scoring
from memoryd.memory.rows import to_memory
from memoryd.types import Recalled

log = structlog.get_logger(__name__)


class Scored(NamedTuple):
    """A candidate's place in the ranking: its id, final score and components."""

    id: Any
    score: float
    parts: scoring.Parts
    context: float


def order(found: Sequence[scoring.Candidate], neighbours: Mapping[Any, Sequence[Any]],
          settings: Settings, *, period: tuple[datetime, datetime] | None = None,
          asked: asking.Asked | None = None) -> list[Scored]:
    """The candidates best first (ties by id), scored as ``settings`` say, memories
    created in ``period`` (the period the query names) lifted by
    ``settings.recall_time_boost``, and, when the query asks for one attribute of a
    named subject (``asked``), memories stating it lifted and those stating it of
    someone close to the subject lowered by ``settings.recall_fit_boost``. Scores are
    comparable within one recall, not probabilities: the context share and the boosts
    add to the weighted sum, so the top is the weights' sum x (1 + context weight) +
    boosts (1.65 with the defaults)."""
    parts = scoring.components(found, clock.now())
    own = _own_scores(found, parts, settings)
    final = scoring.with_context(own, neighbours, settings.recall_context_weight)
    scored = []
    for c, part in zip(found, parts, strict=True):
        score, context = final[c.row["id"]]
        if period is not None and period[0] <= c.row["created_at"] < period[1]:
            score += settings.recall_time_boost
        if asked is not None:
            score += settings.recall_fit_boost * asking.fit(asked, c.row["about"])
        scored.append(Scored(c.row["id"], round(score, 6), part, round(context, 6)))
    scored.sort(key=lambda s: (-s.score, str(s.id)))
    return scored


def hits(scored: Sequence[Scored], rows: Mapping[Any, Mapping[Any, Any]]) -> list[Recalled]:
    """The ``Recalled`` objects of ``scored``, in its order, from the memories' whole
    ``rows`` by id; a memory without a row (deleted since the candidates were read) is
    left out."""
    return [Recalled(memory=to_memory(rows[s.id]), score=s.score,
                     components=s.parts.public(s.context))
            for s in scored if s.id in rows]


def _own_scores(found: Sequence[scoring.Candidate], parts: Sequence[scoring.Parts],
                settings: Settings) -> dict[Any, float]:
    """Each candidate's score from its own components, by id."""
    weights = settings.weights()
    if settings.recall_fusion == "rrf":
        return {c.row["id"]: scoring.rrf(c, p, weights) for c, p in zip(found, parts, strict=True)}
    vector = scoring.weight_vector(weights)
    return {c.row["id"]: scoring.weighted(p, vector) for c, p in zip(found, parts, strict=True)}


def rerank(query: str, scored: list[Scored], contents: Mapping[Any, str]) -> list[Scored]:
    """Deep mode: let the LLM order the fast candidates (``contents`` by id); fall back
    on any failure."""
    from memoryd.memory import llm as llm_mod

    model = llm_mod.get_llm()
    if llm_mod.is_fallback(model) or not scored:
        log.warning("recall.deep_fallback", reason="no LLM configured")
        return scored
    try:
        picked_order = llm_mod.rerank(model, query, [contents.get(s.id, "") for s in scored])
    except LLMError as exc:
        log.warning("recall.deep_fallback", reason=type(exc).__name__)
        return scored
    picked = [scored[i] for i in dict.fromkeys(picked_order) if 0 <= i < len(scored)]
    ids = {s.id for s in picked}
    return picked + [s for s in scored if s.id not in ids]
