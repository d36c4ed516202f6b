"""``repair_sessions``: fix broken session message lists.

The phases are pure functions over one session's list (``repair_phases``); this module
plans a session's repair (reads, merged and cut texts, embeddings) outside any
transaction, and then rewrites the list under ``FOR UPDATE`` only if the part it read is
still the list's prefix; messages appended meanwhile are carried over untouched (see
``session_lists``). A memory it rewrites is kept as a version first (cause ``merged`` for
a merge, ``edited`` for a cut); a superseded one is history and is never merged or cut.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from memoryd.memory import versions, writes
from memoryd.memory.maintenance.context import JobContext, JobOutcome
from memoryd.memory.maintenance.evicting import evict_ids
from memoryd.memory.maintenance.params import integer
from memoryd.memory.maintenance.repair_phases import (
    MemoryInfo,
    drop_duplicates,
    drop_missing_ids,
    drop_orphans,
    merge_runs,
    norm_id,
    sort_by_ts,
    truncate_text,
    without_ids,
)
from memoryd.memory.maintenance.session_lists import (
    SessionRow,
    as_uuid,
    read_messages,
    ref_id,
    session_keys,
    single_session,
    write_session,
)
from memoryd.memory.rows import STORED_COLUMNS


@dataclass
class _Merge:
    """Phase 3 planned: a run's texts joined into its first memory, the others evicted."""

    first: str
    others: list[str]
    expected: dict[str, str]  # id -> content_hash when planned; anything else: skip
    content: str
    content_hash: str
    vector: str = ""


def without_merged(refs: Sequence[dict[str, Any]], merges: Sequence[_Merge]) -> list[Any]:
    """The list once ``merges`` are applied: the merged-away references are gone."""
    return without_ids(refs, {other for merge in merges for other in merge.others})


@dataclass
class _Truncation:
    """Phase 6 planned: a memory's text cut to the limit, the full text kept aside."""

    memory_id: str
    expected_hash: str  # after any merge of the same memory in this plan
    content: str
    content_hash: str
    vector: str = ""


@dataclass
class _Counts:
    """What a repair changed, by kind (the job's stats)."""

    missing_id: int = 0
    duplicates: int = 0
    merged: int = 0  # memories merged into their predecessor (moved to evicted_memories)
    merge_skipped: int = 0  # merged text collides with another memory, or changed meanwhile
    orphans: int = 0
    reordered: int = 0
    truncated: int = 0
    truncate_skipped: int = 0
    recounted: int = 0  # message_count was wrong
    malformed: int = 0  # messages was not a JSON list

    def add(self, other: _Counts) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class _Plan:
    """One session's repair, planned outside any transaction."""

    row: SessionRow  # the session as read
    refs: list[dict[str, Any]]  # after phases 1, 2, 4 and 5
    counts: _Counts
    merges: list[_Merge] = field(default_factory=list)
    truncations: list[_Truncation] = field(default_factory=list)

    @property
    def original(self) -> list[Any]:
        return self.row.messages

    def changes(self) -> bool:
        final = without_merged(self.refs, self.merges)
        return (final != self.original or bool(self.counts.recounted or self.counts.malformed)
                or bool(self.merges or self.truncations))


@dataclass
class _RepairTotals:
    """A run's counts over all the sessions it checked."""

    counts: _Counts = field(default_factory=_Counts)
    sessions_checked: int = 0
    sessions_repaired: int = 0
    conflicts: int = 0  # rewritten by someone else between read and write: next sweep

    def as_dict(self) -> dict[str, int]:
        return {**self.counts.as_dict(), "sessions_checked": self.sessions_checked,
                "sessions_repaired": self.sessions_repaired, "conflicts": self.conflicts}


_SINCE_MARGIN = timedelta(minutes=5)  # appends commit a little after their now()


