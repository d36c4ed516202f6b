"""The ``cortex`` job (every 6 h): forget what went stale, learn from recent sessions.

Three parts, each in its own stats:

- stale cleanup: memories nobody recalled for ``stale_days`` (or since they were
  stored) with importance <= ``stale_importance`` move to evicted_memories ('stale');
  decisions, pinned memories and superseded ones never do.
- fact extraction: recently active sessions of ``consolidate_min`` or more messages get
  up to ``max_facts`` durable facts extracted by the LLM and stored as ``fact`` memories
  (source ``session:<id>``); once per session. Each new fact links ``derived_from`` the
  messages it came from: those whose text states it word for word (the extractive
  fallback's facts are sentences of them), else every message the extraction read.
  (The parameter, the session column ``consolidated_at`` and the stat
  ``sessions_consolidated`` keep the part's older name, "session consolidation": they
  are part of the interface. It is not the ``consolidate`` job.)
- session indexing: recently active sessions of ``index_min`` or more messages get a
  one-or-two sentence gist stored as a ``reflection`` memory keyed
  ``session-index:<id>`` and as the session's summary; once per session (indexed_at).
  The gist links ``derived_from`` every message it was written from.

Superseded messages are never read: a fact or gist must not restate what was replaced.
Each session's memories and its marker commit in one transaction, after the LLM call:
an ``LLMUnavailable`` leaves that session untouched for the retry.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd.errors import ValidationError
from memoryd.memory import llm as llm_mod
from memoryd.memory import writes
from memoryd.memory.maintenance.context import JobContext, JobOutcome, llm_label
from memoryd.memory.maintenance.evicting import evict_in_batches
from memoryd.memory.maintenance.new_memories import bounded, link_derived, prepare_memories
from memoryd.memory.maintenance.params import MAX_DAYS, MAX_HOURS, integer
from memoryd.memory.maintenance.session_lists import (
    LENGTH_SQL,
    Message,
    session_keys,
    session_messages,
)
from memoryd.memory.maintenance.sql import current

FACT_IMPORTANCE = 0.6
INDEX_IMPORTANCE = 0.5

_STALE = """
SELECT m.id FROM memories m
WHERE {scope} AND {current} AND coalesce(m.last_accessed_at, m.created_at) < :stale_before
  AND m.importance <= :max_importance AND m.category <> 'decision' AND NOT m.pinned
