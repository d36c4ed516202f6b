"""The ``summarize`` job: groups of old memories become one summary memory each.

Per agent, live (non-archived) memories older than ``older_than_days`` are grouped by
key prefix (the part of the key before ``:``) or, without a key, by category. Each
group of ``min_group`` or more becomes one ``summary`` memory keyed
``summary:<group>:<YYYY-MM-DD>``; the originals are archived (recall skips them by
default) and linked from the summary with ``derived_from`` links, so nothing is lost.

The extractive fallback (no LLM configured) keeps leading sentences within
``summary_chars``, so it can drop what later originals state: with it, an original is
archived only when the summary states all its facts (numbers, dates, identifiers, names,
negations: ``memoryd.memory.facts``); the others stay live (counted in
``skipped_distinct_facts``) and are summarized by a later run, or never. An LLM summary
is trusted to keep them (its prompt asks for names, numbers and dates); its paraphrases
cannot be checked word for word.

Decisions, pinned memories and existing summaries are never summarized. Each chunk of
a group (at most ``max_group`` originals) is written in its own transaction: the
summary, the archiving and the links commit together or not at all.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy import text

from memoryd.memory import llm as llm_mod
from memoryd.memory import writes
from memoryd.memory.facts import carries, facts_of
from memoryd.memory.maintenance.context import JobContext, JobOutcome, llm_label
from memoryd.memory.maintenance.new_memories import bounded, prepare_memories
from memoryd.memory.maintenance.params import MAX_DAYS, integer

MAX_GROUP = 200  # originals per summary: bounds the prompt, the locks and the transaction
_CONTENT_CHARS = 4000  # per original; the LLM helpers clip items to 2,000 chars anyway


# The group a memory belongs to: its key prefix, else its category. Keyed and unkeyed
# memories that land on the same label share a group, so two groups can never fight
# over one summary key.
_GROUP = "coalesce(nullif(split_part(m.key, ':', 1), ''), m.category)"
_ELIGIBLE = """m.archived_at IS NULL AND m.created_at < :cutoff
    AND m.category NOT IN ('summary', 'decision') AND NOT m.pinned
    AND (m.expires_at IS NULL OR m.expires_at > :now)"""


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
    """Summarize groups of old memories into one summary each; archive the originals
    with derived_from links."""
    opts = _Options(cutoff=ctx.now - timedelta(days=integer("older_than_days",
                                                            older_than_days, 0, MAX_DAYS)),
                    min_group=integer("min_group", min_group, 2),
                    max_group=integer("max_group", max_group, 2),
                    summary_chars=integer("summary_chars", summary_chars, 100))
    llm = ctx.get_llm()
    if ctx.dry_run:
        return JobOutcome({**_dry_run_counts(ctx, opts), "llm": llm_label(llm)})
    stats = _Stats()
    complete = True
    for agent_id, group, size in _groups(ctx, opts):
        if ctx.out_of_time():
            complete = False
            break
        stats.groups += 1
        # One group's failure is recorded, and the sweep goes on with the others.
        ctx.apart("summarize", partial(_summarize_group, ctx, llm, agent_id, group, size,
                                       opts, stats), agent_id=agent_id)
        if ctx.out_of_time():  # the group may have stopped part-way: a follow-up goes on
            complete = False
            break
    return JobOutcome({**stats.as_dict(), "llm": llm_label(llm)}, complete)


def _params(ctx: JobContext, opts: _Options) -> dict[str, Any]:
    return {"agent_id": ctx.agent_id, "cutoff": opts.cutoff, "now": ctx.now,
            "min_group": opts.min_group}


def _group_sql(ctx: JobContext) -> str:
    return f"""
        SELECT g.agent_id, g.grp, g.n FROM (
            SELECT m.agent_id, {_GROUP} AS grp, count(*) AS n
            FROM memories m
            WHERE {ctx.agent_clause()} AND {_ELIGIBLE}
            GROUP BY 1, 2
        ) g
        WHERE g.n >= :min_group"""


def _groups(ctx: JobContext, opts: _Options) -> Iterator[tuple[str, str, int]]:
    """(agent_id, group, size) of every eligible group, a page of ``batch_size`` at a time
    (keyset-paged, so a group that was skipped cannot make the sweep loop)."""
    after = ("", "")
    while True:
        with ctx.store.session() as session:
            rows = session.execute(text(
                f"{_group_sql(ctx)} AND (g.agent_id, g.grp) > (:after_agent, :after_group)"
                " ORDER BY g.agent_id, g.grp LIMIT :batch"),
                {**_params(ctx, opts), "after_agent": after[0], "after_group": after[1],
                 "batch": ctx.batch_size}).all()
        for row in rows:
            yield str(row.agent_id), str(row.grp), int(row.n)
        if len(rows) < ctx.batch_size:
            return
        after = (str(rows[-1].agent_id), str(rows[-1].grp))


def _dry_run_counts(ctx: JobContext, opts: _Options) -> dict[str, Any]:
    with ctx.store.session() as session:
        row = session.execute(text(f"""
            SELECT count(*) AS groups, coalesce(sum(n), 0) AS archived,
                   coalesce(sum(ceil(n / CAST(:max_group AS float))), 0) AS summaries
            FROM ({_group_sql(ctx)}) q"""),
            {**_params(ctx, opts), "max_group": opts.max_group}).one()
    return {"archived": int(row.archived), "summaries": int(row.summaries),
            "groups": int(row.groups), "skipped": 0, "skipped_distinct_facts": 0}


def _summarize_group(ctx: JobContext, llm: llm_mod.LLM, agent_id: str, group: str,
                     size: int, opts: _Options, stats: _Stats) -> None:
    """Summarize one group in near-equal chunks of at most ``max_group``, stopping when
    out of time. A chunk smaller than ``min_group`` (only when ``max_group`` is tiny)
    waits."""
    day = ctx.now.date().isoformat()
    for index, limit in enumerate(chunk_sizes(size, opts.max_group), start=1):
        if limit < opts.min_group:
            continue
        if index > 1 and ctx.out_of_time():
            return
        suffix = f":{day}" if index == 1 else f":{day}:{index}"
        key = bounded(f"summary:{group}{suffix}")
        archived, kept = _summarize_chunk(ctx, llm, agent_id, group, key, limit, opts)
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


_CHUNK = f"""
SELECT m.id, left(m.content, {_CONTENT_CHARS}) AS content, length(m.content) AS chars,
       m.content_hash, m.importance
