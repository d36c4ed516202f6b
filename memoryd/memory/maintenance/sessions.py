"""Session maintenance: ``compact_sessions`` and ``repair_sessions``.

A session row holds an ordered JSONB list of references ``{"id", "role", "ts"}`` to
memories. Agents append to it concurrently (``messages || new``), so both jobs read a
session, do the slow work (LLM, embeddings) outside any transaction, and then rewrite it
under ``FOR UPDATE`` only if the part they read is still the list's prefix; messages
appended meanwhile are carried over untouched.

This module also holds the session helpers the ``cortex`` job uses.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from memoryd import validation as check
from memoryd.errors import ValidationError
from memoryd.memory import llm as llm_mod
from memoryd.memory import sessions as session_refs
from memoryd.memory.embeddings import to_pgvector
from memoryd.memory.maintenance.base import JobContext, JobOutcome, evict_ids, job
from memoryd.memory.maintenance.summarize import (
    bounded,
    llm_label,
    positive,
    prepare_memories,
)
from memoryd.memory.writes import content_hash, write

SUMMARY_PREFIX = "Summary of earlier conversation:"
TRUNCATION_MARKER = "… [truncated by memoryd repair; full text in evicted_memories]"
MAX_SUMMARY_IDS = 1000  # stats are stored in the run audit: keep them bounded

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
# A session row written by hand can hold anything: these keep SQL over it from failing.
MESSAGES_SQL = ("(CASE WHEN jsonb_typeof(s.messages) = 'array' THEN s.messages "
                "ELSE CAST('[]' AS jsonb) END)")
LENGTH_SQL = f"jsonb_array_length({MESSAGES_SQL})"
REF_UUID_SQL = ("(CASE WHEN e.msg->>'id' ~* "
                "'^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' "
                "THEN CAST(e.msg->>'id' AS uuid) END)")


# --- shared session helpers -------------------------------------------------------------


def message_list(value: object) -> list[Any]:
    """A session's ``messages`` as a list, whatever a broken row holds."""
    if isinstance(value, list):
        return value
    return [value] if isinstance(value, dict) else []


def ref_id(ref: object) -> str | None:
    """The reference's memory id, if it has a non-empty string one."""
    if isinstance(ref, dict):
        value = ref.get("id")
        if isinstance(value, str) and value.strip():
            return value
    return None


def as_uuid(value: str | None) -> uuid.UUID | None:
    """The UUID spelled canonically in ``value`` (as memoryd writes them), else None."""
    return uuid.UUID(value) if value is not None and _UUID.fullmatch(value) else None


def single_session(ctx: JobContext, session_id: object) -> str | None:
    """Validate the on-demand ``session_id`` parameter: it needs the run's agent."""
    if session_id is None:
        return None
    sid = check.short_text("session_id", session_id)
    if ctx.agent_id is None:
        raise ValidationError("agent_id", "is required when session_id is given")
    return sid


def session_keys(ctx: JobContext, where: str, params: Mapping[str, Any],
                 session_id: str | None = None) -> Iterator[tuple[str, str]]:
    """(agent_id, session_id) of the sessions matching ``where`` (alias ``s``), keyset-paged
    ``batch_size`` at a time, each page read in its own short transaction."""
    if session_id is not None:
        where = f"({where}) AND s.session_id = :session_id"
    after = ("", "")
    while True:
        with ctx.store.session() as session:
            rows = session.execute(text(f"""
                SELECT s.agent_id, s.session_id FROM sessions s
                WHERE {ctx.agent_clause('s')} AND ({where})
                  AND (s.agent_id, s.session_id) > (:after_agent, :after_session)
                ORDER BY s.agent_id, s.session_id LIMIT :batch
            """), {**params, "agent_id": ctx.agent_id, "session_id": session_id,
                   "after_agent": after[0], "after_session": after[1],
                   "batch": ctx.batch_size}).all()
        for row in rows:
            yield str(row.agent_id), str(row.session_id)
        if len(rows) < ctx.batch_size:
            return
        after = (str(rows[-1].agent_id), str(rows[-1].session_id))


