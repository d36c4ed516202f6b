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
         settings: Settings, *, keep: int | None = None) -> list[Recalled]:
    """The candidates best first (ties by id), scored as ``settings`` say; only the first
    ``keep`` (all if None) become ``Recalled`` objects, which is most of the ranking's
    cost."""
    parts = scoring.components(found, clock.now())
    own = _own_scores(found, parts, settings)
    final = scoring.with_context(own, neighbours, settings.recall_context_weight)
    order = sorted(range(len(found)), key=lambda i: (-round(final[found[i].row["id"]][0], 6),
                                                     str(found[i].row["id"])))
    hits = []
    for i in order[:keep]:
        score, context = final[found[i].row["id"]]
        hits.append(Recalled(
            memory=to_memory(found[i].row), score=round(score, 6),
            components=parts[i].public(round(context, 6))))
    return hits


def best(found: Sequence[scoring.Candidate], settings: Settings,
         n: int) -> list[scoring.Candidate]:
    """The ``n`` candidates with the best own scores (no context), best first."""
    own = _own_scores(found, scoring.components(found, clock.now()), settings)
    return sorted(found, key=lambda c: (-own[c.row["id"]], str(c.row["id"])))[:n]


def _own_scores(found: Sequence[scoring.Candidate], parts: Sequence[scoring.Parts],
                settings: Settings) -> dict[Any, float]:
    """Each candidate's score from its own components, by id."""
    weights = settings.weights()
    if settings.recall_fusion == "rrf":
        return {c.row["id"]: scoring.rrf(c, p, weights) for c, p in zip(found, parts, strict=True)}
    vector = scoring.weight_vector(weights)
    return {c.row["id"]: scoring.weighted(p, vector) for c, p in zip(found, parts, strict=True)}


def favour_period(ranked: list[Recalled], period: tuple[datetime, datetime],
                  boost: float) -> list[Recalled]:
    """``boost`` added to the score of each memory created in ``period`` (the period the
    query names), best first again."""
    start, end = period
    moved = [h.model_copy(update={"score": round(h.score + boost, 6)})
             if start <= h.memory.created_at < end else h for h in ranked]
    return sorted(moved, key=lambda h: (-h.score, str(h.memory.id)))


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
