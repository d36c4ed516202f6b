"""The ``summarize`` job: groups of old memories about the same thing become one
summary memory each.

Per agent, live current memories idle for ``older_than_days`` (not recalled since, else
created before) are grouped by what they are about (``summary_groups``): their key
prefix, else their session (messages their session no longer lists), else the named
subjects they are about; never by category, which mixes unrelated subjects, and a
memory with none of the three stays as it is. Each group of ``min_group`` or more
becomes one ``summary`` memory keyed ``summary:<group>:<YYYY-MM-DD>``; the originals are
archived (recall skips them by default), each kept as a version first (cause
``summarized``, the run as actor), and the summary links ``derived_from`` each of them,
so nothing is lost and recall credit follows the links.

The extractive fallback (no LLM configured) keeps leading sentences within
``summary_chars``, so it drops what later originals say: with it, an original is
archived only when the summary holds every sentence of it word for word (and so all its
facts: numbers, dates, identifiers, names, negations, ``memoryd.memory.facts``); the
others stay live (counted in ``skipped_distinct_facts``) and are summarized by a later
run, or never. Facts alone were not enough: a conversation's turns share their date and
speaker, so a summary of its first turns stated the "facts" of every other turn, whose
words it did not hold, and archiving those lost recall (LoCoMo recall@10 0.755 to
0.689). An LLM summary is trusted to keep them (its prompt asks for names, numbers and
dates); its paraphrases cannot be checked word for word.

Decisions, pinned memories, superseded memories and existing summaries are never
summarized. Each chunk of a group (at most ``max_group`` originals) is written in its
own transaction: the summary, the versions, the archiving and the links commit together
or not at all. A second run on the same day makes a new version of that day's summary
(its key), folding the earlier one in and linking it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy import text

from memoryd.memory import llm as llm_mod
from memoryd.memory import versions, writes
from memoryd.memory.facts import carries, facts_of
from memoryd.memory.llm_fallback import split_sentences
from memoryd.memory.maintenance.context import JobContext, JobOutcome, llm_label
from memoryd.memory.maintenance.new_memories import bounded, link_derived, prepare_memories
from memoryd.memory.maintenance.params import MAX_DAYS, integer
from memoryd.memory.maintenance.summary_groups import ELIGIBLE, GROUP, Group, counts, groups

MAX_GROUP = 200  # originals per summary: bounds the prompt, the locks and the transaction
_CONTENT_CHARS = 4000  # per original; the LLM helpers clip items to 2,000 chars anyway


@dataclass(frozen=True)
class _Options:
    cutoff: datetime
    min_group: int
    max_group: int
    summary_chars: int


@dataclass
class _Stats:
    archived: int = 0
    summaries: int = 0
    groups: int = 0
    skipped: int = 0  # chunks left alone: an original changed meanwhile, or no fact carried
    skipped_distinct_facts: int = 0  # originals left live: the summary drops a fact of theirs

    def as_dict(self) -> dict[str, Any]:
        return {"archived": self.archived, "summaries": self.summaries,
                "groups": self.groups, "skipped": self.skipped,
                "skipped_distinct_facts": self.skipped_distinct_facts}


def summarize(ctx: JobContext, older_than_days: int = 30, min_group: int = 2,
              max_group: int = MAX_GROUP, summary_chars: int = 800) -> JobOutcome:
    """Summarize groups of old memories about the same thing (key prefix, session or
    named subject) into one summary each; archive the originals with derived_from links."""
    opts = _Options(cutoff=ctx.now - timedelta(days=integer("older_than_days",
                                                            older_than_days, 0, MAX_DAYS)),
                    min_group=integer("min_group", min_group, 2),
                    max_group=integer("max_group", max_group, 2),
                    summary_chars=integer("summary_chars", summary_chars, 100))
    llm = ctx.get_llm()
    if ctx.dry_run:
        return JobOutcome({**counts(ctx, opts.cutoff, opts.min_group, opts.max_group),
                           "skipped": 0, "skipped_distinct_facts": 0, "llm": llm_label(llm)})
    stats = _Stats()
    complete = True
    for group in groups(ctx, opts.cutoff, opts.min_group):
        if ctx.out_of_time():
            complete = False
            break
        stats.groups += 1
        # One group's failure is recorded, and the sweep goes on with the others.
        ctx.apart("summarize", partial(_summarize_group, ctx, llm, group, opts, stats),
                  agent_id=group.agent_id)
        if ctx.out_of_time():  # the group may have stopped part-way: a follow-up goes on
            complete = False
            break
    return JobOutcome({**stats.as_dict(), "llm": llm_label(llm)}, complete)


def _summarize_group(ctx: JobContext, llm: llm_mod.LLM, group: Group, opts: _Options,
                     stats: _Stats) -> None:
    """Summarize one group in near-equal chunks of at most ``max_group``, stopping when
    out of time. A chunk smaller than ``min_group`` (only when ``max_group`` is tiny)
    waits."""
    day = ctx.now.date().isoformat()
    taken = 0
    for index, limit in enumerate(chunk_sizes(group.size, opts.max_group), start=1):
        members = group.ids[taken:taken + limit]
        taken += limit
        if limit < opts.min_group:
            continue
        if index > 1 and ctx.out_of_time():
            return
        suffix = f":{day}" if index == 1 else f":{day}:{index}"
        chunk = _Chunk(group, bounded(f"summary:{group.label}{suffix}"), limit, members)
        archived, kept = _summarize_chunk(ctx, llm, chunk, opts)
        stats.skipped_distinct_facts += kept
        if archived:
            stats.archived += archived
            stats.summaries += 1
        else:
            stats.skipped += 1


def chunk_sizes(size: int, most: int) -> list[int]:
    """``size`` split into the fewest near-equal parts of at most ``most``:
    201 by 200 is 101 + 100, never 200 + a lone 1."""
    parts = math.ceil(size / most)
    base, extra = divmod(size, parts)
    return [base + 1] * extra + [base] * (parts - extra)


@dataclass(frozen=True)
class _Chunk:
    """The originals one summary is written from: the oldest ``limit`` of a named group,
    or the given members of a subject group."""

    group: Group
    key: str
    limit: int
    members: tuple[Any, ...]

    def where(self) -> str:
        return "m.id = ANY(CAST(:ids AS uuid[]))" if self.group.ids else f"{GROUP} = :grp"


_CHUNK = f"""
SELECT m.id, left(m.content, {_CONTENT_CHARS}) AS content, length(m.content) AS chars,
       m.content_hash, m.importance
