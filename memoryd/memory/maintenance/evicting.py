"""Moving memories to ``evicted_memories`` (never silent deletes), in bounded batches.

A moved row keeps everything needed to put it back (``restore``); its links, except
the ``derived_from`` provenance of summaries and merges, go with it. Each move also keeps
the row as a version (``memory_versions``: cause ``merged`` for a merged-away memory,
else ``evicted``; the run as its actor), in the same statement, so a memory's history
survives its eviction and its restore.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd.memory.maintenance.context import JobContext
from memoryd.memory.maintenance.heap import heap_window
from memoryd.memory.maintenance.sql import NIL_UUID


def moved_data(record: str) -> str:
    """SQL for a moved row (the ``memories`` record ``record``) as
    ``evicted_memories.data``: every column but the embedding (kept in its own column)
    and the generated tsv and content_norm_hash (restore regenerates them). They are
    nulled before the conversion, so the embedding is never formatted as JSON text only
    to be dropped."""
    return (f"to_jsonb(jsonb_populate_record({record}, "
            "'{\"embedding\": null, \"tsv\": null, \"content_norm_hash\": null}'))"
            " - ARRAY['embedding', 'tsv', 'content_norm_hash']")


# Eviction reasons that mean "merged into another memory" (merging, repair_sessions).
MERGE_REASONS = ("merged", "duplicate", "session_merge")
# A maintenance run as a version's actor (``versions.actor_of_run`` in SQL; NULL without
# a run). The bind is typed bigint, as is the run_id column it also fills.
RUN_ACTOR = "'run:' || CAST(CAST(:run_id AS bigint) AS text)"


def version_cause(reason: str) -> str:
    """SQL for the version cause of a move with ``reason`` (SQL)."""
    merged = ", ".join(f"'{r}'" for r in MERGE_REASONS)
    return f"CASE WHEN {reason} IN ({merged}) THEN 'merged' ELSE 'evicted' END"


def move_gone(reason: str = ":reason") -> str:
    """The tail of a statement whose CTE ``gone`` (id, agent_id, embedding, r) returns
    deleted memories: keeps each as a version, unlinks and moves them with ``reason``
    (SQL); ``moved`` counts them (binds :run_id)."""
    # Links by = ANY: a join with the CTE would be planned as a scan of memory_links.
    return f"""unlinked AS (
    DELETE FROM memory_links l
    WHERE l.source_id = ANY(ARRAY(SELECT gone.id FROM gone)) AND l.kind <> 'derived_from'
), versioned AS (
    INSERT INTO memory_versions (agent_id, memory_id, cause, actor, data)
    SELECT gone.agent_id, gone.id, {version_cause(reason)}, {RUN_ACTOR}, {moved_data('gone.r')}
    FROM gone
), moved AS (
    INSERT INTO evicted_memories (memory_id, agent_id, reason, run_id, data, embedding)
    SELECT gone.id, gone.agent_id, {reason}, :run_id, {moved_data('gone.r')}, gone.embedding
    FROM gone
    RETURNING 1
)"""


# move_gone with the reason bound as :reason.
MOVE_GONE = move_gone()
# What a DELETE FROM memories m returns as the CTE ``gone`` that MOVE_GONE moves.
GONE = "RETURNING m.id, m.agent_id, m.embedding, m AS r"

_EVICT = text(f"""
WITH gone AS (
    DELETE FROM memories m WHERE m.id = ANY(:ids) {GONE}
), {MOVE_GONE}
SELECT count(*) FROM moved
""")


def evict_ids(session: Session, ids: Sequence[Any], reason: str, run_id: int | None) -> int:
    """Move memories to ``evicted_memories`` with the reason; frees their dedup hashes."""
    if not ids:
        return 0
    return int(session.execute(_EVICT, {"ids": list(ids), "reason": reason,
                                        "run_id": run_id}).scalar_one())


# One batch, one statement: the ids never leave the server. (%-formatted: MOVE_GONE
# holds braces.)
_EVICT_BATCH = f"""
WITH picked AS MATERIALIZED (%(select)s), gone AS (
    DELETE FROM memories m WHERE m.id IN (SELECT p.id FROM picked p) {GONE}
), {MOVE_GONE}
SELECT (SELECT count(*) FROM picked) AS picked, (SELECT count(*) FROM moved) AS moved,
       (SELECT p.%(key)s FROM picked p ORDER BY p.%(key)s DESC LIMIT 1) AS last"""


def evict_in_batches(ctx: JobContext, select_ids_sql: str, params: Mapping[str, Any],
                     reason: str) -> tuple[int, bool]:
    """Repeatedly select up to ``batch_size`` ids with ``select_ids_sql`` (which must
    bind ``:batch`` and name its column ``id``) and evict them, one short transaction
    per batch.

    A select that binds ``:after`` walks the ids in keyset order (``m.id > :after ...
    ORDER BY m.id``): each batch starts where the previous one ended instead of
    re-reading the rows it kept.

    In a dry run, counts the matching rows instead. Returns (rows, complete).
    """
    params = {**params, "after": NIL_UUID}
    if ctx.dry_run:
        return count_matching(ctx, select_ids_sql, params), True
    statement = text(_EVICT_BATCH % {"select": select_ids_sql, "key": "id"})
    total = 0
    while True:
        with ctx.store.session() as session:
            row = session.execute(statement, {**params, "batch": ctx.batch_size,
                                              "reason": reason, "run_id": ctx.run_id}).one()
        total += int(row.moved)
        if row.last is not None:
            params["after"] = str(row.last)
        if int(row.picked) < ctx.batch_size:
            return total, True
        if ctx.out_of_time():
            return total, False


def _window_select(where_sql: str) -> str:
    """The next batch of a window's rows matching ``where_sql``, in id order."""
    return f"""SELECT w.id FROM (
            SELECT m.id FROM memories m
            WHERE m.ctid >= CAST(:lo AS tid) AND m.ctid < CAST(:hi AS tid)
              AND m.id > CAST(:after AS uuid) AND ({where_sql})
            OFFSET 0  -- planned apart from the ORDER BY: a TID range scan, not the pkey
        ) w ORDER BY w.id LIMIT :batch"""


