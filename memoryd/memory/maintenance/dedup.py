"""The ``deduplicate`` job, plus the merging and checkpoint helpers ``consolidate`` shares.

deduplicate: per agent, live (non-archived) memories whose normalized content is
identical (lowercased, every run of punctuation and whitespace made one space,
trimmed) are merged into one survivor: the most recently created, except that a
decision or pinned memory in the group always survives, and is never merged away
(two of them in a group both stay). See ``merge_into`` for what a merge keeps.

The sweep walks agents in key order, a range of about ``batch_size`` rows at a time
(an agent is never split; one agent larger than a batch is one range). Each merge
batch is one short transaction. The sweep's position is checkpointed in the run's
audit row, so a follow-up run after a time-out or a crash resumes where it stopped;
the next run after a finished sweep starts a new one.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd.memory.maintenance.base import NIL_UUID, JobContext, JobOutcome, evict_ids, job
from memoryd.memory.maintenance.eviction import check_batch_size, protected

__all__ = ["NIL_UUID", "Merge", "deduplicate", "load_checkpoint", "merge_into",
           "normalized", "save_checkpoint", "valid_state"]


def normalized(alias: str) -> str:
    """SQL for the content as deduplication compares it."""
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


_PLAN = """FROM unnest(CAST(:losers AS uuid[]), CAST(:survivors AS uuid[]),
                      CAST(:scores AS float8[])) AS p(loser, survivor, score)"""

# Survivors take the union of tags, the summed access counts and the highest
# importance, confidence and last access of what they absorb.
_FOLD = text(f"""
WITH p AS (SELECT p.* {_PLAN}),
sums AS (
    SELECT p.survivor, sum(l.access_count) AS access_count, max(l.importance) AS importance,
           max(l.confidence) AS confidence, max(l.last_accessed_at) AS last_accessed_at
    FROM p JOIN memories l ON l.id = p.loser GROUP BY p.survivor),
tags AS (
    SELECT p.survivor, array_agg(DISTINCT t.tag ORDER BY t.tag) AS tags
    FROM p JOIN memories l ON l.id = p.loser, unnest(l.tags) AS t(tag) GROUP BY p.survivor)
UPDATE memories s SET
    access_count = s.access_count + a.access_count,
    importance = greatest(s.importance, a.importance),
    confidence = greatest(s.confidence, a.confidence),
    last_accessed_at = greatest(s.last_accessed_at, a.last_accessed_at),
    tags = s.tags || ARRAY(SELECT x FROM unnest(coalesce(t.tags, '{{}}')) AS x
                           WHERE x <> ALL(s.tags))
    -- updated_at stays: it marks content changes (what consolidate re-compares), and
    -- leaving every indexed column alone keeps this update HOT (no HNSW re-insert).