FROM memories m
WHERE m.agent_id = :agent_id AND {{where}} AND {ELIGIBLE}
ORDER BY m.created_at, m.id
LIMIT :limit
"""
_LOCK = f"""
SELECT m.id, m.content_hash FROM memories m
WHERE m.id = ANY(:ids) AND {ELIGIBLE}
ORDER BY m.id
FOR UPDATE
"""
_ARCHIVE = text("""
UPDATE memories SET archived_at = :now, updated_at = now()
WHERE id = ANY(:ids) AND archived_at IS NULL
""")
# The summary this chunk's key names today, if an earlier run wrote one: folded in.
_EARLIER = text("""SELECT id, content FROM memories
                   WHERE agent_id = :agent_id AND key = :key AND valid_to IS NULL""")


def _summarize_chunk(ctx: JobContext, llm: llm_mod.LLM, chunk: _Chunk,
                     opts: _Options) -> tuple[int, int]:
    """Summarize one chunk; (archived, left live because the summary does not state
    their facts)."""
    agent_id = chunk.group.agent_id
    params = {"agent_id": agent_id, "grp": chunk.group.label, "cutoff": opts.cutoff,
              "now": ctx.now, "ids": list(chunk.members)}
    with ctx.store.session() as session:
        rows = session.execute(text(_CHUNK.format(where=chunk.where())),
                               {**params, "limit": chunk.limit}).all()
        earlier = session.execute(_EARLIER, {"agent_id": agent_id, "key": chunk.key}).first()
    if len(rows) < opts.min_group:
        return 0, 0
    earlier_text = str(earlier.content) if earlier else None
    texts = ([earlier_text] if earlier_text else []) + [str(r.content) for r in rows]
    # The LLM call happens before any write: LLMUnavailable leaves this chunk untouched.
    body = llm_mod.summarize(llm, texts, max_chars=opts.summary_chars)
    if not body.strip():
        return 0, 0
    kept = 0
    if llm_mod.is_fallback(llm):
        carried = _carried(body, earlier_text, rows)
        if carried is None:
            return 0, 0
        rows, kept = carried, len(rows) - len(carried)
        if not rows:
            return 0, kept
    prepared = prepare_memories(ctx, agent_id, [{
        "content": body, "key": chunk.key, "category": "summary",
        "source": "maintenance:summarize",
        "importance": max(float(r.importance) for r in rows),
        "metadata": {"group": chunk.group.label, "summarized": len(rows)}}])
    return _write_chunk(ctx, chunk, rows, prepared, earlier, params), kept


def _write_chunk(ctx: JobContext, chunk: _Chunk, rows: Sequence[Any],
                 prepared: list[writes.PreparedRow], earlier: Any,
                 params: dict[str, Any]) -> int:
    """The summary, the originals' versions, their archiving and the summary's links, in
    one transaction, if no original changed since it was read; the originals archived."""
    agent_id = chunk.group.agent_id
    read = {(r.id, r.content_hash) for r in rows}
    with ctx.store.session() as session:
        locked = session.execute(text(_LOCK), {**params, "ids": [r.id for r in rows]}).all()
        if {(r.id, r.content_hash) for r in locked} != read:
            return 0  # an original was edited, pinned, replaced or removed meanwhile
        summary_id = writes.write(session, prepared)[0].id
        # Should the summary text equal an original, that original *is* the summary.
        ids = [r.id for r in rows if r.id != summary_id]
        versions.record(session, ids, "summarized", actor=versions.actor_of_run(ctx.run_id),
                        agent_id=agent_id)
        session.execute(_ARCHIVE, {"ids": ids, "now": ctx.now})
        origins = ids + ([earlier.id] if earlier is not None else [])
        link_derived(session, agent_id, [(summary_id, origin) for origin in origins])
    return len(ids)


def _carried(body: str, earlier: str | None, rows: Sequence[Any]) -> list[Any] | None:
    """The originals the extractive ``body`` holds whole: every sentence of theirs, word
    for word, and so every fact (numbers, dates, identifiers, names, negations:
    ``memoryd.memory.facts``); None when it drops a fact of the ``earlier`` summary it
    replaces. An original longer than the excerpt read is never carried whole."""
    texts = ([earlier] if earlier else []) + [str(r.content) for r in rows]
    flags = carries(facts_of(body), texts)
    if earlier and not flags.pop(0):
        return None
    return [r for r, ok in zip(rows, flags, strict=True)
            if ok and r.chars <= _CONTENT_CHARS and _holds(body, str(r.content))]


def _holds(body: str, original: str) -> bool:
    """Whether ``body`` holds every sentence of ``original`` as the extractive summary
    writes them (whitespace collapsed)."""
    sentences = split_sentences(original)
    return bool(sentences) and all(sentence in body for sentence in sentences)