_CONTENTS = text(f"""
SELECT left(m.content, :chars) AS content
FROM sessions s
CROSS JOIN LATERAL jsonb_array_elements({MESSAGES_SQL}) WITH ORDINALITY AS e(msg, n)
JOIN memories m ON m.agent_id = s.agent_id AND m.id = {REF_UUID_SQL}
WHERE s.agent_id = :agent_id AND s.session_id = :session_id
ORDER BY e.n
LIMIT :limit
""")


def message_contents(ctx: JobContext, agent_id: str, session_id: str, *, limit: int = 500,
                     chars: int = 2000) -> list[str]:
    """The contents of a session's first ``limit`` messages in message order, each clipped
    to ``chars`` (the LLM helpers clip prompt items to 2,000 characters anyway)."""
    with ctx.store.session() as session:
        return [str(c) for c in session.execute(_CONTENTS, {
            "agent_id": agent_id, "session_id": session_id, "limit": limit,
            "chars": chars}).scalars()]


class _Row(NamedTuple):
    messages: list[Any]
    stored_count: int  # the message_count column
    is_list: bool  # False for a hand-written object or scalar in place of the list


def _read_messages(session: Session, agent_id: str, session_id: str,
                   lock: bool = False) -> _Row | None:
    row = session.execute(text(
        "SELECT messages, message_count FROM sessions "
        "WHERE agent_id = :agent_id AND session_id = :session_id"
        + (" FOR UPDATE" if lock else "")),
        {"agent_id": agent_id, "session_id": session_id}).first()
    if row is None:
        return None
    return _Row(message_list(row.messages), int(row.message_count),
                isinstance(row.messages, list))


_WRITE_SESSION = """
UPDATE sessions SET messages = CAST(:messages AS jsonb), message_count = :count, {stamp} = :now
WHERE agent_id = :agent_id AND session_id = :session_id
"""


def _write_session(session: Session, agent_id: str, session_id: str, messages: list[Any],
                   stamp: str, now: datetime) -> None:
    # updated_at is left alone on purpose: it means "an agent wrote here", which the
    # cortex and repair sweeps use to find new activity.
    session.execute(text(_WRITE_SESSION.format(stamp=stamp)), {
        "messages": json.dumps(messages), "count": len(messages), "now": now,
        "agent_id": agent_id, "session_id": session_id})


# --- compact_sessions -------------------------------------------------------------------


@dataclass(frozen=True)
class _CompactOptions:
    keep: int
    min_len: int
    chunk_chars: int
    summary_chars: int


@job("compact_sessions", "Summarize all but the most recent messages of long sessions "
     "into one system summary message.")
def compact_sessions(ctx: JobContext, threshold: int = 30, keep: int = 10,
                     chunk_chars: int = 80_000, summary_chars: int = 1500,
                     session_id: str | None = None) -> JobOutcome:
    """Sessions with at least ``threshold`` messages keep their ``keep`` most recent ones;
    the older ones are summarized by the LLM (``chunk_chars`` characters per call) into
    one memory (role system, category summary, importance 0.9, source
    ``session:<id>``), and the list becomes ``[summary] + recent``.

    The summarized messages' memories stay in the memories table (recall still finds
    them); only the session's list stops referencing them. The summary memory has no
    session_id, so storing it does not append it to the session a second time.
    ``session_id`` (with the run's agent_id) compacts just that session.
    """
    sid = single_session(ctx, session_id)
    kept = positive("keep", keep, 0)
    # At least two older messages, or a re-run would re-summarize its own summary.
    opts = _CompactOptions(keep=kept, min_len=max(positive("threshold", threshold), kept + 2),
                           chunk_chars=positive("chunk_chars", chunk_chars, 1000),
                           summary_chars=positive("summary_chars", summary_chars, 100))
    llm = ctx.get_llm()
    stats: dict[str, Any] = {"compacted": 0, "summarized": 0, "kept": 0, "summary_ids": [],
                             "skipped": 0, "llm": llm_label(llm)}
    where = f"{LENGTH_SQL} >= :min_len"
    if ctx.dry_run:
        return JobOutcome({**stats, **_compact_dry_run(ctx, where, opts, sid)})
    for agent_id, session in session_keys(ctx, where, {"min_len": opts.min_len}, sid):
        if ctx.out_of_time():
            return JobOutcome(stats, complete=False)
        _compact_one(ctx, llm, agent_id, session, opts, stats)
    return JobOutcome(stats)