ORDER BY m.id
LIMIT :batch
"""


@dataclass(frozen=True)
class _Options:
    stale_before: datetime
    max_importance: float
    active_since: datetime
    facts_min: int  # the consolidate_min parameter
    index_min: int
    max_facts: int


def cortex(ctx: JobContext, stale_days: int = 90, stale_importance: float = 0.3,
           window_hours: int = 24, consolidate_min: int = 4, index_min: int = 2,
           max_facts: int = 3) -> JobOutcome:
    """Evict stale memories; extract facts from and index recently active sessions."""
    if isinstance(stale_importance, bool) or not isinstance(stale_importance, int | float) \
            or not 0 <= stale_importance <= 1:
        raise ValidationError("stale_importance", "must be a number from 0 to 1")
    opts = _Options(
        stale_before=ctx.now - timedelta(days=integer("stale_days", stale_days, 1, MAX_DAYS)),
        max_importance=float(stale_importance),
        active_since=ctx.now - timedelta(hours=integer("window_hours", window_hours, 1, MAX_HOURS)),
        facts_min=integer("consolidate_min", consolidate_min),
        index_min=integer("index_min", index_min),
        max_facts=integer("max_facts", max_facts))
    llm = ctx.get_llm()
    stats: dict[str, Any] = {"stale_removed": 0, "facts_extracted": 0, "facts_stored": 0,
                             "sessions_consolidated": 0, "sessions_indexed": 0,
                             "llm": llm_label(llm)}
    stats["stale_removed"], complete = evict_in_batches(
        ctx, _STALE.format(scope=ctx.agent_clause(), current=current()),
        {"agent_id": ctx.agent_id, "stale_before": opts.stale_before,
         "max_importance": opts.max_importance}, "stale")
    # Later parts only run once earlier ones finished, so a resumed run picks up in order.
    if complete:
        complete = _sweep(ctx, "consolidated_at", opts.facts_min, opts, stats,
                          lambda agent, sid: _extract_facts(ctx, llm, agent, sid, opts, stats))
    if complete:
        complete = _sweep(ctx, "indexed_at", opts.index_min, opts, stats,
                          lambda agent, sid: _index(ctx, llm, agent, sid, stats))
    return JobOutcome(stats, complete)


def _sweep(ctx: JobContext, marker: str, min_messages: int, opts: _Options,
           stats: dict[str, Any], handle: Callable[[str, str], None]) -> bool:
    """Call ``handle`` for each recently active session of ``min_messages`` or more
    whose ``marker`` column is unset; in a dry run, count them instead."""
    where = (f"s.{marker} IS NULL AND s.updated_at >= :active_since "
             f"AND {LENGTH_SQL} >= :min_messages")
    params = {"active_since": opts.active_since, "min_messages": min_messages}
    if ctx.dry_run:
        with ctx.store.session() as session:
            n = session.execute(text(
                f"SELECT count(*) FROM sessions s WHERE {ctx.agent_clause('s')} AND {where}"),
                {**params, "agent_id": ctx.agent_id}).scalar_one()
        key = "sessions_consolidated" if marker == "consolidated_at" else "sessions_indexed"
        stats[key] = int(n)
        return True
    for agent_id, session_id in session_keys(ctx, where, params):
        if ctx.out_of_time():
            return False
        # One session's failure is recorded, and the sweep goes on with the others.
        ctx.apart(marker, partial(handle, agent_id, session_id), agent_id=agent_id)
    return True


_CLAIM = """
UPDATE sessions SET {marker} = :now {extra}
WHERE agent_id = :agent_id AND session_id = :session_id AND {marker} IS NULL
RETURNING 1
"""


def _claim(session: Session, ctx: JobContext, agent_id: str, session_id: str, marker: str,
           summary: str | None = None) -> bool:
    """Set the once-per-session marker; False if it was already set (nothing to do)."""
    extra = ", summary = :summary" if summary else ""
    return session.execute(text(_CLAIM.format(marker=marker, extra=extra)), {
        "now": ctx.now, "agent_id": agent_id, "session_id": session_id,
        "summary": summary}).first() is not None


def _extract_facts(ctx: JobContext, llm: llm_mod.LLM, agent_id: str, session_id: str,
                   opts: _Options, stats: dict[str, Any]) -> None:
    messages = session_messages(ctx, agent_id, session_id)
    facts = llm_mod.extract_facts(llm, [m.content for m in messages], limit=opts.max_facts)
    source = bounded(f"session:{session_id}")
    prepared = prepare_memories(ctx, agent_id, [
        {"content": fact, "category": "fact", "importance": FACT_IMPORTANCE, "source": source}
        for fact in facts]) if facts else []
    with ctx.store.session() as session:
        if not _claim(session, ctx, agent_id, session_id, "consolidated_at"):
            return
        results = writes.write(session, prepared) if prepared else []
        # A fact the agent already held is not derived from these messages: not linked.
        link_derived(session, agent_id, [
            (r.id, origin) for p, r in zip(prepared, results, strict=True) if r.stored
            for origin in sources_of(p.item.content, messages)])
    stats["sessions_consolidated"] += 1
    stats["facts_extracted"] += len(facts)
    stats["facts_stored"] += sum(1 for r in results if r.stored)  # the rest were known


def sources_of(fact: str, messages: Sequence[Message]) -> list[uuid.UUID]:
    """The messages ``fact`` came from: those stating it word for word (case and spacing
    aside), else all of them, since the extraction does not say which it read it in."""
    wanted = _plain(fact).rstrip(".")
    stating = [m.id for m in messages if wanted and wanted in _plain(m.content)]
    return stating or [m.id for m in messages]


def _plain(value: str) -> str:
    return " ".join(value.lower().split())


def _index(ctx: JobContext, llm: llm_mod.LLM, agent_id: str, session_id: str,
           stats: dict[str, Any]) -> None:
    messages = session_messages(ctx, agent_id, session_id)
    gist = llm_mod.session_gist(llm, [m.content for m in messages])
    prepared = prepare_memories(ctx, agent_id, [{
        "content": gist, "category": "reflection", "importance": INDEX_IMPORTANCE,
        "source": bounded(f"session:{session_id}"),
        "key": bounded(f"session-index:{session_id}")}]) if gist else []
    with ctx.store.session() as session:
        if not _claim(session, ctx, agent_id, session_id, "indexed_at", gist or None):
            return
        if prepared:
            written = writes.write(session, prepared)[0]
            if written.stored:
                link_derived(session, agent_id, [(written.id, m.id) for m in messages])
    stats["sessions_indexed"] += 1