FROM sums a LEFT JOIN tags t ON t.survivor = a.survivor
WHERE s.id = a.survivor
""")
_LINK = text(f"""
INSERT INTO memory_links (agent_id, source_id, target_id, kind, score)
SELECT s.agent_id, p.survivor, p.loser, 'derived_from', p.score
{_PLAN} JOIN memories s ON s.id = p.survivor
ON CONFLICT DO NOTHING
""")


def _plan_params(merges: Sequence[Merge]) -> dict[str, Any]:
    return {"losers": [m.loser for m in merges], "survivors": [m.survivor for m in merges],
            "scores": [m.score for m in merges]}


def _lock_valid(session: Session, merges: Sequence[Merge], still_valid: str,
                params: Mapping[str, Any]) -> list[Merge]:
    """Lock the pairs and keep those that still hold. The plan was read without locks:
    meanwhile an agent may have pinned, edited or forgotten one side. FOR UPDATE
    re-checks the conditions on the newest row versions."""
    rows = session.execute(text(f"""
        SELECT p.loser {_PLAN}
        JOIN memories l ON l.id = p.loser JOIN memories s ON s.id = p.survivor
        WHERE l.agent_id = s.agent_id AND NOT {protected("l")}
          AND l.archived_at IS NULL AND s.archived_at IS NULL AND {still_valid}
        ORDER BY p.loser
        FOR UPDATE OF l, s
    """), {**_plan_params(merges), **params}).scalars().all()
    valid = set(rows)
    return [m for m in merges if m.loser in valid]


def merge_into(session: Session, ctx: JobContext, merges: Sequence[Merge], reason: str,
               still_valid: str = "TRUE", params: Mapping[str, Any] | None = None) -> int:
    """Merge each loser into its survivor inside the caller's transaction: fold its
    fields into the survivor, link survivor -> loser ('derived_from'), and move the
    loser to ``evicted_memories`` with ``reason``. ``still_valid`` is SQL over the
    aliases ``l`` (loser) and ``s`` (survivor). Survivors must not be losers too."""
    if not merges:
        return 0
    merges = _lock_valid(session, merges, still_valid, params or {})
    if not merges:
        return 0
    plan = _plan_params(merges)
    session.execute(_FOLD, plan)
    session.execute(_LINK, plan)
    return evict_ids(session, plan["losers"], reason, ctx.run_id)


# --- the job ------------------------------------------------------------------------


def _duplicates_sql(ctx: JobContext, bounded: bool) -> str:
    """Losers (with their survivor) among the agents in (:lo, :hi]."""
    upper = "AND m.agent_id <= :hi" if bounded else ""
    return f"""
        WITH norm AS (
            SELECT m.id, m.agent_id, m.created_at, {protected()} AS protected,
                   {normalized("m")} AS content
            FROM memories m
            WHERE m.agent_id > :lo {upper} AND {ctx.agent_clause()}
              AND m.archived_at IS NULL
        ), ranked AS (
            SELECT n.id, n.protected, first_value(n.id) OVER w AS survivor,
                   row_number() OVER w AS rn
            FROM norm n WHERE n.content <> ''
            WINDOW w AS (PARTITION BY n.agent_id, md5(n.content)
                         ORDER BY n.protected DESC, n.created_at DESC, n.id DESC)
        )
        SELECT r.id AS loser, r.survivor FROM ranked r
        WHERE r.rn > 1 AND NOT r.protected"""


def _range_end(ctx: JobContext, lo: str) -> str | None:
    """The agent holding the ``batch_size``-th row after ``lo``; None when fewer remain."""
    with ctx.store.session() as session:
        value = session.execute(text(f"""
            SELECT m.agent_id FROM memories m WHERE m.agent_id > :lo AND {ctx.agent_clause()}
            ORDER BY m.agent_id OFFSET :skip LIMIT 1
        """), {"lo": lo, "agent_id": ctx.agent_id, "skip": ctx.batch_size - 1}).scalar()
    return None if value is None else str(value)


def _dedup_range(ctx: JobContext, lo: str, hi: str | None) -> tuple[int, bool]:
    """Merge the duplicates of one agent range; (merged or would merge, complete)."""
    sql = _duplicates_sql(ctx, hi is not None)
    params = {"lo": lo, "hi": hi, "agent_id": ctx.agent_id}
    if ctx.dry_run:
        with ctx.store.session() as session:
            return int(session.execute(text(f"SELECT count(*) FROM ({sql}) d"),
                                       params).scalar_one()), True
    total = 0
    while True:
        with ctx.store.session() as session:
            rows = session.execute(text(f"{sql} ORDER BY r.id LIMIT :batch"),
                                   {**params, "batch": ctx.batch_size}).all()
            merged = merge_into(session, ctx, [Merge(r.loser, r.survivor) for r in rows],
                                "duplicate", f"{normalized('l')} = {normalized('s')}")
        total += merged
        if len(rows) < ctx.batch_size or merged == 0:
            return total, True
        if ctx.out_of_time():
            return total, False


@job("deduplicate", "Merge memories of one agent whose normalized content is identical.")
def deduplicate(ctx: JobContext) -> JobOutcome:
    check_batch_size(ctx)
    # A dry run starts where a real run would, and reports what that run would merge.
    previous = valid_state(load_checkpoint(ctx, "deduplicate").get("sweep"), ("after", "done"))
    resumed = previous is not None and not previous["done"]
    sweep: dict[str, Any] = (previous if previous is not None and resumed
                             else {"after": "", "done": False})
    merged = 0
    while True:
        hi = _range_end(ctx, sweep["after"])
        n, complete = _dedup_range(ctx, sweep["after"], hi)
        merged += n
        if not complete:
            break
        sweep = {"after": hi or sweep["after"], "done": hi is None}
        with ctx.store.session() as session:
            save_checkpoint(session, ctx, {"sweep": sweep})
        # A dry run has no checkpoint to resume from, so it never stops half-way.
        if sweep["done"] or (ctx.out_of_time() and not ctx.dry_run):
            break
    stats = {"merged": merged, "resumed": resumed, "checkpoint": {"sweep": sweep}}
    return JobOutcome(stats, complete=bool(sweep["done"]))
