"""Recall's last steps: the candidates scored (``scoring``) and ordered, and in deep mode
reordered by the LLM."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import structlog

from memoryd import clock
from memoryd.config import Settings
from memoryd.errors import LLMError
from memoryd.memory import scoring
from memoryd.memory.rows import to_memory
from memoryd.types import Recalled

log = structlog.get_logger(__name__)


def rank(found: Sequence[scoring.Candidate], neighbours: Mapping[Any, Sequence[Any]],
         settings: Settings, *, keep: int | None = None,
         period: tuple[datetime, datetime] | None = None) -> list[Recalled]:
    """The candidates best first (ties by id), scored as ``settings`` say, memories
    created in ``period`` (the period the query names) lifted by
    ``settings.recall_time_boost``; only the first ``keep`` (all if None) become
    ``Recalled`` objects, which is most of the ranking's cost."""
    parts = scoring.components(found, clock.now())
    own = _own_scores(found, parts, settings)
    final = scoring.with_context(own, neighbours, settings.recall_context_weight)
    scores = [final[c.row["id"]][0] for c in found]
    if period is not None:
        start, end = period
        boost = settings.recall_time_boost
        scores = [score + boost if start <= c.row["created_at"] < end else score
                  for c, score in zip(found, scores, strict=True)]
    names = [str(c.row["id"]) for c in found]
    order = sorted(range(len(found)), key=lambda i: (-round(scores[i], 6), names[i]))
    hits = []
    for i in order[:keep]:
        context = final[found[i].row["id"]][1]
        hits.append(Recalled(
            memory=to_memory(found[i].row), score=round(scores[i], 6),
            components=parts[i].public(round(context, 6))))
    return hits


def _own_scores(found: Sequence[scoring.Candidate], parts: Sequence[scoring.Parts],
                settings: Settings) -> dict[Any, float]:
    """Each candidate's score from its own components, by id."""
    weights = settings.weights()
    if settings.recall_fusion == "rrf":
        return {c.row["id"]: scoring.rrf(c, p, weights) for c, p in zip(found, parts, strict=True)}
    vector = scoring.weight_vector(weights)
    return {c.row["id"]: scoring.weighted(p, vector) for c, p in zip(found, parts, strict=True)}


def rerank(query: str, ranked: list[Recalled]) -> list[Recalled]:
    """Deep mode: let the LLM order the fast candidates; fall back on any failure."""
    from memoryd.memory import llm as llm_mod

    model = llm_mod.get_llm()
    if llm_mod.is_fallback(model) or not ranked:
        log.warning("recall.deep_fallback", reason="no LLM configured")
        return ranked
    try:
        order = llm_mod.rerank(model, query, [hit.memory.content for hit in ranked])
    except LLMError as exc:
        log.warning("recall.deep_fallback", reason=type(exc).__name__)
        return ranked
    picked = [ranked[i] for i in dict.fromkeys(order) if 0 <= i < len(ranked)]
    return picked + [hit for hit in ranked if hit not in picked]
