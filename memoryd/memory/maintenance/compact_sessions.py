"""``compact_sessions``: summarize all but the most recent messages of long sessions.

The job reads a session, asks the LLM for the summary outside any transaction, and then
rewrites the list under ``FOR UPDATE`` only if the part it read is still the list's
prefix; messages appended meanwhile are carried over untouched (see ``session_lists``).
In that transaction the summary links ``derived_from`` each message it summarizes, and
each of those is kept as a version (cause ``compacted``) as it leaves the list.
Superseded messages are not summarized (a summary must not restate a replaced fact),
linked or versioned; their references leave the list with the others.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from sqlalchemy import text

from memoryd.memory import llm as llm_mod
from memoryd.memory import sessions as session_refs
from memoryd.memory import versions
from memoryd.memory.maintenance.context import JobContext, JobOutcome, llm_label
from memoryd.memory.maintenance.new_memories import bounded, link_derived, prepare_memories
from memoryd.memory.maintenance.params import integer
from memoryd.memory.maintenance.session_lists import (
    LENGTH_SQL,
    as_uuid,
    read_messages,
    ref_id,
    session_keys,
    single_session,
    write_session,
)
from memoryd.memory.writes import write

SUMMARY_PREFIX = "Summary of earlier conversation:"
MAX_SUMMARY_IDS = 1000  # stats are stored in the run audit: keep them bounded


@dataclass(frozen=True)
class _CompactOptions:
    keep: int
    min_len: int
    chunk_chars: int
    summary_chars: int


def compact_sessions(ctx: JobContext, threshold: int = 30, keep: int = 10,
                     chunk_chars: int = 80_000, summary_chars: int = 1500,
                     session_id: str | None = None) -> JobOutcome:
    """Summarize all but the most recent messages of long sessions into one system
    summary message.

    Sessions with at least ``threshold`` messages keep their ``keep`` most recent ones;
    the older ones are summarized by the LLM (``chunk_chars`` characters per call) into
    one memory (role system, category summary, importance 0.9, source
    ``session:<id>``), and the list becomes ``[summary] + recent``.

    The summarized messages' memories stay in the memories table (recall still finds
    them); only the session's list stops referencing them. The summary memory has no
    session_id, so storing it does not append it to the session a second time.
    ``session_id`` (with the run's agent_id) compacts just that session.
    """
    sid = single_session(ctx, session_id)
    kept = integer("keep", keep, 0)
    # At least two older messages, or a re-run would re-summarize its own summary.
    opts = _CompactOptions(keep=kept, min_len=max(integer("threshold", threshold), kept + 2),
                           chunk_chars=integer("chunk_chars", chunk_chars, 1000),
                           summary_chars=integer("summary_chars", summary_chars, 100))
    llm = ctx.get_llm()
    stats: dict[str, Any] = {"compacted": 0, "summarized": 0, "kept": 0, "summary_ids": [],
                             "skipped": 0, "llm": llm_label(llm)}
    where = f"{LENGTH_SQL} >= :min_len"
    if ctx.dry_run:
        return JobOutcome({**stats, **_compact_dry_run(ctx, where, opts, sid)})
    for agent_id, session in session_keys(ctx, where, {"min_len": opts.min_len}, sid):
        if ctx.out_of_time():
            return JobOutcome(stats, complete=False)
        # One session's failure is recorded, and the sweep goes on with the others.
        ctx.apart("compact", partial(_compact_one, ctx, llm, agent_id, session, opts, stats),
                  agent_id=agent_id)
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
        read = read_messages(session, agent_id, session_id)
    if read is None or len(read.messages) < opts.min_len:
        return
    split = len(read.messages) - opts.keep
    older = read.messages[:split]
    chunks = _plan_chunks(ctx, agent_id, older, opts.chunk_chars)
    # Every LLM call happens before any write: LLMUnavailable leaves the session as it was.
    content = _summary_text(ctx, llm, agent_id, chunks, len(older), opts)
    prepared = prepare_memories(ctx, agent_id, [{
        "content": content, "role": "system", "category": "summary", "importance": 0.9,
        "source": bounded(f"session:{session_id}"),
        "metadata": {"summarized_messages": len(older)}}])
    with ctx.store.session() as session:
        current = read_messages(session, agent_id, session_id, lock=True)
        if current is None or current.messages[:split] != older:
            stats["skipped"] += 1  # rewritten meanwhile (forget, repair): next sweep
            return
        summary_id = str(write(session, prepared)[0].id)
        summarized = [memory_id for chunk in chunks for memory_id in chunk]
        versions.record(session, summarized, "compacted",
                        actor=versions.actor_of_run(ctx.run_id), agent_id=agent_id)
        link_derived(session, agent_id,
                     [(uuid.UUID(summary_id), memory_id) for memory_id in summarized])
        ts = _ts_text(older[-1]) or ctx.now.isoformat()  # sorts before the kept messages
        messages = [session_refs.message_ref(summary_id, "system", ts),
                    *current.messages[split:]]
        write_session(session, agent_id, session_id, messages, "compacted_at", ctx.now,
                      [str(i) for r in older if (i := ref_id(r))])
    stats["compacted"] += 1
    stats["summarized"] += len(older)
    stats["kept"] += len(messages) - 1
    if len(stats["summary_ids"]) < MAX_SUMMARY_IDS:
        stats["summary_ids"].append(summary_id)


def _summary_text(ctx: JobContext, llm: llm_mod.LLM, agent_id: str,
                  chunks: Sequence[list[uuid.UUID]], older: int, opts: _CompactOptions) -> str:
    parts = []
    for chunk in chunks:
        texts = _chunk_texts(ctx, agent_id, chunk, opts.chunk_chars)
        part = llm_mod.summarize(llm, texts, max_chars=opts.summary_chars)
        if part.strip():
            parts.append(part)
    body = "\n\n".join(parts)
    if len(body) > opts.chunk_chars:
        # A huge session: summarize the summaries once more, so the memory stays bounded.
        body = llm_mod.summarize(llm, parts, max_chars=opts.chunk_chars)
    if not body.strip():
        body = f"({older} earlier messages; none of them could be read)"
    return f"{SUMMARY_PREFIX}\n{body}"


def _plan_chunks(ctx: JobContext, agent_id: str, older: Sequence[Any],
                 chunk_chars: int) -> list[list[uuid.UUID]]:
    """Current memory ids in message order, cut into chunks of at most ``chunk_chars``
    characters (a longer single message is clipped to that, so it fills one chunk);
    superseded messages are left out, as orphan references are."""
    ids = [u for u in (as_uuid(ref_id(ref)) for ref in older) if u is not None]
    with ctx.store.session() as session:
        sizes = {r.id: int(r.size) for r in session.execute(text("""
            SELECT id, least(char_length(content), :cap) AS size FROM memories
            WHERE agent_id = :agent_id AND id = ANY(:ids) AND valid_to IS NULL
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
