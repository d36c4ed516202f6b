"""The ``deduplicate`` job, plus the merging and checkpoint helpers ``consolidate`` shares.

deduplicate: per agent, live (non-archived) memories whose normalized content is
identical (lowercased, every run of punctuation and whitespace made one space,
trimmed) are merged into one survivor: the most recently created, except that a
decision or pinned memory in the group always survives, and is never merged away
(two of them in a group both stay). See ``merge_into`` for what a merge keeps.

Memories are compared by ``content_norm_hash``, the md5 of the normalized content that
PostgreSQL stores with each memory (migration 0004; ``normalized`` is the same
expression). Normalizing every memory on every run was most of the job's cost.

The sweep walks the duplicate groups (agent, hash) in key order, found from the
(agent_id, content_norm_hash) index alone: a range of consecutive groups holding at
most ``batch_size`` memories at a time (a group is never split; one larger than a
batch is a range of its own, merged in several batches). Each merge batch is one
short transaction. The sweep's position is checkpointed in the run's audit row, so a
follow-up run after a time-out or a crash resumes where it stopped; the next run
after a finished sweep starts a new one.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd.memory.maintenance.base import (
    MOVE_GONE,
    NIL_UUID,
    JobContext,
    JobOutcome,
    commit_without_waiting,
    job,
)
from memoryd.memory.maintenance.eviction import check_batch_size, protected

__all__ = ["NIL_UUID", "Merge", "deduplicate", "load_checkpoint", "merge_into",
           "merge_planned", "normalized", "save_checkpoint", "valid_state"]


def normalized(alias: str) -> str:
    """SQL for the content as deduplication compares it. Migration 0004 stores its md5
    as ``content_norm_hash`` (NULL when empty); the two must stay the same expression."""
    return (f"btrim(regexp_replace(lower({alias}.content), "
            "'[[:punct:][:space:]]+', ' ', 'g'))")


# --- checkpoints --------------------------------------------------------------------
# A job's progress lives in its run's ``maintenance_runs.stats -> 'checkpoint'``,
# written in the same transaction as the batch it describes. The latest checkpoint of
# the same job and scope is where the next run starts: it survives crashes (the row
# stays 'running'), failures and time-outs, and needs no schema of its own.


def load_checkpoint(ctx: JobContext, job_name: str) -> dict[str, Any]:
    """The latest checkpoint a non-dry run of ``job_name`` in this scope left, or {}."""
    with ctx.store.session() as session:
        value = session.execute(text("""
            SELECT stats -> 'checkpoint' FROM maintenance_runs
            WHERE job = :job AND NOT dry_run AND stats -> 'checkpoint' IS NOT NULL
              AND agent_id IS NOT DISTINCT FROM :agent_id AND id IS DISTINCT FROM :run_id
            ORDER BY id DESC LIMIT 1
        """), {"job": job_name, "agent_id": ctx.agent_id, "run_id": ctx.run_id}).scalar()
    return dict(value) if isinstance(value, dict) else {}


def valid_state(value: object, keys: Sequence[str]) -> dict[str, Any] | None:
    """A copy of a checkpointed state with all of ``keys``; None (start afresh) if it has
    not, e.g. one written by an older version of the job."""
    if isinstance(value, dict) and all(key in value for key in keys):
        return dict(value)
    return None


def save_checkpoint(session: Session, ctx: JobContext, checkpoint: Mapping[str, Any]) -> None:
    """Record progress in this run's audit row, inside the caller's transaction."""
    if ctx.dry_run or ctx.run_id is None:
        return
    session.execute(text("""
        UPDATE maintenance_runs
        SET stats = stats || jsonb_build_object('checkpoint', CAST(:cp AS jsonb))
        WHERE id = :id
    """), {"cp": json.dumps(checkpoint), "id": ctx.run_id})


# --- merging ------------------------------------------------------------------------


@dataclass(frozen=True)
class Merge:
    """Fold ``loser`` into ``survivor`` (same agent); ``score`` goes on the link."""

    loser: uuid.UUID
    survivor: uuid.UUID
    score: float = 1.0


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
# (%-formatted: the SQL holds braces.)
_MERGE = """
WITH %(prelude)s p AS MATERIALIZED (%(plan)s),
v AS MATERIALIZED (
    SELECT p.loser, p.survivor, p.score, s.importance AS s_importance,
           s.confidence AS s_confidence, s.last_accessed_at AS s_last_accessed_at,
           s.tags AS s_tags
    FROM p JOIN memories l ON l.id = p.loser JOIN memories s ON s.id = p.survivor
    WHERE l.agent_id = s.agent_id AND NOT %(protected)s
      AND l.archived_at IS NULL AND s.archived_at IS NULL AND (%(still_valid)s)
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
    UPDATE memories s SET
        access_count = s.access_count + a.access_count,
        importance = greatest(s.importance, a.importance),
        confidence = greatest(s.confidence, a.confidence),
        last_accessed_at = greatest(s.last_accessed_at, a.last_accessed_at),
        tags = s.tags || ARRAY(SELECT x FROM unnest(a.tags) AS x WHERE x <> ALL(s.tags))
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
), %(move)s
SELECT (SELECT count(*) FROM p) AS planned, (SELECT count(*) FROM moved) AS merged %(report)s"""

_PLAN = """SELECT p.* FROM unnest(CAST(:losers AS uuid[]), CAST(:survivors AS uuid[]),
                             CAST(:scores AS float8[])) AS p(loser, survivor, score)"""


def merge_planned(session: Session, ctx: JobContext, plan_sql: str,
                  params: Mapping[str, Any], reason: str, still_valid: str = "TRUE", *,
                  prelude: str = "", report: str = "") -> Any:
    """Merge the pairs ``plan_sql`` selects (columns loser, survivor, score) inside the
    caller's transaction: fold each loser into its survivor, link survivor -> loser
    ('derived_from'), and move the loser to ``evicted_memories`` with ``reason``.
    ``still_valid`` is SQL over the aliases ``l`` (loser) and ``s`` (survivor). Survivors
    must not be losers too. ``prelude`` (CTEs, each followed by a comma) comes before
    the plan, and ``report`` adds columns to the result row, which has ``planned`` (pairs)
    and ``merged`` (memories moved)."""
    statement = text(_MERGE % {"prelude": prelude, "plan": plan_sql,
                               "protected": protected("l"), "still_valid": still_valid,
                               "move": MOVE_GONE, "report": report})
    return session.execute(statement, {**params, "reason": reason,
                                       "run_id": ctx.run_id}).one()


def merge_into(session: Session, ctx: JobContext, merges: Sequence[Merge], reason: str,
               still_valid: str = "TRUE", params: Mapping[str, Any] | None = None) -> int:
    """``merge_planned`` for a list of pairs; returns the memories merged."""
    if not merges:
        return 0
    row = merge_planned(session, ctx, _PLAN, {
        **(params or {}), "losers": [m.loser for m in merges],
        "survivors": [m.survivor for m in merges], "scores": [m.score for m in merges],
    }, reason, still_valid)
    return int(row.merged)


# --- the job ------------------------------------------------------------------------
# Groups are found from ix_memories_agent_norm_hash alone (an index-only scan of agent and
# stored hash, migration 0004); only the rows of groups of two or more memories are read
# from the table. One statement per batch picks the next groups after the sweep's
# position, ranks their rows and merges the losers; the position is checkpointed in the
# same transaction.


def _groups_sql(ctx: JobContext) -> str:
    """Keys of the groups of two or more memories after (:lo_agent, :lo_hash), in key
    order. Archived memories count here (the index does not know them); they are left
    out when the group's rows are ranked."""
    return f"""SELECT m.agent_id, m.content_norm_hash AS hash, count(*) AS n
        FROM memories m
        WHERE (m.agent_id, m.content_norm_hash) > (:lo_agent, CAST(:lo_hash AS uuid))
          AND m.content_norm_hash IS NOT NULL AND {ctx.agent_clause()}
        GROUP BY m.agent_id, m.content_norm_hash HAVING count(*) > 1"""