def repair_sessions(ctx: JobContext, max_message_bytes: int = 512_000,
                    session_id: str | None = None) -> JobOutcome:
    """Fix broken session message lists: missing and duplicate ids, orphans, order,
    same-role runs, oversized messages.

    Seven phases (stats count each):

    1. ``missing_id``: drop references without an id; 2. ``duplicates``: drop repeated ids
    (the first stays); 3. ``merged``: join consecutive same-role messages (not system)
    into the first memory, the others go to evicted_memories ('session_merge');
    4. ``orphans``: drop references to memories that no longer exist; 5. ``reordered``:
    stable sort by ts; 6. ``truncated``: cut messages over ``max_message_bytes`` with a
    marker, the full text kept in evicted_memories ('truncated'); 7. rewrite the session
    (message_count, repaired_at) -- only if something changed.

    Phase 3 runs after 4 and 5: merging needs the memories to exist and the final order,
    and merging first would leave new same-role neighbours for the next run to find.
    The sweep checks sessions updated since the last complete sweep; ``session_id``
    (with agent_id) repairs that one session.
    """
    sid = single_session(ctx, session_id)
    max_bytes = integer("max_message_bytes", max_message_bytes, 1024)
    totals = _RepairTotals()
    since = None if sid is not None else _last_complete_sweep(ctx)
    where = "CAST(:since AS timestamptz) IS NULL OR s.updated_at >= CAST(:since AS timestamptz)"
    for agent_id, session in session_keys(ctx, where, {"since": since}, sid):
        if ctx.out_of_time():
            return JobOutcome({**totals.as_dict(), "sweep_complete": False}, complete=False)
        totals.sessions_checked += 1
        # One session's failure is recorded, and the sweep goes on with the others.
        ctx.apart("repair", partial(_repair_one, ctx, agent_id, session, max_bytes, totals),
                  agent_id=agent_id)
    # Only a full sweep lets the next one start from here (see _last_complete_sweep).
    return JobOutcome({**totals.as_dict(), "sweep_complete": sid is None})


def _last_complete_sweep(ctx: JobContext) -> datetime | None:
    """When the last sweep that finished (not out of time, not one session) started,
    minus a margin; None when there was none, so the whole table is checked."""
    with ctx.store.session() as session:
        started = session.execute(text("""
            SELECT max(started_at) FROM maintenance_runs
            WHERE job = 'repair_sessions' AND status = 'ok' AND NOT dry_run
              AND stats->>'sweep_complete' = 'true'
              AND (agent_id IS NULL OR agent_id = CAST(:agent_id AS varchar))
        """), {"agent_id": ctx.agent_id}).scalar_one()
    return started - _SINCE_MARGIN if isinstance(started, datetime) else None


def _repair_one(ctx: JobContext, agent_id: str, session_id: str, max_bytes: int,
                totals: _RepairTotals) -> None:
    plan = _plan_repair(ctx, agent_id, session_id, max_bytes)
    if plan is None:
        return
    if not plan.changes():
        # Nothing to rewrite, but a merge or cut that had to be skipped is still news.
        totals.counts.merge_skipped += plan.counts.merge_skipped
        totals.counts.truncate_skipped += plan.counts.truncate_skipped
        return
    if ctx.dry_run:
        plan.counts.merged = sum(len(m.others) for m in plan.merges)
        plan.counts.truncated = len(plan.truncations)
        totals.counts.add(plan.counts)
        totals.sessions_repaired += 1
        return
    _embed(ctx, plan)
    if _write_repair(ctx, agent_id, session_id, plan):
        totals.counts.add(plan.counts)
        totals.sessions_repaired += 1
    else:
        totals.conflicts += 1


def _plan_repair(ctx: JobContext, agent_id: str, session_id: str,
                 max_bytes: int) -> _Plan | None:
    with ctx.store.session() as session:
        row = read_messages(session, agent_id, session_id)
        if row is None:
            return None
        existing = _memory_info(session, agent_id, row.messages)
    counts = _Counts(recounted=int(row.stored_count != len(row.messages)),
                     malformed=int(not row.is_list))
    refs, counts.missing_id = drop_missing_ids(row.messages)
    refs, counts.duplicates = drop_duplicates(refs)
    refs, counts.orphans = drop_orphans(refs, existing)
    refs, counts.reordered = sort_by_ts(refs)
    plan = _Plan(row, refs, counts)
    plan.merges = _plan_merges(ctx, agent_id, merge_runs(refs, existing), counts)
    plan.truncations = _plan_truncations(ctx, agent_id, plan, existing, max_bytes)
    return plan


