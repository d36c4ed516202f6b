"""Which old memories ``summarize`` gathers into one summary: those about the same thing.

A memory's group is, in this order: its key's prefix (the part before ``:``: "trip" for
``trip:day1``, as the agent named it), else its session (``session:<id>``), else the
named subjects it is about (``subject:<names>``: ``judging.subjects``, the same reading
of a text the store-time judge uses; "Alice Moreau's sister lives in Madrid" is about
"alice moreau", a memory about two people is in the group of those two only). A memory
with none of them stays unsummarized: grouping it by its category once put facts about
forty people into one summary. The first two are SQL expressions, paged over the table;
the subjects are read from each ungrouped memory's head in Python, one agent at a time.

Eligible: current (never superseded: history stays as it was), live, idle since the
cutoff (not recalled since, else created before it, as ``evict`` counts age: what agents
still recall stays as it is), not expired, not a decision, a summary, a pinned memory or
a session's index (``session-index:<id>``, one per session: gists of unrelated sessions),
and not a message its session still lists: a conversation's messages are its own record
until ``compact_sessions`` moves them out of the list (recall lifts a message by its
neighbours there); then they are gathered by their session. Summaries of listed turns
ranked below the turns they replaced (LoCoMo recall@10 0.755 to 0.730 with summarize
alone, bench/README.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import text

from memoryd.memory import judging
from memoryd.memory.maintenance.context import JobContext
from memoryd.memory.maintenance.sql import NIL_UUID, current

SUBJECT_CHARS = 300  # of a memory's content read for its subjects: named early

# The group SQL can name; NULL for a memory with neither a key prefix nor a session. A
# key prefix never holds ":", so it cannot be mistaken for a session or subject group.
GROUP = ("coalesce(nullif(split_part(m.key, ':', 1), ''), "
         "'session:' || nullif(m.session_id, ''))")
# A message its session lists (``message_ids``: the list's ids, migration 0014).
LISTED = """EXISTS (SELECT 1 FROM sessions s
    WHERE s.agent_id = m.agent_id AND s.session_id = m.session_id
      AND CAST(m.id AS text) = ANY(s.message_ids))"""
ELIGIBLE = f"""m.archived_at IS NULL AND {current()}
    AND coalesce(m.last_accessed_at, m.created_at) < :cutoff
    AND m.category NOT IN ('summary', 'decision') AND NOT m.pinned
    AND (m.key IS NULL OR m.key NOT LIKE 'session-index:%')
    AND (m.expires_at IS NULL OR m.expires_at > :now)
    AND (m.session_id IS NULL OR NOT {LISTED})"""
SUBJECT_PREFIX = "subject:"


@dataclass(frozen=True)
class Group:
    """One group of an agent: its label (the summary key's middle), its size, and for a
    subject group its members, oldest first (SQL cannot select them by label)."""

    agent_id: str
    label: str
    size: int
    ids: tuple[Any, ...] = field(default=())


def groups(ctx: JobContext, cutoff: datetime, min_group: int) -> Iterator[Group]:
    """Every group of ``min_group`` or more eligible memories: the SQL-named ones, then
    each agent's subject groups."""
    yield from _named_groups(ctx, cutoff, min_group)
    yield from _subject_groups(ctx, cutoff, min_group)


def counts(ctx: JobContext, cutoff: datetime, min_group: int,
           max_group: int) -> dict[str, int]:
    """What a run would do, for a dry run: groups, originals and summaries (a group of
    more than ``max_group`` is summarized in several chunks)."""
    found = list(groups(ctx, cutoff, min_group))
    return {"groups": len(found), "archived": sum(g.size for g in found),
            "summaries": sum(math.ceil(g.size / max_group) for g in found)}


def _named_sql(ctx: JobContext) -> str:
    return f"""
        SELECT g.agent_id, g.grp, g.n FROM (
            SELECT m.agent_id, {GROUP} AS grp, count(*) AS n
            FROM memories m
            WHERE {ctx.agent_clause()} AND {ELIGIBLE} AND {GROUP} IS NOT NULL
            GROUP BY 1, 2
        ) g
        WHERE g.n >= :min_group AND (g.agent_id, g.grp) > (:after_agent, :after_group)
        ORDER BY g.agent_id, g.grp LIMIT :batch"""


def _named_groups(ctx: JobContext, cutoff: datetime, min_group: int) -> Iterator[Group]:
    """The key-prefix and session groups, a page of ``batch_size`` at a time
    (keyset-paged, so a group that was skipped cannot make the sweep loop)."""
    after = ("", "")
    while True:
        with ctx.store.session() as session:
            rows = session.execute(text(_named_sql(ctx)), {
                "agent_id": ctx.agent_id, "cutoff": cutoff, "now": ctx.now,
                "min_group": min_group, "after_agent": after[0], "after_group": after[1],
                "batch": ctx.batch_size}).all()
        for row in rows:
            yield Group(str(row.agent_id), str(row.grp), int(row.n))
        if len(rows) < ctx.batch_size:
            return
        after = (str(rows[-1].agent_id), str(rows[-1].grp))


def _ungrouped_sql(ctx: JobContext) -> str:
    return f"""
        SELECT m.agent_id, m.id, m.created_at, left(m.content, {SUBJECT_CHARS}) AS head
        FROM memories m
        WHERE {ctx.agent_clause()} AND {ELIGIBLE} AND {GROUP} IS NULL
          AND (m.agent_id, m.id) > (:after_agent, CAST(:after_id AS uuid))
        ORDER BY m.agent_id, m.id LIMIT :batch"""


def _subject_groups(ctx: JobContext, cutoff: datetime, min_group: int) -> Iterator[Group]:
    """Each agent's subject groups, read a page of ``batch_size`` memories at a time;
    an agent's groups are complete (and yielded) once its last page is read."""
    agent: str | None = None
    members: dict[str, list[tuple[datetime, Any]]] = {}
    after = ("", NIL_UUID)
    while True:
        with ctx.store.session() as session:
            rows = session.execute(text(_ungrouped_sql(ctx)), {
                "agent_id": ctx.agent_id, "cutoff": cutoff, "now": ctx.now,
                "after_agent": after[0], "after_id": after[1],
                "batch": ctx.batch_size}).all()
        for row in rows:
            if row.agent_id != agent:
                yield from _complete(agent, members, min_group)
                agent, members = str(row.agent_id), {}
            name = subject(str(row.head))
            if name:
                members.setdefault(name, []).append((row.created_at, row.id))
        if len(rows) < ctx.batch_size:
            yield from _complete(agent, members, min_group)
            return
        after = (str(rows[-1].agent_id), str(rows[-1].id))


def subject(text: str) -> str:
    """The names ``text`` is about, sorted and joined by spaces ("" for none)."""
    return " ".join(sorted(judging.subjects(text)))


def _complete(agent: str | None, members: dict[str, list[tuple[datetime, Any]]],
              min_group: int) -> Iterator[Group]:
    """One agent's subject groups of ``min_group`` or more, in name order, members
    oldest first."""
    if agent is None:
        return
    for name in sorted(members):
        found = sorted(members[name], key=lambda one: (one[0], str(one[1])))
        if len(found) >= min_group:
            yield Group(agent, f"{SUBJECT_PREFIX}{name}", len(found),
                        tuple(memory_id for _, memory_id in found))