def _losers_sql(groups: str) -> str:
    """Losers (with their survivor) among the groups in CTE ``groups``."""
    return f"""
        SELECT r.id AS loser, r.survivor, CAST(1 AS float8) AS score FROM (
            SELECT m.id, {protected()} AS protected, first_value(m.id) OVER w AS survivor,
                   row_number() OVER w AS rn
            FROM {groups} g JOIN memories m
              ON m.agent_id = g.agent_id AND m.content_norm_hash = g.hash
            WHERE m.archived_at IS NULL
            WINDOW w AS (PARTITION BY m.agent_id, m.content_norm_hash
                         ORDER BY {protected()} DESC, m.created_at DESC, m.id DESC)
        ) r
        WHERE r.rn > 1 AND NOT r.protected"""


# The batch's groups: the next ones after the sweep's position holding at most :batch
# memories in all, or the next one alone if it holds more (merged over several batches).
# Groups hold two or more memories, so at most :groups = :batch / 2 of them fit.
_PICK = """g AS MATERIALIZED ({groups} ORDER BY m.agent_id, m.content_norm_hash LIMIT :groups),
picked AS MATERIALIZED (
    SELECT r.agent_id, r.hash FROM (
        SELECT g.agent_id, g.hash, sum(g.n) OVER k AS upto, row_number() OVER k AS k
        FROM g WINDOW k AS (ORDER BY g.agent_id, g.hash)) r
    WHERE r.upto <= :batch OR r.k = 1),"""