def _memory_info(session: Session, agent_id: str, messages: Sequence[Any]) -> dict[str, MemoryInfo]:
    ids = list({u for u in (as_uuid(ref_id(ref)) for ref in messages) if u is not None})
    # A superseded memory is as untouchable as a pinned one.
    rows = session.execute(text("""
        SELECT id, octet_length(content) AS size, content_hash,
               pinned OR category = 'decision' OR valid_to IS NOT NULL AS protected
        FROM memories WHERE agent_id = :agent_id AND id = ANY(:ids)
    """), {"agent_id": agent_id, "ids": ids})
    return {str(r.id): MemoryInfo(int(r.size), str(r.content_hash), bool(r.protected))
            for r in rows}


def _contents(ctx: JobContext, agent_id: str, ids: Sequence[str]) -> dict[str, tuple[str, str]]:
    with ctx.store.session() as session:
        return {str(r.id): (str(r.content), str(r.content_hash)) for r in session.execute(
            text("SELECT id, content, content_hash FROM memories "
                 "WHERE agent_id = :agent_id AND id = ANY(:ids)"),
            {"agent_id": agent_id, "ids": [uuid.UUID(i) for i in ids]})}


def _hash_taken(ctx: JobContext, agent_id: str, digest: str, besides: Sequence[str]) -> bool:
    """Whether another current memory of the agent already has this content (the dedup
    index, which only current memories are in)."""
    with ctx.store.session() as session:
        return session.execute(text("""
            SELECT 1 FROM memories WHERE agent_id = :agent_id AND content_hash = :h
              AND valid_to IS NULL AND NOT (id = ANY(:ids)) LIMIT 1
        """), {"agent_id": agent_id, "h": digest,
               "ids": [uuid.UUID(i) for i in besides]}).first() is not None


def _plan_merges(ctx: JobContext, agent_id: str, runs: list[list[str]],
                 counts: _Counts) -> list[_Merge]:
    if not runs:
        return []
    found = _contents(ctx, agent_id, [i for run in runs for i in run])
    merges = []
    for run in runs:
        if any(i not in found for i in run):
            counts.merge_skipped += 1  # forgotten since we looked: the next run sees it
            continue
        merged = "\n".join(found[i][0] for i in run)
        digest = writes.content_hash(merged)
        if _hash_taken(ctx, agent_id, digest, run):
            counts.merge_skipped += 1  # would break dedup; the messages stay as they are
            continue
        merges.append(_Merge(run[0], run[1:], {i: found[i][1] for i in run}, merged, digest))
    return merges


def _plan_truncations(ctx: JobContext, agent_id: str, plan: _Plan,
                      existing: Mapping[str, MemoryInfo], max_bytes: int) -> list[_Truncation]:
    merged = {m.first: m for m in plan.merges}
    out = []
    for ref in without_merged(plan.refs, plan.merges):
        memory_id = norm_id(str(ref["id"]))
        info = existing[memory_id]
        if info.protected:
            continue
        if memory_id in merged:
            full, expected = merged[memory_id].content, merged[memory_id].content_hash
        elif info.size > max_bytes:
            full, expected = _contents(ctx, agent_id, [memory_id]).get(memory_id, ("", ""))
        else:
            continue
        if not full or len(full.encode("utf-8")) <= max_bytes:
            continue
        short = truncate_text(full, max_bytes)
        digest = writes.content_hash(short)
        if _hash_taken(ctx, agent_id, digest, [memory_id]):
            plan.counts.truncate_skipped += 1
            continue
        out.append(_Truncation(memory_id, expected, short, digest))
    return out


def _embed(ctx: JobContext, plan: _Plan) -> None:
    """Embed every rewritten text in one batch, before the write transaction opens."""
    targets: list[_Merge | _Truncation] = [*plan.merges, *plan.truncations]
    vectors = writes.embed_texts(ctx.store.embedder, [t.content for t in targets])
    for target, vector in zip(targets, vectors, strict=True):
        target.vector = vector


