"""The ``deduplicate`` job: memories of one agent with identical normalized content merge.

Per agent, live (non-archived, current: never superseded) memories whose normalized
content is
identical (lowercased, every run of punctuation and whitespace made one space,
trimmed) are merged into one survivor: the most recently created, except that a
decision or pinned memory in the group always survives, and is never merged away
(two of them in a group both stay). Two memories of a group whose facts differ
(``memoryd.memory.facts``: "-5 degrees" and "5 degrees", "4.5" and "4,5", "C++" and
"C" normalize alike) are not merged; they are counted in ``skipped_distinct_facts``.
See ``merging`` for what a merge keeps.

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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd.memory.facts import Facts, facts_of, plain
from memoryd.memory.maintenance.checkpoints import load_checkpoint, save_checkpoint, valid_state
from memoryd.memory.maintenance.context import JobContext, JobOutcome
from memoryd.memory.maintenance.merging import Merge, merge_into
from memoryd.memory.maintenance.params import check_batch_size
from memoryd.memory.maintenance.sql import (
    NIL_UUID,
    commit_without_waiting,
    current,
    protected,
)


def normalized(alias: str) -> str:
    """SQL for the content as deduplication compares it. Migration 0004 stores its md5
    as ``content_norm_hash`` (NULL when empty); the two must stay the same expression."""
    return (f"btrim(regexp_replace(lower({alias}.content), "
            "'[[:punct:][:space:]]+', ' ', 'g'))")


# --- the job ------------------------------------------------------------------------
# Groups are found from ix_memories_agent_norm_hash alone (an index-only scan of agent and
# stored hash, migration 0004); only the rows of groups of two or more memories are read
# from the table. Per batch, one statement picks the next groups after the sweep's
# position and reads their rows, the facts of each pair are compared, and one statement
# merges the losers; the position is checkpointed in the same transaction.


def _groups_sql(ctx: JobContext) -> str:
    """Keys of the groups of two or more memories after (:lo_agent, :lo_hash), in key
    order. Archived memories count here (the index does not know them); they are left
    out when the group's rows are ranked."""
    return f"""SELECT m.agent_id, m.content_norm_hash AS hash, count(*) AS n
        FROM memories m
        WHERE (m.agent_id, m.content_norm_hash) > (:lo_agent, CAST(:lo_hash AS uuid))
          AND m.content_norm_hash IS NOT NULL AND {ctx.agent_clause()}
        GROUP BY m.agent_id, m.content_norm_hash HAVING count(*) > 1"""


# The live, current rows of the picked groups, best first (decision or pinned, then newest), with
# where the batch ends (one row of NULLs when no live row is left).
_MEMBERS = """
SELECT rep.*, r.* FROM (SELECT TRUE {report}) rep LEFT JOIN (
    SELECT m.id, m.agent_id, m.content_norm_hash AS hash, m.content, m.content_hash,
           {protected} AS protected, m.created_at
    FROM picked g JOIN memories m ON m.agent_id = g.agent_id AND m.content_norm_hash = g.hash
    WHERE m.archived_at IS NULL AND {current}
) r ON TRUE
ORDER BY r.agent_id, r.hash, r.protected DESC, r.created_at DESC, r.id DESC"""


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