def _compact_dry_run(ctx: JobContext, where: str, opts: _CompactOptions,
                     session_id: str | None) -> dict[str, int]:
    only = " AND s.session_id = :session_id" if session_id is not None else ""
    with ctx.store.session() as session:
        row = session.execute(text(f"""
            SELECT count(*) AS n, coalesce(sum({LENGTH_SQL} - :keep), 0) AS summarized
            FROM sessions s WHERE {ctx.agent_clause('s')} AND {where}{only}
        """), {"agent_id": ctx.agent_id, "session_id": session_id, "keep": opts.keep,
               "min_len": opts.min_len}).one()
    return {"compacted": int(row.n), "summarized": int(row.summarized),
            "kept": int(row.n) * opts.keep}


def _compact_one(ctx: JobContext, llm: llm_mod.LLM, agent_id: str, session_id: str,
                 opts: _CompactOptions, stats: dict[str, Any]) -> None:
    with ctx.store.session() as session:
        read = _read_messages(session, agent_id, session_id)
    if read is None or len(read.messages) < opts.min_len:
        return
    split = len(read.messages) - opts.keep
    older = read.messages[:split]
    # Every LLM call happens before any write: LLMUnavailable leaves the session as it was.
    content = _summary_text(ctx, llm, agent_id, older, opts)
    prepared = prepare_memories(ctx, agent_id, [{
        "content": content, "role": "system", "category": "summary", "importance": 0.9,
        "source": bounded(f"session:{session_id}"),
        "metadata": {"summarized_messages": len(older)}}])
    with ctx.store.session() as session:
        current = _read_messages(session, agent_id, session_id, lock=True)
        if current is None or current.messages[:split] != older:
            stats["skipped"] += 1  # rewritten meanwhile (forget, repair): next sweep
            return
        summary_id = str(write(session, prepared)[0].id)
        ts = _ts_text(older[-1]) or ctx.now.isoformat()  # sorts before the kept messages
        messages = [session_refs.message_ref(summary_id, "system", ts),
                    *current.messages[split:]]
        _write_session(session, agent_id, session_id, messages, "compacted_at", ctx.now)
    stats["compacted"] += 1
    stats["summarized"] += len(older)
    stats["kept"] += len(messages) - 1
    if len(stats["summary_ids"]) < MAX_SUMMARY_IDS:
        stats["summary_ids"].append(summary_id)


def _summary_text(ctx: JobContext, llm: llm_mod.LLM, agent_id: str, older: Sequence[Any],
                  opts: _CompactOptions) -> str:
    parts = []
    for chunk in _plan_chunks(ctx, agent_id, older, opts.chunk_chars):
        texts = _chunk_texts(ctx, agent_id, chunk, opts.chunk_chars)
        part = llm_mod.summarize(llm, texts, max_chars=opts.summary_chars)
        if part.strip():
            parts.append(part)
    body = "\n\n".join(parts)
    if len(body) > opts.chunk_chars:
        # A huge session: summarize the summaries once more, so the memory stays bounded.
        body = llm_mod.summarize(llm, parts, max_chars=opts.chunk_chars)
    if not body.strip():
        body = f"({len(older)} earlier messages; none of them could be read)"
    return f"{SUMMARY_PREFIX}\n{body}"


