"""The ``deduplicate`` job: memories of one agent with identical normalized content merge.

Per agent, live (non-archived) memories whose normalized content is
identical (lowercased, every run of punctuation and whitespace made one space,
trimmed) are merged into one survivor: the most recently created, except that a
decision or pinned memory in the group always survives, and is never merged away
(two of them in a group both stay). See ``merging`` for what a merge keeps.

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

from collections.abc import Mapping
from typing import Any

from sqlalchemy import text

from memoryd.memory.maintenance.checkpoints import load_checkpoint, save_checkpoint, valid_state
from memoryd.memory.maintenance.context import JobContext, JobOutcome
from memoryd.memory.maintenance.merging import merge_planned
from memoryd.memory.maintenance.params import check_batch_size
from memoryd.memory.maintenance.sql import NIL_UUID, commit_without_waiting, protected


def normalized(alias: str) -> str:
    """SQL for the content as deduplication compares it. Migration 0004 stores its md5
    as ``content_norm_hash`` (NULL when empty); the two must stay the same expression."""
    return (f"btrim(regexp_replace(lower({alias}.content), "
            "'[[:punct:][:space:]]+', ' ', 'g'))")


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


def deduplicate(ctx: JobContext) -> JobOutcome:
    """Merge memories of one agent whose normalized content is identical."""
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
