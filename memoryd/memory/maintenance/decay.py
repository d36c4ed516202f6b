"""The ``consolidate`` job: confidence decay of idle memories, then merging of
near-duplicate memories by embedding.

Decay. A memory idle for ``idle_days`` or more (no access since, else since its
creation) loses confidence: ``max(floor, confidence * (1 - decay_rate * (1 - importance)))``.
Importance 1.0 memories, decisions and pinned memories never decay.

The idempotence rule: decay is applied in *passes*, and a pass decays each eligible
memory exactly once. A pass is one keyset sweep over memory ids; its position is
checkpointed in the run's audit row in the same transaction as each decayed batch,
so a follow-up run after a time-out, a failure or a crash resumes the pass without
decaying any memory twice. A new pass starts only when the previous one (in the same
scope: fleet-wide, or one agent) is finished and started ``decay_interval_hours`` or
more ago, measured on the run clock ``ctx.now``. The default, 5 hours, is below the
6-hourly schedule, so every scheduled run decays once, while a second run in a row
changes nothing.

Merge. Memories new or changed since the previous sweep (by ``updated_at``, which
every insert, edit and merge sets) are each compared with their nearest neighbours of
the same agent through the HNSW index. Pairs with cosine >= ``merge_threshold`` are
merged into the better memory: protected (decision or pinned) first, then most
important, then most recent. Protected memories are never merged away. See
``dedup.merge_into`` for what the survivor keeps; merged rows go to
``evicted_memories`` with reason ``merged``. The sweep walks (updated_at, id) in
keyset order and is checkpointed like the decay pass. ``merge=False`` runs the decay
pass alone (the merge sweep keeps its checkpoint for the next run that merges).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text

from memoryd.errors import ValidationError
from memoryd.memory.maintenance.base import (
    NIL_UUID,
    JobContext,
    JobOutcome,
    heap_window,
    job,
)
from memoryd.memory.maintenance.dedup import (
    Merge,
    load_checkpoint,
    merge_into,
    save_checkpoint,
    valid_state,
)
from memoryd.memory.maintenance.eviction import check_batch_size, number, protected

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


@job("consolidate", "Decay the confidence of idle memories; merge near-duplicate memories.")
def consolidate(ctx: JobContext, decay_rate: float = 0.05, floor: float = 0.05,
                idle_days: float = 7, merge_threshold: float = 0.95,
                decay_interval_hours: float = 5, merge: bool = True) -> JobOutcome:
    check_batch_size(ctx)
    if not isinstance(merge, bool):
        raise ValidationError("merge", f"must be a boolean, got {merge!r}")
    opts = _Options(
        decay_rate=number("decay_rate", decay_rate, 0, 1), floor=number("floor", floor, 0, 1),
        idle=timedelta(days=number("idle_days", idle_days, 0)),
        # Below 0.5 cosine two memories are related at best, never duplicates.
        merge_threshold=number("merge_threshold", merge_threshold, 0.5, 1),
        interval=timedelta(hours=number("decay_interval_hours", decay_interval_hours, 0)))
    checkpoint = load_checkpoint(ctx, "consolidate")
    stats: dict[str, Any] = {"decayed": 0, "compared": 0, "merged": 0}
    decay_pass, stats["decay"] = _decay_pass(ctx, checkpoint.get("decay"), opts.interval)
    if decay_pass is not None:
        checkpoint["decay"] = decay_pass
        stats["decayed"], complete = _decay(ctx, checkpoint, opts)
        if not complete:
            return JobOutcome({**stats, "checkpoint": checkpoint}, complete=False)
    if not merge:  # decay only; the merge sweep's checkpoint is left as it was
        return JobOutcome({**stats, "checkpoint": checkpoint})
    checkpoint["merge"] = _merge_sweep(ctx, checkpoint.get("merge"))
    stats["compared"], stats["merged"], complete = _merge(ctx, checkpoint, opts)
    return JobOutcome({**stats, "checkpoint": checkpoint}, complete)


# --- decay --------------------------------------------------------------------------


def _decay_pass(ctx: JobContext, previous: object,
                interval: timedelta) -> tuple[dict[str, Any] | None, str]:
    """The pass this run works on, and what it does: resumed, started, or skipped."""
    previous = valid_state(previous, ("started", "after", "done", "page", "window",
                                      "horizon"))
    if previous is not None and not previous["done"]:
        return previous, "resumed"
    if previous is not None and \
            ctx.now - datetime.fromisoformat(str(previous["started"])) < interval:
        return None, "skipped"
    with ctx.store.session() as session:
        horizon = session.execute(text(
            "SELECT CAST(txid_current() % 4294967296 AS text)")).scalar_one()
    return {"started": ctx.now.isoformat(), "after": NIL_UUID, "done": False, "page": 0,
            "window": 0, "horizon": str(horizon)}, "started"


def _eligible(ctx: JobContext) -> str:
    return f"""{ctx.agent_clause()} AND NOT {protected()} AND m.importance < 1
        AND m.confidence > :floor
        AND coalesce(m.last_accessed_at, m.created_at) < :idle_before"""


# Fleet-wide, the pass walks the table in windows of pages (see base.evict_by_heap_walk
# for why), in id order within a window. A row version written since the pass started
# is not decayed by it: that covers the rows the pass decayed itself (an update the
# page had no room for moves the row, possibly into a window still ahead) and rows an
# agent recalled or edited meanwhile (decayed by the next pass, if still idle).
# age() of a frozen row's xmin is the maximum, so frozen rows count as old.
_UNTOUCHED = "age(m.xmin) > age(CAST(:horizon AS xid))"


def _batch_sql(ctx: JobContext) -> str:
    if ctx.agent_id:  # one agent's rows, through its index; a keyset on id
        return f"""SELECT m.id FROM memories m
            WHERE m.id > CAST(:after AS uuid) AND {_eligible(ctx)}
            ORDER BY m.id LIMIT :batch"""
    return f"""SELECT w.id FROM (
            SELECT m.id FROM memories m
            WHERE m.ctid >= CAST(:lo AS tid) AND m.ctid < CAST(:hi AS tid)
              AND m.id > CAST(:after AS uuid) AND {_eligible(ctx)} AND {_UNTOUCHED}
            OFFSET 0  -- planned apart from the ORDER BY: a TID range scan, not the pkey
        ) w ORDER BY w.id LIMIT :batch"""


def _decay_sql(ctx: JobContext) -> str:
    # The UPDATE repeats the conditions: a row recalled since the batch was read is
    # re-checked on its newest version and left alone.
    guard = "TRUE" if ctx.agent_id else _UNTOUCHED
    return f"""
        WITH batch AS (
            {_batch_sql(ctx)}
        ), decayed AS (
            UPDATE memories m
            SET confidence = greatest(:floor, m.confidence * (1 - :rate * (1 - m.importance)))
            FROM batch WHERE m.id = batch.id AND {_eligible(ctx)} AND {guard}
            RETURNING m.id
        )
        SELECT (SELECT count(*) FROM batch) AS seen, (SELECT count(*) FROM decayed) AS decayed,
               (SELECT b.id FROM batch b ORDER BY b.id DESC LIMIT 1) AS last"""


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
                {**params, "after": state["after"]}).scalar_one()), True
    pages, window = (0, 0) if ctx.agent_id else heap_window(ctx)
    # A resumed pass keeps its window, so the keyset within it stays valid.
    window = int(state["window"]) or window
    state["window"] = window
    total = 0
    while True:
        with ctx.store.session() as session:
            page = int(state["page"])
            row = session.execute(text(_decay_sql(ctx)), {
                **params, "after": state["after"],
                "lo": f"({page},0)", "hi": f"({page + window},0)"}).one()
            total += int(row.decayed)
            if int(row.seen) >= ctx.batch_size:
                state["after"] = str(row.last)  # the window may hold more
            elif ctx.agent_id or page + window >= pages:
                state["done"] = True
            else:
                state["page"], state["after"] = page + window, NIL_UUID
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
           opts: _Options) -> tuple[int, int, bool]:
    """Run the sweep in ``checkpoint['merge']`` on; (compared, merged, sweep finished)."""
    sweep = checkpoint["merge"]
    compared = merged = 0
    while True:
        with ctx.store.session() as session:
            rows = session.execute(text(f"""
                SELECT m.id, m.updated_at FROM memories m
                WHERE (m.updated_at, m.id) > (CAST(:after_ts AS timestamptz),
                                              CAST(:after_id AS uuid))
                  -- implied by the line above, but a range the updated_at index can use
                  AND m.updated_at >= CAST(:after_ts AS timestamptz)
                  AND m.archived_at IS NULL AND {ctx.agent_clause()}
                ORDER BY m.updated_at, m.id LIMIT :batch
            """), {"after_ts": sweep["after_ts"], "after_id": sweep["after_id"],
                   "agent_id": ctx.agent_id, "batch": ctx.batch_size}).all()
        compared += len(rows)
        merged += _merge_batch(ctx, [r.id for r in rows], sweep, opts)
        if rows:
            sweep["after_ts"], sweep["after_id"] = rows[-1].updated_at.isoformat(), str(rows[-1].id)
        sweep["done"] = len(rows) < ctx.batch_size
        with ctx.store.session() as session:
            save_checkpoint(session, ctx, checkpoint)
        if sweep["done"]:
            return compared, merged, True
        # A dry run has no checkpoint to resume from, so it never stops half-way.
        if ctx.out_of_time() and not ctx.dry_run:
            return compared, merged, False


_RANK = "ROW({a}.pinned OR {a}.category = 'decision', {a}.importance, {a}.created_at, {a}.id)"

# For each memory x of the batch, its nearest neighbours of the same agent (HNSW);
# each close pair makes an edge from the worse memory (loser) to the better one; each
# loser keeps its best winner; protected losers are dropped.
_BEST = f"""
WITH x AS (
    SELECT m.id, m.agent_id, m.embedding FROM memories m
    WHERE m.id = ANY(CAST(:ids AS uuid[])) AND m.archived_at IS NULL
), near AS (
    SELECT x.id AS a, n.id AS b, 1 - n.dist AS sim
    FROM x CROSS JOIN LATERAL (
        SELECT o.id, o.embedding <=> x.embedding AS dist FROM memories o
        WHERE o.agent_id = x.agent_id AND o.id <> x.id AND o.archived_at IS NULL
        ORDER BY o.embedding <=> x.embedding LIMIT {NEIGHBOURS}) n
    WHERE n.dist <= 1 - :threshold
), edges AS (
    SELECT CASE WHEN s.a_wins THEN s.b ELSE s.a END AS loser,
           CASE WHEN s.a_wins THEN s.a ELSE s.b END AS winner, s.sim
    FROM (SELECT near.*, {_RANK.format(a="a")} > {_RANK.format(a="b")} AS a_wins
          FROM near JOIN memories a ON a.id = near.a JOIN memories b ON b.id = near.b) s
), best AS (
    SELECT DISTINCT ON (e.loser) e.loser, e.winner, e.sim
    FROM edges e JOIN memories l ON l.id = e.loser JOIN memories w ON w.id = e.winner
    WHERE NOT {protected("l")}
    ORDER BY e.loser, {protected("w")} DESC, w.importance DESC, w.created_at DESC, w.id DESC
)"""
# Merge only into winners that are not losers themselves ("root"); a chain resolves
# over the next rounds of the same batch.
_PLAN = _BEST + """
SELECT b.loser, b.winner, b.sim, NOT EXISTS (SELECT 1 FROM best o WHERE o.loser = b.winner)
       AS root