# Where the batch ends, and whether no group follows it.
_REPORT = """, NOT EXISTS (SELECT FROM picked) AS empty,
    (SELECT k.agent_id FROM picked k ORDER BY k.agent_id DESC, k.hash DESC LIMIT 1) AS last_agent,
    (SELECT CAST(k.hash AS text) FROM picked k
     ORDER BY k.agent_id DESC, k.hash DESC LIMIT 1) AS last_hash,
    (SELECT count(*) FROM g) = (SELECT count(*) FROM picked)
        AND (SELECT count(*) FROM g) < :groups AS at_end"""

# Re-checked on the locked rows: the content of either side may have changed since the
# plan was read. The hash is a function of the content, so equal hashes mean equal
# normalized contents (an md5 collision aside).
_STILL_DUPLICATES = "l.content_norm_hash = s.content_norm_hash"

_NEW_SWEEP = {"after_agent": "", "after_hash": NIL_UUID, "done": False}


def _would_merge(ctx: JobContext, sweep: Mapping[str, Any]) -> int:
    """What the rest of the sweep would merge (a dry run: one read, no batches)."""
    with ctx.store.session() as session:
        return int(session.execute(text(
            f"WITH g AS ({_groups_sql(ctx)}) SELECT count(*) FROM ({_losers_sql('g')}) d"), {
            "lo_agent": sweep["after_agent"], "lo_hash": sweep["after_hash"],
            "agent_id": ctx.agent_id}).scalar_one())


def _merge_batch(ctx: JobContext, sweep: dict[str, Any]) -> int:
    """Merge the next batch of groups and move the sweep on, in one transaction."""
    with ctx.store.session() as session:
        commit_without_waiting(session)
        row = merge_planned(
            session, ctx, f"{_losers_sql('picked')} ORDER BY r.id LIMIT :batch", {
                "lo_agent": sweep["after_agent"], "lo_hash": sweep["after_hash"],
                "agent_id": ctx.agent_id, "batch": ctx.batch_size,
                "groups": max(1, ctx.batch_size // 2)},
            "duplicate", _STILL_DUPLICATES,
            prelude=_PICK.format(groups=_groups_sql(ctx)), report=_REPORT)
        if row.empty:
            sweep.update(_NEW_SWEEP, done=True)
        # A group larger than a batch stays where it is until merged (or it merged nothing).
        elif int(row.planned) < ctx.batch_size or int(row.merged) == 0:
            sweep.update(after_agent=str(row.last_agent), after_hash=str(row.last_hash),
                         done=bool(row.at_end))
        save_checkpoint(session, ctx, {"sweep": sweep})
    return int(row.merged)


@job("deduplicate", "Merge memories of one agent whose normalized content is identical.")
def deduplicate(ctx: JobContext) -> JobOutcome:
    check_batch_size(ctx)
    # A dry run starts where a real run would, and reports what that run would merge.
    previous = valid_state(load_checkpoint(ctx, "deduplicate").get("sweep"),
                           ("after_agent", "after_hash", "done"))
    resumed = previous is not None and not previous["done"]
    sweep: dict[str, Any] = (previous if previous is not None and resumed
                             else dict(_NEW_SWEEP))
    if ctx.dry_run:
        merged = _would_merge(ctx, sweep)
        return JobOutcome({"merged": merged, "resumed": resumed,
                           "checkpoint": {"sweep": sweep}})
    merged = 0
    while not sweep["done"]:
        merged += _merge_batch(ctx, sweep)
        if ctx.out_of_time():
            break
    stats = {"merged": merged, "resumed": resumed, "checkpoint": {"sweep": sweep}}
    return JobOutcome(stats, complete=bool(sweep["done"]))