def evict_by_heap_walk(ctx: JobContext, steps: Sequence[tuple[str, str]],
                       params: Mapping[str, Any]) -> tuple[dict[str, int], bool]:
    """Evict the memories matching ``steps`` ((reason, SQL condition over alias ``m``),
    in order; no index needed) in one sequential walk of the table, at most
    ``batch_size`` rows per transaction.

    The walk reads windows of pages in physical order (``heap.heap_window``). Each
    window is swept by each step in turn while its pages are still cached, in batches
    in id order (a keyset on id): without a keyset each batch would re-read every row
    kept before it, and a walk per step would read the table once per step. A row a
    concurrent update moves behind the walk is left for the next run, like any row
    that starts matching later. Returns (rows per reason, complete); a dry run counts
    instead.
    """
    counts = dict.fromkeys((reason for reason, _ in steps), 0)
    if ctx.dry_run:
        for reason, where_sql in steps:
            counts[reason] = count_matching(
                ctx, f"SELECT m.id FROM memories m WHERE {where_sql}", params)
        return counts, True
    pages, window = heap_window(ctx)
    statements = [(reason, text(_EVICT_BATCH % {"select": _window_select(where_sql),
                                                "key": "id"}))
                  for reason, where_sql in steps]
    first = 0
    while first < max(pages, 1):
        bounds = {"lo": f"({first},0)", "hi": f"({first + window},0)"}
        for reason, statement in statements:
            moved, complete = _evict_window(ctx, statement, {**params, **bounds}, reason)
            counts[reason] += moved
            if not complete:
                return counts, False
        first += window
        if first < pages and ctx.out_of_time():
            return counts, False
    return counts, True


def _evict_window(ctx: JobContext, statement: Any, params: Mapping[str, Any],
                  reason: str) -> tuple[int, bool]:
    """One step's batches over one window; (rows moved, window finished)."""
    after, moved = NIL_UUID, 0
    while True:
        with ctx.store.session() as session:
            row = session.execute(statement, {
                **params, "after": after, "batch": ctx.batch_size,
                "reason": reason, "run_id": ctx.run_id}).one()
        moved += int(row.moved)
        if int(row.picked) < ctx.batch_size:
            return moved, True
        after = str(row.last)  # the window may hold more
        if ctx.out_of_time():
            return moved, False


def count_matching(ctx: JobContext, select_sql: str, params: Mapping[str, Any]) -> int:
    """How many rows ``select_sql`` would pick without its ``LIMIT :batch`` (dry runs)."""
    with ctx.store.session() as session:
        return int(session.execute(text(
            f"SELECT count(*) FROM ({select_sql.replace('LIMIT :batch', '')}) s"),
            params).scalar_one())