def _plan_chunks(ctx: JobContext, agent_id: str, older: Sequence[Any],
                 chunk_chars: int) -> list[list[uuid.UUID]]:
    """Memory ids in message order, cut into chunks of at most ``chunk_chars`` characters
    (a longer single message is clipped to that, so it fills one chunk)."""
    ids = [u for u in (as_uuid(ref_id(ref)) for ref in older) if u is not None]
    with ctx.store.session() as session:
        sizes = {r.id: int(r.size) for r in session.execute(text("""
            SELECT id, least(char_length(content), :cap) AS size FROM memories
            WHERE agent_id = :agent_id AND id = ANY(:ids)
        """), {"agent_id": agent_id, "ids": ids, "cap": chunk_chars})}
    chunks: list[list[uuid.UUID]] = []
    current: list[uuid.UUID] = []
    used = 0
    for memory_id in ids:
        size = sizes.get(memory_id)
        if size is None:
            continue  # an orphan reference: nothing to summarize
        if current and used + size > chunk_chars:
            chunks.append(current)
            current, used = [], 0
        current.append(memory_id)
        used += size
    if current:
        chunks.append(current)
    return chunks


def _chunk_texts(ctx: JobContext, agent_id: str, ids: list[uuid.UUID], chars: int) -> list[str]:
    with ctx.store.session() as session:
        found = {r.id: str(r.content) for r in session.execute(text("""
            SELECT id, left(content, :chars) AS content FROM memories
            WHERE agent_id = :agent_id AND id = ANY(:ids)
        """), {"agent_id": agent_id, "ids": ids, "chars": chars})}
    return [found[i] for i in ids if i in found]


def _ts_text(ref: object) -> str | None:
    value = ref.get("ts") if isinstance(ref, dict) else None
    return value if isinstance(value, str) and value else None


# --- repair_sessions: the phases, as pure functions over one session's list -------------


@dataclass
class _Memory:
    """What repair needs to know about a referenced memory."""

    size: int  # bytes of content
    content_hash: str
    protected: bool  # pinned or a decision: never merged away or rewritten


def _norm(memory_id: str) -> str:
    parsed = as_uuid(memory_id)
    return str(parsed) if parsed is not None else memory_id


def drop_missing_ids(messages: Sequence[Any]) -> tuple[list[dict[str, Any]], int]:
    """Phase 1: references that are not objects, or have no (or an empty) id."""
    kept = [ref for ref in messages if ref_id(ref) is not None]
    return kept, len(messages) - len(kept)