def _write_repair(ctx: JobContext, agent_id: str, session_id: str, plan: _Plan) -> bool:
    """Apply the plan in one transaction; False (nothing written) when the session
    changed other than by appends since it was read."""
    with ctx.store.session() as session:
        current = read_messages(session, agent_id, session_id, lock=True)
        if current is None or current.messages[:len(plan.original)] != plan.original:
            return False
        applied = [m for m in plan.merges if _apply_merge(session, ctx, agent_id, m)]
        truncated = sum(_apply_truncation(session, ctx, agent_id, t) for t in plan.truncations)
        plan.counts.merged = sum(len(m.others) for m in applied)
        plan.counts.merge_skipped += len(plan.merges) - len(applied)
        plan.counts.truncated = truncated
        plan.counts.truncate_skipped += len(plan.truncations) - truncated
        # Messages appended since the plan was read are kept as they are; the next sweep
        # checks them (the append moved updated_at past this run's start).
        messages = [*without_merged(plan.refs, applied),
                    *current.messages[len(plan.original):]]
        if (messages != current.messages or current.stored_count != len(messages)
                or not current.is_list or applied or truncated):
            write_session(session, agent_id, session_id, messages, "repaired_at", ctx.now)
    return True


def _lock_hashes(session: Session, agent_id: str, ids: Sequence[str]) -> dict[str, str]:
    """The current ones of ``ids``, locked, with their content hashes (one superseded
    since the plan is missing, so the plan no longer matches)."""
    rows = session.execute(text("""
        SELECT id, content_hash FROM memories WHERE agent_id = :agent_id AND id = ANY(:ids)
          AND valid_to IS NULL
        ORDER BY id FOR UPDATE
    """), {"agent_id": agent_id, "ids": [uuid.UUID(i) for i in ids]})
    return {str(r.id): str(r.content_hash) for r in rows}


def _apply_merge(session: Session, ctx: JobContext, agent_id: str, merge: _Merge) -> bool:
    if _lock_hashes(session, agent_id, [merge.first, *merge.others]) != merge.expected:
        return False  # edited or forgotten since planned
    others = [uuid.UUID(i) for i in merge.others]
    try:
        with session.begin_nested():  # a dedup collision undoes just this merge
            importance = session.execute(text(
                "SELECT max(importance) FROM memories WHERE id = ANY(:ids)"),
                {"ids": [uuid.UUID(merge.first), *others]}).scalar_one()
            # Evict first: that frees the others' hashes before the first takes the new one.
            # (The move keeps the others' versions; the first's is kept here.)
            evict_ids(session, others, "session_merge", ctx.run_id)
            versions.record(session, [merge.first], "merged",
                            actor=versions.actor_of_run(ctx.run_id), agent_id=agent_id)
            writes.set_content(session, uuid.UUID(merge.first), merge.content, merge.vector,
                               model=ctx.store.embedder.name, importance=importance)
    except IntegrityError:
        return False
    return True


# A copy in evicted_memories as eviction would make it (every stored column but the
# embedding as data, the embedding apart), but the memory stays.
_DATA = ", ".join(f"'{column}', m.{column}" for column in STORED_COLUMNS
                  if column != "embedding")
_KEEP_FULL_TEXT = text(f"""
INSERT INTO evicted_memories (memory_id, agent_id, reason, run_id, data, embedding)
SELECT m.id, m.agent_id, 'truncated', :run_id, jsonb_build_object({_DATA}), m.embedding
FROM memories m WHERE m.id = :id
""")


def _apply_truncation(session: Session, ctx: JobContext, agent_id: str,
                      cut: _Truncation) -> bool:
    if _lock_hashes(session, agent_id, [cut.memory_id]) != {cut.memory_id: cut.expected_hash}:
        return False
    memory_id = uuid.UUID(cut.memory_id)
    try:
        with session.begin_nested():
            session.execute(_KEEP_FULL_TEXT, {"run_id": ctx.run_id, "id": memory_id})
            versions.record(session, [memory_id], "edited",
                            actor=versions.actor_of_run(ctx.run_id), agent_id=agent_id)
            writes.set_content(session, memory_id, cut.content, cut.vector,
                               model=ctx.store.embedder.name)
    except IntegrityError:
        return False
    return True
