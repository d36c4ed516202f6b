"""Merging memories into survivors, shared by ``deduplicate`` (identical content) and
``consolidate`` (near-duplicates by embedding). Both merge only pairs that state the
same facts (``memoryd.memory.facts``), and a pair goes only while both contents are
those compared.

A merge folds the loser into its survivor (tags, access counts, importance, confidence,
last access), links survivor -> loser (``derived_from``) and moves the loser to
``evicted_memories``, so nothing is lost and ``restore`` can undo it. Both rows are kept
as versions first (cause ``merged``, the run as actor). Only current memories merge: a
superseded one is history.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd.memory.maintenance.context import JobContext
from memoryd.memory.maintenance.evicting import MOVE_GONE, RUN_ACTOR, moved_data
from memoryd.memory.maintenance.sql import current, protected


@dataclass(frozen=True)
class Merge:
    """Fold ``loser`` into ``survivor`` (same agent); ``score`` goes on the link. The
    content hashes are those of the contents whose facts were compared (``facts``)."""

    loser: uuid.UUID
    survivor: uuid.UUID
    score: float
    loser_hash: str
    survivor_hash: str


# One statement merges a whole plan: the pairs never make a round trip through Python,
# and each row is looked up once per step instead of once per statement.
#   v: the pairs that still hold, locked. The plan was read without locks: meanwhile an
#      agent may have pinned, edited or forgotten one side. FOR UPDATE re-checks the
#      conditions on the newest row versions; rows are locked in loser order.
#   gone: the losers, deleted; their newest versions feed everything after.
#   fold: survivors take the union of tags, the summed access counts and the highest
#      importance, confidence and last access of what they absorb. A survivor the fold
#      would not change is not rewritten. updated_at stays: it marks content changes
#      (what consolidate re-compares), and leaving every indexed column alone keeps the
#      update HOT (no HNSW re-insert).
#   linked: survivor -> loser ('derived_from'); the loser's own other links go.
#   kept: each survivor's row as it was before the fold, as a version (the losers' are
#      kept by the move); every CTE reads the snapshot from before the statement.
# (%-formatted: the SQL holds braces.)
_MERGE = """
WITH p AS MATERIALIZED (%(plan)s),
v AS MATERIALIZED (
    SELECT p.loser, p.survivor, p.score, s.importance AS s_importance,
           s.confidence AS s_confidence, s.last_accessed_at AS s_last_accessed_at,
           s.tags AS s_tags
    FROM p JOIN memories l ON l.id = p.loser JOIN memories s ON s.id = p.survivor
    WHERE l.agent_id = s.agent_id AND NOT %(protected)s
      AND l.archived_at IS NULL AND s.archived_at IS NULL AND %(current_l)s AND %(current_s)s
      AND (%(still_valid)s)
    ORDER BY p.loser
    FOR UPDATE OF l, s
), gone AS (
    DELETE FROM memories m USING v WHERE m.id = v.loser
    RETURNING m.id, m.agent_id, m.embedding, m AS r, v.*
), tags AS (
    SELECT g.survivor, array_agg(DISTINCT t.tag ORDER BY t.tag) AS tags
    FROM gone g, unnest((g.r).tags) AS t(tag) GROUP BY g.survivor
), sums AS (
    SELECT g.survivor, sum((g.r).access_count) AS access_count,
           max((g.r).importance) AS importance, max((g.r).confidence) AS confidence,
           max((g.r).last_accessed_at) AS last_accessed_at,
           coalesce(min(t.tags), '{}') AS tags,
           -- the survivor as locked (the same for all its rows)
           min(g.s_importance) AS s_importance, min(g.s_confidence) AS s_confidence,
           min(g.s_last_accessed_at) AS s_last_accessed_at, min(g.s_tags) AS s_tags
    FROM gone g LEFT JOIN tags t ON t.survivor = g.survivor
    GROUP BY g.survivor
), fold AS (
    UPDATE memories s SET %(fold)s
    FROM sums a
    WHERE s.id = a.survivor  -- only survivors it changes, known before looking them up
      AND (a.access_count <> 0 OR a.importance > a.s_importance
           OR a.confidence > a.s_confidence
           OR a.last_accessed_at > coalesce(a.s_last_accessed_at, '-infinity')
           OR NOT a.tags <@ a.s_tags)
), linked AS (
    INSERT INTO memory_links (agent_id, source_id, target_id, kind, score)
    SELECT g.agent_id, g.survivor, g.loser, 'derived_from', g.score FROM gone g
    ON CONFLICT DO NOTHING
), kept AS (
    INSERT INTO memory_versions (agent_id, memory_id, cause, actor, data)
    SELECT s.agent_id, s.id, 'merged', %(actor)s, %(survivor_data)s
    FROM memories s WHERE s.id = ANY(ARRAY(SELECT DISTINCT g.survivor FROM gone g))
), %(move)s
SELECT (SELECT count(*) FROM p) AS planned, (SELECT count(*) FROM moved) AS merged"""

_PLAN = """SELECT p.* FROM unnest(CAST(:losers AS uuid[]), CAST(:survivors AS uuid[]),
                             CAST(:scores AS float8[]), CAST(:loser_hashes AS text[]),
                             CAST(:survivor_hashes AS text[]))
           AS p(loser, survivor, score, loser_hash, survivor_hash)"""
# The facts were compared on these contents: an edit since voids the pair.
_UNCHANGED = "l.content_hash = p.loser_hash AND s.content_hash = p.survivor_hash"


def fold(tags: str = "a.tags") -> str:
    """The SET list folding what survivor ``s`` absorbs (aggregates ``a``; ``tags``, the
    losers' tags as an array) into it: summed access counts, the highest importance,
    confidence and last access, the union of tags."""
    return f"""access_count = s.access_count + a.access_count,
        importance = greatest(s.importance, a.importance),
        confidence = greatest(s.confidence, a.confidence),
        last_accessed_at = greatest(s.last_accessed_at, a.last_accessed_at),
        tags = s.tags || ARRAY(SELECT x FROM unnest({tags}) AS x WHERE x <> ALL(s.tags))"""


def merge_planned(session: Session, ctx: JobContext, plan_sql: str,
                  params: Mapping[str, Any], reason: str, still_valid: str = "TRUE") -> Any:
    """Merge the pairs ``plan_sql`` selects (columns loser, survivor, score) inside the
    caller's transaction: fold each loser into its survivor, link survivor -> loser
    ('derived_from'), and move the loser to ``evicted_memories`` with ``reason``.
    ``still_valid`` is SQL over the aliases ``l`` (loser), ``s`` (survivor) and ``p``
    (the plan's row). Survivors must not be losers too. The result row has ``planned``
    (pairs) and ``merged`` (memories moved)."""
    statement = text(_MERGE % {"plan": plan_sql, "protected": protected("l"),
                               "current_l": current("l"), "current_s": current("s"),
                               "still_valid": still_valid, "move": MOVE_GONE,
                               "fold": fold(), "actor": RUN_ACTOR,
                               "survivor_data": moved_data("s")})
    return session.execute(statement, {**params, "reason": reason,
                                       "run_id": ctx.run_id}).one()


def merge_into(session: Session, ctx: JobContext, merges: Sequence[Merge], reason: str,
               still_valid: str = "TRUE", params: Mapping[str, Any] | None = None) -> int:
    """``merge_planned`` for a list of pairs whose contents are still those planned on;
    returns the memories merged."""
    if not merges:
        return 0
    row = merge_planned(session, ctx, _PLAN, {
        **(params or {}), "losers": [m.loser for m in merges],
        "survivors": [m.survivor for m in merges], "scores": [m.score for m in merges],
        "loser_hashes": [m.loser_hash for m in merges],
        "survivor_hashes": [m.survivor_hash for m in merges],
    }, reason, f"({still_valid}) AND {_UNCHANGED}")
    return int(row.merged)