def drop_duplicates(refs: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Phase 2: later references to an id already in the list (the first one stays)."""
    seen: set[str] = set()
    kept = []
    for ref in refs:
        key = _norm(str(ref["id"]))
        if key not in seen:
            seen.add(key)
            kept.append(ref)
    return kept, len(refs) - len(kept)


def drop_orphans(refs: Sequence[dict[str, Any]],
                 existing: Mapping[str, _Memory]) -> tuple[list[dict[str, Any]], int]:
    """Phase 4: references to memories that no longer exist (or never could: not a UUID)."""
    kept = [ref for ref in refs if _norm(str(ref["id"])) in existing]
    return kept, len(refs) - len(kept)


def _parse_ts(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def sort_by_ts(refs: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Phase 5: stable sort by timestamp; returns how many references moved.

    A reference without a readable ts sorts with its predecessor, so it is never thrown
    to one end of the list on a guess.
    """
    keys: list[datetime] = []
    last = datetime.min.replace(tzinfo=UTC)
    for ref in refs:
        parsed = _parse_ts(ref.get("ts"))
        if parsed is not None:
            last = parsed
        keys.append(last)
    order = sorted(range(len(refs)), key=keys.__getitem__)
    return [refs[i] for i in order], sum(1 for pos, i in enumerate(order) if pos != i)


def merge_runs(refs: Sequence[dict[str, Any]],
               existing: Mapping[str, _Memory]) -> list[list[str]]:
    """Phase 3 (planning): runs of two or more consecutive messages of the same role.

    System messages (summaries) and messages without a role are never merged; pinned
    memories and decisions break a run, because they must not be merged away or edited.
    """
    runs: list[list[str]] = []
    current: list[str] = []
    role: object = None
    for ref in refs:
        memory_id = _norm(str(ref["id"]))
        this_role = ref.get("role")
        mergeable = (isinstance(this_role, str) and this_role != "system"
                     and not existing[memory_id].protected)
        if mergeable and current and this_role == role:
            current.append(memory_id)
            continue
        if len(current) > 1:
            runs.append(current)
        current, role = ([memory_id] if mergeable else []), this_role
    if len(current) > 1:
        runs.append(current)
    return runs


def without_merged(refs: Sequence[dict[str, Any]], merges: Sequence[_Merge]) -> list[Any]:
    """The list once ``merges`` are applied: the merged-away references are gone."""
    gone = {other for merge in merges for other in merge.others}
    return [ref for ref in refs if _norm(str(ref["id"])) not in gone]


def truncate_text(content: str, max_bytes: int) -> str:
    """``content`` cut to at most ``max_bytes`` UTF-8 bytes including the marker line."""
    marker = f"\n{TRUNCATION_MARKER}"
    budget = max_bytes - len(marker.encode("utf-8"))
    head = content.encode("utf-8")[:budget].decode("utf-8", errors="ignore")
    return head.rstrip() + marker


# --- repair_sessions: the plan, the writes, the job -------------------------------------


@dataclass
class _Merge:
    first: str
    others: list[str]
    expected: dict[str, str]  # id -> content_hash when planned; anything else: skip
    content: str
    content_hash: str
    vector: str = ""


@dataclass
class _Truncation:
    memory_id: str
    expected_hash: str  # after any merge of the same memory in this plan
    content: str
    content_hash: str
    vector: str = ""


@dataclass
class _Counts:
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
    row: _Row  # the session as read
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
    counts: _Counts = field(default_factory=_Counts)
    sessions_checked: int = 0
    sessions_repaired: int = 0
    conflicts: int = 0  # rewritten by someone else between read and write: next sweep

    def as_dict(self) -> dict[str, int]:
        return {**self.counts.as_dict(), "sessions_checked": self.sessions_checked,
                "sessions_repaired": self.sessions_repaired, "conflicts": self.conflicts}


_SINCE_MARGIN = timedelta(minutes=5)  # appends commit a little after their now()


@job("repair_sessions", "Fix broken session message lists: missing and duplicate ids, "
     "orphans, order, same-role runs, oversized messages.")
def repair_sessions(ctx: JobContext, max_message_bytes: int = 512_000,
                    session_id: str | None = None) -> JobOutcome:
    """Repair session lists in seven phases (stats count each):

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
    max_bytes = positive("max_message_bytes", max_message_bytes, 1024)
    totals = _RepairTotals()
    since = None if sid is not None else _last_complete_sweep(ctx)
    where = "CAST(:since AS timestamptz) IS NULL OR s.updated_at >= CAST(:since AS timestamptz)"
    for agent_id, session in session_keys(ctx, where, {"since": since}, sid):
        if ctx.out_of_time():
            return JobOutcome({**totals.as_dict(), "sweep_complete": False}, complete=False)
        totals.sessions_checked += 1
        _repair_one(ctx, agent_id, session, max_bytes, totals)
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
        row = _read_messages(session, agent_id, session_id)
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


def _memory_info(session: Session, agent_id: str, messages: Sequence[Any]) -> dict[str, _Memory]:
    ids = list({u for u in (as_uuid(ref_id(ref)) for ref in messages) if u is not None})
    rows = session.execute(text("""
        SELECT id, octet_length(content) AS size, content_hash,
               pinned OR category = 'decision' AS protected
        FROM memories WHERE agent_id = :agent_id AND id = ANY(:ids)
    """), {"agent_id": agent_id, "ids": ids})
    return {str(r.id): _Memory(int(r.size), str(r.content_hash), bool(r.protected))
            for r in rows}


def _contents(ctx: JobContext, agent_id: str, ids: Sequence[str]) -> dict[str, tuple[str, str]]:
    with ctx.store.session() as session:
        return {str(r.id): (str(r.content), str(r.content_hash)) for r in session.execute(
            text("SELECT id, content, content_hash FROM memories "
                 "WHERE agent_id = :agent_id AND id = ANY(:ids)"),
            {"agent_id": agent_id, "ids": [uuid.UUID(i) for i in ids]})}


def _hash_taken(ctx: JobContext, agent_id: str, digest: str, besides: Sequence[str]) -> bool:
    """Whether another memory of the agent already has this content (the dedup index)."""
    with ctx.store.session() as session:
        return session.execute(text("""
            SELECT 1 FROM memories WHERE agent_id = :agent_id AND content_hash = :h
              AND NOT (id = ANY(:ids)) LIMIT 1
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
        digest = content_hash(merged)
        if _hash_taken(ctx, agent_id, digest, run):
            counts.merge_skipped += 1  # would break dedup; the messages stay as they are
            continue
        merges.append(_Merge(run[0], run[1:], {i: found[i][1] for i in run}, merged, digest))
    return merges


def _plan_truncations(ctx: JobContext, agent_id: str, plan: _Plan,
                      existing: Mapping[str, _Memory], max_bytes: int) -> list[_Truncation]:
    merged = {m.first: m for m in plan.merges}
    out = []
    for ref in without_merged(plan.refs, plan.merges):
        memory_id = _norm(str(ref["id"]))
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
        digest = content_hash(short)
        if _hash_taken(ctx, agent_id, digest, [memory_id]):
            plan.counts.truncate_skipped += 1
            continue
        out.append(_Truncation(memory_id, expected, short, digest))
    return out


def _embed(ctx: JobContext, plan: _Plan) -> None:
    """Embed every rewritten text in one batch, before the write transaction opens."""
    targets: list[_Merge | _Truncation] = [*plan.merges, *plan.truncations]
    if not targets:
        return
    vectors = ctx.store.embedder.embed([t.content for t in targets])
    for target, vector in zip(targets, vectors, strict=True):
        target.vector = to_pgvector(vector)


def _write_repair(ctx: JobContext, agent_id: str, session_id: str, plan: _Plan) -> bool:
    """Apply the plan in one transaction; False (nothing written) when the session
    changed other than by appends since it was read."""
    with ctx.store.session() as session:
        current = _read_messages(session, agent_id, session_id, lock=True)
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
            _write_session(session, agent_id, session_id, messages, "repaired_at", ctx.now)
    return True


def _lock_hashes(session: Session, agent_id: str, ids: Sequence[str]) -> dict[str, str]:
    rows = session.execute(text("""
        SELECT id, content_hash FROM memories WHERE agent_id = :agent_id AND id = ANY(:ids)
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
            evict_ids(session, others, "session_merge", ctx.run_id)
            session.execute(text("""
                UPDATE memories SET content = :content, content_hash = :h,
                    embedding = CAST(:vector AS vector), importance = :importance,
                    updated_at = now()
                WHERE id = :id
            """), {"content": merge.content, "h": merge.content_hash, "vector": merge.vector,
                   "importance": importance, "id": uuid.UUID(merge.first)})
    except IntegrityError:
        return False
    return True


# Mirrors base._EVICT's columns, but copies instead of moving: the memory stays.
_KEEP_FULL_TEXT = text("""
INSERT INTO evicted_memories (memory_id, agent_id, reason, run_id, data, embedding)
SELECT m.id, m.agent_id, 'truncated', :run_id, to_jsonb(m) - 'embedding' - 'tsv', m.embedding
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
            session.execute(text("""
                UPDATE memories SET content = :content, content_hash = :h,
                    embedding = CAST(:vector AS vector), updated_at = now()
                WHERE id = :id
            """), {"content": cut.content, "h": cut.content_hash, "vector": cut.vector,
                   "id": memory_id})
    except IntegrityError:
        return False
    return True
