"""The ``consolidate`` job: confidence decay of idle memories, then merging of
near-duplicate memories by embedding.

Decay. A memory idle for ``idle_days`` or more (no access since, else since its
creation) loses confidence: ``max(floor, confidence * (1 - decay_rate * (1 - importance)))``.
Importance 1.0 memories, decisions and pinned memories never decay.

The idempotence rule: decay is applied in *passes*, and a pass decays each eligible
memory exactly once. A pass is one sweep of the table in physical order (a TID keyset;
one agent's pass: an id keyset through its index) that leaves alone every row version
written since the pass began (its ``horizon``), the ones it wrote itself included; its
position is checkpointed in the run's audit row in the same transaction as each
decayed batch, so a follow-up run after a time-out, a failure or a crash resumes the
pass without decaying any memory twice. A new pass starts only when the previous one (in the same
scope: fleet-wide, or one agent) is finished and started ``decay_interval_hours`` or
more ago, measured on the run clock ``ctx.now``. The default, 5 hours, is below the
6-hourly schedule, so every scheduled run decays once, while a second run in a row
changes nothing.

Merge. Memories new or changed since the previous sweep (by ``updated_at``, which
every insert, edit and merge sets) are each compared with their nearest neighbours of
the same agent through the HNSW index. Pairs with cosine >= ``merge_threshold`` that
state the same facts (``memoryd.memory.facts``: numbers, dates, identifiers, names,
negations; "Order 4411 shipped" never merges into "Order 4412 shipped") are merged into
the better memory: protected (decision or pinned) first, then most important, then most
recent. Protected memories are never merged away. See ``merging`` for what the survivor
keeps; merged rows go to ``evicted_memories`` with reason ``merged``. Close pairs left
alone for stating different facts are counted in ``skipped_distinct_facts`` (once per
batch that finds them). The sweep walks (updated_at, id) in keyset order and is
checkpointed like the decay pass. ``merge=False`` runs the decay pass alone (the merge
sweep keeps its checkpoint for the next run that merges).

Only current memories take part: a superseded one (``valid_to`` set) is history, never
decayed, compared or merged. Each merge keeps the loser's and the survivor's rows as
versions first (cause ``merged``, ``memoryd.memory.versions``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text

from memoryd.errors import ValidationError
from memoryd.memory.facts import same_facts
from memoryd.memory.maintenance.checkpoints import load_checkpoint, save_checkpoint, valid_state
from memoryd.memory.maintenance.context import JobContext, JobOutcome
from memoryd.memory.maintenance.heap import heap_window
from memoryd.memory.maintenance.merging import Merge, merge_into
from memoryd.memory.maintenance.params import MAX_DAYS, MAX_HOURS, check_batch_size, number
from memoryd.memory.maintenance.sql import (
    NIL_UUID,
    commit_without_waiting,
    current,
    protected,
)

# A fleet-wide decay statement reads at most about this many batches' worth of rows.
DECAY_WINDOW_BATCHES = 4
NEIGHBOURS = 5  # compared per memory; a near-duplicate is among the very nearest
# A new merge sweep starts this long before the previous one did: a row written by a
# transaction that began before that sweep but committed after the sweep passed its
# updated_at would otherwise never be compared.
SWEEP_OVERLAP = timedelta(minutes=10)


@dataclass(frozen=True)
class _Options:
    decay_rate: float
    floor: float
    idle: timedelta
    merge_threshold: float
    interval: timedelta


def consolidate(ctx: JobContext, decay_rate: float = 0.05, floor: float = 0.05,
                idle_days: float = 7, merge_threshold: float = 0.95,
                decay_interval_hours: float = 5, merge: bool = True) -> JobOutcome:
    """Decay the confidence of idle memories; merge near-duplicate memories by embedding."""
    check_batch_size(ctx)
    if not isinstance(merge, bool):
        raise ValidationError("merge", f"must be a boolean, got {merge!r}")
    opts = _Options(
        decay_rate=number("decay_rate", decay_rate, 0, 1), floor=number("floor", floor, 0, 1),
        idle=timedelta(days=number("idle_days", idle_days, 0, MAX_DAYS)),
        # Below 0.5 cosine two memories are related at best, never duplicates.
        merge_threshold=number("merge_threshold", merge_threshold, 0.5, 1),
        interval=timedelta(hours=number("decay_interval_hours", decay_interval_hours, 0,
                                           MAX_HOURS)))
    checkpoint = load_checkpoint(ctx, "consolidate")
    stats: dict[str, Any] = {"decayed": 0, "compared": 0, "merged": 0,
                             "skipped_distinct_facts": 0}
    decay_pass, stats["decay"] = _decay_pass(ctx, checkpoint.get("decay"), opts.interval)
    if decay_pass is not None:
        checkpoint["decay"] = decay_pass
        stats["decayed"], complete = _decay(ctx, checkpoint, opts)
        if not complete:
            return JobOutcome({**stats, "checkpoint": checkpoint}, complete=False)
    if not merge:  # decay only; the merge sweep's checkpoint is left as it was
        return JobOutcome({**stats, "checkpoint": checkpoint})
    checkpoint["merge"] = _merge_sweep(ctx, checkpoint.get("merge"))
    (stats["compared"], stats["merged"], stats["skipped_distinct_facts"],
     complete) = _merge(ctx, checkpoint, opts)
    return JobOutcome({**stats, "checkpoint": checkpoint}, complete)


# --- decay --------------------------------------------------------------------------


def _decay_pass(ctx: JobContext, previous: object,
                interval: timedelta) -> tuple[dict[str, Any] | None, str]:
    """The pass this run works on, and what it does: resumed, started, or skipped."""
    # A checkpoint without these keys (an older format) starts a new pass.
    previous = valid_state(previous, ("started", "done", "horizon", "after_id", "after_tid"))
    if previous is not None and not previous["done"]:
        return previous, "resumed"
    if previous is not None and \
            ctx.now - datetime.fromisoformat(str(previous["started"])) < interval:
        return None, "skipped"
    with ctx.store.session() as session:
        horizon = session.execute(text(
            "SELECT CAST(txid_current() % 4294967296 AS text)")).scalar_one()
    return {"started": ctx.now.isoformat(), "done": False, "horizon": str(horizon),
            "after_id": NIL_UUID, "after_tid": FIRST_TID}, "started"


def eligible(agent_clause: str) -> str:
    """SQL for the memories (alias ``m``) decay may lower: current, idle since
    ``:idle_before``, above ``:floor``, not protected, not of importance 1."""
    return f"""{agent_clause} AND {current()} AND NOT {protected()} AND m.importance < 1
        AND m.confidence > :floor
        AND coalesce(m.last_accessed_at, m.created_at) < :idle_before"""


def _eligible(ctx: JobContext) -> str:
    return eligible(ctx.agent_clause())


# Fleet-wide, the pass walks the table in physical order (see _fleet_decay_sql). A row
# version written since the pass started is not decayed by it: that covers the rows
# the pass decayed itself (an update the page had no room for moves the row, possibly
# ahead of the walk) and rows an agent recalled or edited meanwhile (decayed by the
# next pass, if still idle). age() of a frozen row's xmin is the maximum, so frozen
# rows count as old.
_UNTOUCHED = "age(m.xmin) > age(CAST(:horizon AS xid))"
# What decay does to an eligible memory (binds :floor and :rate).
DECAY = "confidence = greatest(:floor, m.confidence * (1 - :rate * (1 - m.importance)))"
_COUNTS = """SELECT (SELECT count(*) FROM batch) AS seen,
       (SELECT count(*) FROM decayed) AS decayed,
       (SELECT CAST(b.key AS text) FROM batch b ORDER BY b.key DESC LIMIT 1) AS last"""


def _agent_decay_sql(ctx: JobContext) -> str:
    """One agent's rows, through its index; a keyset on id. The UPDATE repeats the
    conditions: a row recalled since the batch was read is re-checked on its newest
    version and left alone."""
    return f"""
        WITH batch AS (
            SELECT m.id AS key FROM memories m
            WHERE m.id > CAST(:after AS uuid) AND {_eligible(ctx)}
            ORDER BY m.id LIMIT :batch
        ), decayed AS (
            UPDATE memories m SET {DECAY}
            FROM batch WHERE m.id = batch.key AND {_eligible(ctx)}
            RETURNING 1
        )
        {_COUNTS}"""


def _fleet_decay_sql(ctx: JobContext) -> str:
    """The next batch of a fleet-wide pass: the first ``:batch`` eligible rows after the
    ``:after`` TID in a window of pages ending at ``:hi`` (a TID range scan, the bare
    UPDATE's sequential read done piecewise), updated by TID without an index lookup.

    Walking the primary key instead reads the pages at random (several times slower on
    a cold table); the first ``:batch`` matching rows without a keyset re-read every
    row kept on each batch. A row the update moves (no room on its page) or an agent
    touches meanwhile is not untouched any more: a TID whose row was updated between
    the two reads no longer matches, and is left for the next pass."""
    return f"""
        WITH batch AS (
            SELECT m.ctid AS key FROM memories m
            WHERE m.ctid > CAST(:after AS tid) AND m.ctid < CAST(:hi AS tid)
              AND {_eligible(ctx)} AND {_UNTOUCHED}
            ORDER BY m.ctid LIMIT :batch
        ), decayed AS (
            UPDATE memories m SET {DECAY}
            WHERE m.ctid = ANY(ARRAY(SELECT b.key FROM batch b))
              AND {_eligible(ctx)} AND {_UNTOUCHED}
            RETURNING 1
        )
        {_COUNTS}"""


FIRST_TID = "(0,0)"  # before every row (line pointers start at 1)


def _page(tid: str) -> int:
    """The page of a TID in its text form '(page,offset)'."""
    return int(tid.strip("()").split(",")[0])


def _decay(ctx: JobContext, checkpoint: dict[str, Any], opts: _Options) -> tuple[int, bool]:
    """Run the pass in ``checkpoint['decay']`` on; (memories decayed, pass finished)."""
    state = checkpoint["decay"]
    params = {"agent_id": ctx.agent_id, "floor": opts.floor, "rate": opts.decay_rate,
              "idle_before": ctx.now - opts.idle, "batch": ctx.batch_size,
              "horizon": state["horizon"]}
    if ctx.dry_run:
        rest = ("m.id > CAST(:after AS uuid)" if ctx.agent_id else _UNTOUCHED)
        with ctx.store.session() as session:
            return int(session.execute(text(
                f"SELECT count(*) FROM memories m WHERE {rest} AND {_eligible(ctx)}"),
                {**params, "after": state["after_id"]}).scalar_one()), True
    if ctx.agent_id:
        statement, cursor = text(_agent_decay_sql(ctx)), "after_id"
        pages = window = 0
    else:
        statement, cursor = text(_fleet_decay_sql(ctx)), "after_tid"
        pages, window = heap_window(ctx, DECAY_WINDOW_BATCHES)
    total = 0
    while True:
        with ctx.store.session() as session:
            commit_without_waiting(session)
            after = str(state[cursor])
            hi = _page(after) + window if window else 0
            row = session.execute(statement, {**params, "after": after,
                                              "hi": f"({hi},0)"}).one()
            total += int(row.decayed)
            if int(row.seen) >= ctx.batch_size:
                state[cursor] = str(row.last)  # the window may hold more
            elif ctx.agent_id or hi >= pages:
                state["done"] = True
            else:
                state[cursor] = f"({hi},0)"
            save_checkpoint(session, ctx, checkpoint)  # commits with the batch it describes
        if state["done"]:
            return total, True
        if ctx.out_of_time():
            return total, False


# --- merge --------------------------------------------------------------------------


def _merge_sweep(ctx: JobContext, previous: object) -> dict[str, Any]:
    """The unfinished sweep, or a new one over rows changed since the last one began."""
    previous = valid_state(previous, ("since", "started", "after_ts", "after_id", "done"))
    if previous is not None and not previous["done"]:
        return previous
    with ctx.store.session() as session:
        # The database clock, because updated_at is written with it.
        started = session.execute(text("SELECT now()")).scalar_one()
    since = ("-infinity" if previous is None else
             (datetime.fromisoformat(str(previous["started"])) - SWEEP_OVERLAP).isoformat())
    return {"since": since, "started": started.isoformat(), "after_ts": since,
            "after_id": NIL_UUID, "done": False}


def _merge(ctx: JobContext, checkpoint: dict[str, Any],
           opts: _Options) -> tuple[int, int, int, bool]:
    """Run the sweep in ``checkpoint['merge']`` on; (compared, merged, close pairs left
    alone for stating different facts, sweep finished)."""
    sweep = checkpoint["merge"]
    compared = merged = distinct = 0
    while True:
        with ctx.store.session() as session:
            rows = session.execute(text(f"""
                SELECT m.id, m.updated_at FROM memories m
                WHERE (m.updated_at, m.id) > (CAST(:after_ts AS timestamptz),
                                              CAST(:after_id AS uuid))
                  -- implied by the line above, but a range the updated_at index can use
                  AND m.updated_at >= CAST(:after_ts AS timestamptz)
                  AND m.archived_at IS NULL AND {current()} AND {ctx.agent_clause()}
                ORDER BY m.updated_at, m.id LIMIT :batch
            """), {"after_ts": sweep["after_ts"], "after_id": sweep["after_id"],
                   "agent_id": ctx.agent_id, "batch": ctx.batch_size}).all()
        compared += len(rows)
        batch_merged, batch_distinct = _merge_batch(ctx, [r.id for r in rows], sweep, opts)
        merged, distinct = merged + batch_merged, distinct + batch_distinct
        if rows:
            sweep["after_ts"], sweep["after_id"] = rows[-1].updated_at.isoformat(), str(rows[-1].id)
        sweep["done"] = len(rows) < ctx.batch_size
        with ctx.store.session() as session:
            save_checkpoint(session, ctx, checkpoint)
        if sweep["done"]:
            return compared, merged, distinct, True
        # A dry run has no checkpoint to resume from, so it never stops half-way.
        if ctx.out_of_time() and not ctx.dry_run:
            return compared, merged, distinct, False


_RANK = "ROW({a}.pinned OR {a}.category = 'decision', {a}.importance, {a}.created_at, {a}.id)"

# For each memory x of the batch, its nearest neighbours of the same agent and
# embedding model (HNSW; vectors of two models are never compared); each close pair is
# an edge from the worse memory (loser) to the better one, with what planning needs:
# both contents (the facts check), the winner's rank, and whether the loser is in scope
# for a dry run (its own batch covers it, or the sweep does not).
_EDGES = f"""
WITH x AS (
    SELECT m.id, m.agent_id, m.embedding, m.embedding_model FROM memories m
    WHERE m.id = ANY(CAST(:ids AS uuid[])) AND m.archived_at IS NULL AND {current()}
), near AS (
    SELECT x.id AS a, n.id AS b, 1 - n.dist AS sim
    FROM x CROSS JOIN LATERAL (
        SELECT o.id, o.embedding <=> x.embedding AS dist FROM memories o
        WHERE o.agent_id = x.agent_id AND o.id <> x.id AND o.archived_at IS NULL
          AND {current("o")} AND o.embedding_model = x.embedding_model
        ORDER BY o.embedding <=> x.embedding LIMIT {NEIGHBOURS}) n
    WHERE n.dist <= 1 - :threshold
), edges AS (
    SELECT CASE WHEN s.a_wins THEN s.b ELSE s.a END AS loser,
           CASE WHEN s.a_wins THEN s.a ELSE s.b END AS winner, s.sim
    FROM (SELECT near.*, {_RANK.format(a="a")} > {_RANK.format(a="b")} AS a_wins
          FROM near JOIN memories a ON a.id = near.a JOIN memories b ON b.id = near.b) s
)
SELECT e.loser, e.winner, e.sim, l.content AS l_content, w.content AS w_content,
       l.content_hash AS l_hash, w.content_hash AS w_hash, {protected("l")} AS l_protected,
       {protected("w")} AS w_protected, w.importance AS w_importance,
       w.created_at AS w_created_at,
       l.id = ANY(CAST(:ids AS uuid[])) OR l.updated_at < CAST(:since AS timestamptz)
           AS in_scope
FROM edges e JOIN memories l ON l.id = e.loser JOIN memories w ON w.id = e.winner"""


@dataclass
class _Plan:
    """One round's plan: each unprotected loser's best winner among the pairs that state
    the same facts, and the pairs left alone because they do not."""

    best: dict[Any, Any]
    distinct: set[frozenset[Any]]

    def roots(self) -> list[Merge]:
        """Merges into winners that are not losers themselves; a chain resolves over
        the next rounds of the same batch."""
        return [Merge(r.loser, r.winner, float(r.sim), r.l_hash, r.w_hash)
                for r in self.best.values() if r.winner not in self.best]


def _plan(edges: Sequence[Any]) -> _Plan:
    """Keep each loser's best winner (protected first, then most important, then most
    recent) of those whose content states the same facts as its own."""
    plan = _Plan({}, set())
    for edge in edges:
        if not same_facts(edge.l_content, edge.w_content):
            plan.distinct.add(frozenset((edge.loser, edge.winner)))
        elif not edge.l_protected:
            known = plan.best.get(edge.loser)
            if known is None or _winner_rank(edge) > _winner_rank(known):
                plan.best[edge.loser] = edge
    return plan


def _winner_rank(edge: Any) -> tuple[Any, ...]:
    return edge.w_protected, edge.w_importance, edge.w_created_at, edge.winner


def _merge_batch(ctx: JobContext, ids: list[Any], sweep: dict[str, Any],
                 opts: _Options) -> tuple[int, int]:
    """Merge the near-duplicates of one batch, a round per transaction, until none is
    left; (merged, close pairs left alone for stating different facts)."""
    if not ids:
        return 0, 0
    params = {"ids": ids, "threshold": opts.merge_threshold, "since": sweep["since"]}
    total = 0
    distinct: set[frozenset[Any]] = set()
    while True:
        with ctx.store.session() as session:
            # The agent filter is applied while walking the index, not after it.
            session.execute(text("SET LOCAL hnsw.iterative_scan = relaxed_order"))
            plan = _plan(session.execute(text(_EDGES), params).all())
            distinct |= plan.distinct
            if ctx.dry_run:
                # Each loser counted once: in its own batch when the sweep covers it,
                # else where it is found. (Chains can make this an overestimate.)
                return sum(1 for r in plan.best.values() if r.in_scope), len(distinct)
            roots = plan.roots()
            merged = merge_into(session, ctx, roots, "merged",
                                "l.embedding_model = s.embedding_model "
                                "AND 1 - (l.embedding <=> s.embedding) >= :threshold",
                                {"threshold": opts.merge_threshold})
        total += merged
        # Most batches have no chains: one round, without planning the batch again.
        if merged == 0 or len(roots) == len(plan.best):
            return total, len(distinct)