FROM memories m
WHERE m.agent_id = :agent_id AND {_GROUP} = :grp AND {_ELIGIBLE}
ORDER BY m.created_at, m.id
LIMIT :limit
"""
_LOCK = f"""
SELECT m.id, m.content_hash FROM memories m
WHERE m.id = ANY(:ids) AND {_ELIGIBLE}
ORDER BY m.id
FOR UPDATE
"""
_ARCHIVE = text("""
UPDATE memories SET archived_at = :now, updated_at = now()
WHERE id = ANY(:ids) AND archived_at IS NULL
""")
_LINK = text("""
INSERT INTO memory_links (agent_id, source_id, target_id, kind)
SELECT :agent_id, :summary_id, t.id, 'derived_from' FROM unnest(CAST(:ids AS uuid[])) AS t(id)
ON CONFLICT DO NOTHING
""")


def _summarize_chunk(ctx: JobContext, llm: llm_mod.LLM, agent_id: str, group: str,
                     key: str, limit: int, opts: _Options) -> tuple[int, int]:
    """Summarize the oldest ``limit`` originals of a group; (archived, left live because
    the summary does not state their facts)."""
    params = {"agent_id": agent_id, "grp": group, "cutoff": opts.cutoff, "now": ctx.now}
    with ctx.store.session() as session:
        rows = session.execute(text(_CHUNK), {**params, "limit": limit}).all()
        # A re-run on the same day folds the earlier summary in instead of overwriting it.
        earlier = session.execute(text(
            "SELECT content FROM memories WHERE agent_id = :agent_id AND key = :key"),
            {"agent_id": agent_id, "key": key}).scalar_one_or_none()
    if len(rows) < opts.min_group:
        return 0, 0
    texts = ([str(earlier)] if earlier else []) + [str(r.content) for r in rows]
    # The LLM call happens before any write: LLMUnavailable leaves this chunk untouched.
    body = llm_mod.summarize(llm, texts, max_chars=opts.summary_chars)
    if not body.strip():
        return 0, 0
    if llm_mod.is_fallback(llm):
        carried = _carried(body, earlier, rows)
        if carried is None:
            return 0, 0
        rows, kept = carried, len(rows) - len(carried)
        if not rows:
            return 0, kept
    else:
        kept = 0
    prepared = prepare_memories(ctx, agent_id, [{
        "content": body, "key": key, "category": "summary", "source": "maintenance:summarize",
        "importance": max(float(r.importance) for r in rows),
        "metadata": {"group": group, "summarized": len(rows)}}])
    read = {(r.id, r.content_hash) for r in rows}
    with ctx.store.session() as session:
        locked = session.execute(text(_LOCK), {**params, "ids": [r.id for r in rows]}).all()
        if {(r.id, r.content_hash) for r in locked} != read:
            return 0, 0  # an original was edited, pinned or removed meanwhile: next run
        summary_id = writes.write(session, prepared)[0].id
        # Should the summary text equal an original, that original *is* the summary.
        ids = [r.id for r in rows if r.id != summary_id]
        session.execute(_ARCHIVE, {"ids": ids, "now": ctx.now})
        session.execute(_LINK, {"agent_id": agent_id, "summary_id": summary_id, "ids": ids})
    return len(ids), kept


def _carried(body: str, earlier: object, rows: Sequence[Any]) -> list[Any] | None:
    """The originals whose facts the extractive ``body`` states (numbers, dates,
    identifiers, names, negations: ``memoryd.memory.facts``); None when it drops a fact of
    the ``earlier`` summary it replaces. An original longer than the excerpt read is never
    carried whole."""
    texts = ([str(earlier)] if earlier else []) + [str(r.content) for r in rows]
    flags = carries(facts_of(body), texts)
    if earlier and not flags.pop(0):
        return None
    return [r for r, ok in zip(rows, flags, strict=True) if ok and r.chars <= _CONTENT_CHARS]
