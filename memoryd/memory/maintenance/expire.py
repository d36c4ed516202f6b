"""The ``expire`` job: memories whose ``expires_at`` has passed move to
``evicted_memories`` (reason ``expired``, kept as a version with cause ``evicted``),
except decisions, pinned memories and superseded ones (history stays as it was).

Like ``evict``, it works in bounded batches of rows still matching, so a re-run simply
continues and a second run in a row finds nothing to do.
"""

from __future__ import annotations

from memoryd.memory.maintenance.context import JobContext, JobOutcome
from memoryd.memory.maintenance.evicting import evict_in_batches
from memoryd.memory.maintenance.params import check_batch_size
from memoryd.memory.maintenance.sql import current, protected

# "expires_at IS NOT NULL" lets the planner use the partial index on expires_at.
EXPIRED = "m.expires_at IS NOT NULL AND m.expires_at <= :now"


def expire(ctx: JobContext) -> JobOutcome:
    """Remove memories whose expires_at has passed."""
    check_batch_size(ctx)
    select = f"""SELECT m.id FROM memories m
        WHERE {EXPIRED}
          AND {ctx.agent_clause()} AND {current()} AND NOT {protected()}
        ORDER BY m.expires_at LIMIT :batch"""
    expired, complete = evict_in_batches(ctx, select, {"now": ctx.now,
                                                       "agent_id": ctx.agent_id}, "expired")
    return JobOutcome({"expired": expired}, complete)