def _read_batch(ctx: JobContext, session: Session, sweep: Mapping[str, Any]) -> list[Any]:
    """The next batch's groups after the sweep's position: their live rows, each carrying
    where the batch ends."""
    return list(session.execute(text(
        f"WITH {_PICK.format(groups=_groups_sql(ctx))[:-1]} "
        + _MEMBERS.format(report=_REPORT, protected=protected(), current=current())), {
        "lo_agent": sweep["after_agent"], "lo_hash": sweep["after_hash"],
        "agent_id": ctx.agent_id, "batch": ctx.batch_size,
        "groups": max(1, ctx.batch_size // 2)}).all())


def _plan(rows: Sequence[Any]) -> tuple[list[Merge], int]:
    """Each group's losers with their survivors, and how many memories stay apart for
    stating other facts. In each group, best first, a memory merges into the first
    survivor so far that states the same facts (``memoryd.memory.facts``: "-5" and "5",
    or "4.5" and "4,5", normalize alike but are different facts); otherwise, and always
    when protected, it survives."""
    merges: list[Merge] = []
    distinct = 0
    survivors: list[_Survivor] = []
    group = None
    for row in rows:
        if row.id is None:
            continue
        if (row.agent_id, row.hash) != group:
            group, survivors = (row.agent_id, row.hash), []
        candidate = _Survivor(row, plain(row.content))
        into = None if row.protected else next(
            (s for s in survivors if s.takes(candidate)), None)
        if into is not None:
            merges.append(Merge(row.id, into.row.id, 1.0, row.content_hash,
                                into.row.content_hash))
        else:
            distinct += bool(survivors) and not row.protected
            survivors.append(candidate)
    return merges, distinct


@dataclass
class _Survivor:
    """A memory of a group that others may merge into; its facts are read only when a
    copy's ``plain`` form differs from its own."""

    row: Any
    plain: str
    _facts: Facts | None = None

    def facts(self) -> Facts:
        if self._facts is None:
            self._facts = facts_of(self.row.content)
        return self._facts

    def takes(self, other: _Survivor) -> bool:
        return self.plain == other.plain or self.facts().same_as(other.facts())


def _advance(sweep: dict[str, Any], report: Any) -> None:
    """Move the sweep past the batch ``report`` describes."""
    if report.empty:
        sweep.update(_NEW_SWEEP, done=True)
    else:
        sweep.update(after_agent=str(report.last_agent), after_hash=str(report.last_hash),
                     done=bool(report.at_end))


def _would_merge(ctx: JobContext, sweep: dict[str, Any]) -> tuple[int, int]:
    """What the rest of the sweep would merge, and keep apart for other facts (a dry run:
    the same batches, read only)."""
    merged = distinct = 0
    while not sweep["done"]:
        with ctx.store.session() as session:
            rows = _read_batch(ctx, session, sweep)
        merges, kept = _plan(rows)
        merged, distinct = merged + len(merges), distinct + kept
        _advance(sweep, rows[0])
    return merged, distinct


def _merge_batch(ctx: JobContext, sweep: dict[str, Any]) -> tuple[int, int]:
    """Merge the next batch of groups and move the sweep on, in one transaction;
    (merged, kept apart for other facts)."""
    with ctx.store.session() as session:
        commit_without_waiting(session)
        rows = _read_batch(ctx, session, sweep)
        merges, distinct = _plan(rows)
        planned = sorted(merges, key=lambda m: m.loser)[:ctx.batch_size]
        merged = merge_into(session, ctx, planned, "duplicate", _STILL_DUPLICATES)
        # A group larger than a batch stays where it is until merged (or it merged nothing).
        if rows[0].empty or len(planned) < ctx.batch_size or merged == 0:
            _advance(sweep, rows[0])
        else:
            distinct = 0  # counted when the group's last batch is planned
        save_checkpoint(session, ctx, {"sweep": sweep})
    return merged, distinct


def deduplicate(ctx: JobContext) -> JobOutcome:
    """Merge memories of one agent whose normalized content is identical and whose facts
    are the same."""
    check_batch_size(ctx)
    # A dry run starts where a real run would, and reports what that run would merge.
    previous = valid_state(load_checkpoint(ctx, "deduplicate").get("sweep"),
                           ("after_agent", "after_hash", "done"))
    resumed = previous is not None and not previous["done"]
    sweep: dict[str, Any] = (previous if previous is not None and resumed
                             else dict(_NEW_SWEEP))
    if ctx.dry_run:
        merged, distinct = _would_merge(ctx, dict(sweep))
        return JobOutcome({"merged": merged, "skipped_distinct_facts": distinct,
                           "resumed": resumed, "checkpoint": {"sweep": sweep}})
    merged = distinct = 0
    while not sweep["done"]:
        batch_merged, batch_distinct = _merge_batch(ctx, sweep)
        merged, distinct = merged + batch_merged, distinct + batch_distinct
        if ctx.out_of_time():
            break
    stats = {"merged": merged, "skipped_distinct_facts": distinct, "resumed": resumed,
             "checkpoint": {"sweep": sweep}}
    return JobOutcome(stats, complete=bool(sweep["done"]))