FROM best b"""
# A dry run counts each loser once: in its own batch when the sweep covers it, else
# where it is found. (Chains can make this an overestimate.)
_WOULD_MERGE = _BEST + """
SELECT count(*) FROM best b JOIN memories l ON l.id = b.loser
WHERE l.id = ANY(CAST(:ids AS uuid[])) OR l.updated_at < CAST(:since AS timestamptz)"""


def _merge_batch(ctx: JobContext, ids: list[Any], sweep: dict[str, Any],
                 opts: _Options) -> int:
    """Merge the near-duplicates of one batch, a round per transaction, until none is left."""
    if not ids:
        return 0
    params = {"ids": ids, "threshold": opts.merge_threshold, "since": sweep["since"]}
    total = 0
    while True:
        with ctx.store.session() as session:
            # The agent filter is applied while walking the index, not after it.
            session.execute(text("SET LOCAL hnsw.iterative_scan = relaxed_order"))
            if ctx.dry_run:
                return int(session.execute(text(_WOULD_MERGE), params).scalar_one())
            rows = session.execute(text(_PLAN), params).all()
            roots = [Merge(r.loser, r.winner, float(r.sim)) for r in rows if r.root]
            merged = merge_into(session, ctx, roots, "merged",
                                "1 - (l.embedding <=> s.embedding) >= :threshold",
                                {"threshold": opts.merge_threshold})
        total += merged
        # Most batches have no chains: one round, without planning the batch again.
        if merged == 0 or len(roots) == len(rows):
            return total
