"""The relevance floor of the ADK and AutoGen adapters: their frameworks' memories drop
what does not match the query (ADK's ``InMemoryMemoryService`` keeps only events sharing
a word with it, AutoGen's ``ChromaDBVectorMemory`` only those over ``score_threshold``),
where memoryd's recall always answers its best ``limit``.

recall ranks, it does not judge: its semantic and keyword parts are relative to the
query's best candidate (the best semantic match scores 1.0 however unrelated it is), and
its score adds parts that do not depend on the query at all (recency, importance,
confidence, and a session neighbour's share, which lifts every event of a session).
The one absolute sign in what recall answers is the keyword part: a word shared with the
query. ``relevance`` weighs the two query parts as recall's default weights do (semantic
twice keyword) and leaves the rest out, so a memory sharing no word with the query is at
most 2/3, and the default floor ``DEFAULT_MIN_SCORE`` (0.7) keeps what shares a word with
the query and ranks near its best semantic match. Measured (tests/integration/
test_adk_contract.py): unrelated queries keep nothing; a related query that shares no
word with the memory (a paraphrase) keeps nothing either, the price of a floor recall's
relative parts can express; ``min_score=None`` turns the floor off.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from memoryd.errors import ValidationError
from memoryd.types import Recalled

SEMANTIC_SHARE = 2 / 3  # recall's default weights: semantic 0.50, keyword 0.25
DEFAULT_MIN_SCORE = 0.7


def relevance(hit: Recalled) -> float:
    """How well ``hit`` answers its query, 0 to 1, from recall's query parts only."""
    parts = hit.components
    return round(SEMANTIC_SHARE * parts.semantic + (1 - SEMANTIC_SHARE) * parts.keyword, 6)


def relevant(hits: Iterable[Recalled], min_score: float | None) -> list[Recalled]:
    """The hits at or over the floor, in recall's order (all of them without a floor)."""
    if min_score is None:
        return list(hits)
    return [hit for hit in hits if relevance(hit) >= min_score]


def checked_min_score(value: object) -> float | None:
    """A floor from 0 to 1, or None for none (``ValidationError`` naming ``min_score``)."""
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or not 0 <= value <= 1):
        raise ValidationError("min_score", "must be a number from 0 to 1, or None")
    return float(value)
