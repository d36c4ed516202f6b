"""The ``evict`` job: memories past the retention limits move to ``evicted_memories``
(restorable with ``memoryd restore``), never silently deleted.

In this order (so each reason is counted once):
1. ``age``: idle for more than ``max_age_days`` (counted from the last access, else
   from creation, so memories agents still recall are kept) and less important than
   ``min_importance``;
2. ``low_confidence``: confidence below ``min_confidence``;
3. ``cap``: per agent, everything past the ``cap`` best memories, best meaning
   protected first, then most important, then most recent;
then the evicted copies older than ``retention_days`` are purged for good.

Decisions and pinned memories are never removed (they still take up slots of an
agent's cap); superseded memories (``valid_to`` set) are history: never removed, and not
counted towards the cap. Each evicted row is kept as a version (cause ``evicted``).
Every step is a bounded batch in its own short transaction; a step selects "rows still
matching", so a re-run after a crash or a time-out simply continues, and a second run in
a row finds nothing to do.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import text

from memoryd.memory.maintenance.context import JobContext, JobOutcome
from memoryd.memory.maintenance.evicting import (
    count_matching,
    evict_by_heap_walk,
    evict_in_batches,
)
from memoryd.memory.maintenance.params import (
    MAX_DAYS,
    check_batch_size,
    integer,
    number,
)
from memoryd.memory.maintenance.sql import current, protected

# The two conditions of the first steps (bind :age_before, :min_importance and
# :min_confidence); protected memories are left out separately.
AGE = ("coalesce(m.last_accessed_at, m.created_at) < :age_before "
       "AND m.importance < :min_importance")
LOW_CONFIDENCE = "m.confidence < :min_confidence"


def _age_where(agent: str) -> str:
    return f"{agent} AND {current()} AND NOT {protected()} AND {AGE}"


def _low_confidence_where(agent: str) -> str:
    # Rows that also qualify by age belong to the age step; excluding them keeps the
    # dry run's counts disjoint (in a real run they are gone already).
    return f"{agent} AND {current()} AND NOT {protected()} AND {LOW_CONFIDENCE} AND NOT ({AGE})"


def _keyset_sql(where: str) -> str:
    # One agent's rows: a keyset walk over its ids (each batch starts after the last id
    # the previous one picked, never re-reading kept rows).
    return f"""SELECT m.id FROM memories m WHERE m.id > CAST(:after AS uuid) AND {where}
        ORDER BY m.id LIMIT :batch"""


def _any_agent_over(ctx: JobContext, cap: int) -> bool:
    with ctx.store.session() as session:
        return bool(session.execute(text(f"""
            SELECT EXISTS (SELECT 1 FROM memories m WHERE {ctx.agent_clause()} AND {current()}
                           GROUP BY m.agent_id HAVING count(*) > :cap)"""),
            {"agent_id": ctx.agent_id, "cap": cap}).scalar_one())


def _cap_sql(agent: str) -> str:
    # Rows the first two steps remove do not count towards the cap: a no-op in a real
    # run, and it makes the dry run's cap count exact.
    # Superseded memories are history: they neither count nor go.
    kept = f"({agent} AND {current()} AND ({protected()} OR NOT ({AGE} OR {LOW_CONFIDENCE})))"
    return f"""SELECT r.id FROM (
            SELECT m.id, {protected()} AS protected,
                   row_number() OVER (PARTITION BY m.agent_id
                       ORDER BY {protected()} DESC, m.importance DESC, m.created_at DESC,
                                m.id DESC) AS rn
            FROM memories m
            WHERE {kept} AND m.agent_id IN (
                SELECT m.agent_id FROM memories m WHERE {kept}
                GROUP BY m.agent_id HAVING count(*) > :cap)
        ) r
        WHERE r.rn > :cap AND NOT r.protected
        LIMIT :batch"""


def evict(ctx: JobContext, max_age_days: float = 30, min_importance: float = 0.2,
          min_confidence: float = 0.1, cap: int = 10000,
          retention_days: float = 30) -> JobOutcome:
    """Evict old unimportant, low-confidence and over-cap memories; purge evicted copies
    past retention."""
    check_batch_size(ctx)
    params: dict[str, Any] = {
        "agent_id": ctx.agent_id,
        "age_before": ctx.now - timedelta(days=number("max_age_days", max_age_days, 0, MAX_DAYS)),
        "min_importance": number("min_importance", min_importance, 0, 1),
        "min_confidence": number("min_confidence", min_confidence, 0, 1),
        "cap": integer("cap", cap, 1),
    }
    retention = timedelta(days=number("retention_days", retention_days, 0, MAX_DAYS))
    agent = ctx.agent_clause()
    stats: dict[str, Any] = {"age": 0, "low_confidence": 0, "cap": 0, "purged": 0}
    # Usually no agent comes near the cap: counting rows per agent (from an index, before
    # the steps below touch the pages) spares the cap step's full scan and ranking.
    over_cap = _any_agent_over(ctx, params["cap"])
    # Age and confidence are not indexed (confidence must not be: decay's updates stay
    # HOT), so fleet-wide both steps are one sequential walk of the table.
    steps = (("age", _age_where(agent)), ("low_confidence", _low_confidence_where(agent)))
    if ctx.agent_id:
        for reason, where in steps:
            stats[reason], complete = evict_in_batches(ctx, _keyset_sql(where), params, reason)
            if not complete:
                return JobOutcome(stats, complete=False)
    else:
        counts, complete = evict_by_heap_walk(ctx, steps, params)
        stats.update(counts)
        if not complete:
            return JobOutcome(stats, complete=False)
    if over_cap:
        stats["cap"], complete = evict_in_batches(ctx, _cap_sql(agent), params, "cap")
        if not complete:
            return JobOutcome(stats, complete=False)
    stats["purged"], complete = _purge(ctx, ctx.now - retention)
    return JobOutcome(stats, complete)


def _purge(ctx: JobContext, before: Any) -> tuple[int, bool]:
    """Delete evicted copies older than ``before`` for good, a batch at a time."""
    select = f"""SELECT e.eviction_id FROM evicted_memories e
        WHERE e.evicted_at < :before AND {ctx.agent_clause("e")}
        ORDER BY e.evicted_at LIMIT :batch"""
    params = {"before": before, "agent_id": ctx.agent_id, "batch": ctx.batch_size}
    if ctx.dry_run:
        return count_matching(ctx, select, params), True
    total = 0
    while True:
        with ctx.store.session() as session:
            result: Any = session.execute(text(
                f"DELETE FROM evicted_memories WHERE eviction_id IN ({select})"), params)
            n = int(result.rowcount)
        total += n
        if n < ctx.batch_size:
            return total, True
        if ctx.out_of_time():
            return total, False
