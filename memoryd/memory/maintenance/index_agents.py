"""The ``index_agents`` job: a partial HNSW index of its own for each large agent.

The shared HNSW index serves every agent through a filtered scan: to find an agent's
k nearest memories, pgvector's iterative scan walks the whole fleet's graph and drops
the other agents' rows, about k / (the agent's share of the table) of them: for a
100,000-memory agent in a million, ten rows read per row kept. pgvector's
documented answer is a partial index per filter value; PostgreSQL maintains it on every
write and the planner picks it for that agent's queries (recall's vector query names a
large agent as a literal, generic plans included: ``recall_sql.vector_settings``), so
recall's SQL is unchanged.

The job keeps one for each of the ``MAX_AGENT_INDEXES`` largest agents holding at least
``agent_index_min_memories`` memories; an agent keeps its index until it falls below
half that (so an agent at the line does not have its index built and dropped in turn),
or out of the largest. Indexes are built and dropped ``CONCURRENTLY``: recall and
writes go on meanwhile. A build interrupted by a crash leaves an invalid index, which
the next run drops and builds again. Builds stop at the run's time budget; a follow-up
run builds the rest.

Each graph is built with ``agent_indexes.GRAPH_OPTIONS`` (``ef_construction`` 200,
where the shared index has 64): recall searches it at a smaller breadth
(``agent_index_ef_search``) and finds more of the agent's nearest memories, in less time.
An index built with other options is rebuilt in place, concurrently, after the run's
builds.

Costs: each indexed agent's writes also go into its own graph, and every statement on
``memories`` is planned against one more index (hence the cap).

The same run counts the document frequencies of the lexemes of every agent whose recalls
use the indexed keyword side (above ``keywords.KEYWORD_SCAN_MAX`` memories) and of every
indexed agent (``agent_terms``, migration 0007), which recall otherwise estimates on a
sample of 1,000 memories at every call (most of a mid-sized agent's recall time): one
``ts_stat`` pass over the agent's memories, keeping the terms that are not rare
(``keywords.rare_cut``). An agent is counted again only once its size has moved by
more than ``RECOUNT_SHARE`` since, or its counts are older than ``RECOUNT_AFTER``:
recounting every such agent every hour would read every large agent's memories every
hour, for weights (``ln(N / df)``) that a few percent of growth moves by about a
percent. Counts of agents no longer counted are deleted.

Each drop, build, rebuild and count is a step of its own: one that fails (a lock or a
relation in the way, an agent's data the database refuses) is listed in the run's stats
(``agents_failed``, ``failed``: the agent id or index, the step, the error's class) and
the run goes on with the other agents; the next run tries it again. No agent id is ever
written into SQL that a driver parses for parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

from psycopg import sql
from sqlalchemy import Connection, text
from sqlalchemy.orm import Session

from memoryd.db.pipeline import run_composed
from memoryd.errors import ValidationError
from memoryd.memory import keywords
from memoryd.memory.agent_indexes import (
    GRAPH_OPTIONS,
    MAX_AGENT_INDEXES,
    drop_index,
    existing_indexes,
    index_name,
    older_graphs,
)
from memoryd.memory.keywords import rare_cut
from memoryd.memory.maintenance.context import JobContext, JobOutcome

_GRAPH = ", ".join(f"{key} = {int(value)}" for key, value in GRAPH_OPTIONS.items())
# DDL takes no parameters: the index's name and the agent id are composed in by psycopg
# (``psycopg.sql``) and the statement is sent as it is (``pipeline.run_composed``).
_INDEX_SQL = sql.SQL("CREATE INDEX CONCURRENTLY {name} ON memories USING hnsw "
                     f"(embedding vector_cosine_ops) WITH ({_GRAPH}) WHERE agent_id = {{agent}}")
# A graph built within this much memory is built several times faster than one that
# spills to disk; sized for an agent of a few hundred thousand memories.
_BUILD_MEMORY = "512MB"
# How long a build waits for the transactions it must outlast (it never blocks writes).
_BUILD_LOCK_TIMEOUT = "5min"
# How long one agent's term count waits for a lock (its counts' rows, held by an erasure
# or a stuck transaction) before it fails alone and the run goes on with the others.
COUNT_LOCK_TIMEOUT = "1min"
# When an indexed agent's term counts are taken again (see the module docstring).
RECOUNT_SHARE = 0.05
RECOUNT_AFTER = "24 hours"


@dataclass(frozen=True)
class IndexPlan:
    """What a run builds, drops and keeps (agent ids; index names for drops), and which
    of the kept indexes it rebuilds with ``GRAPH_OPTIONS`` (agent ids)."""

    build: list[str]
    drop: list[str]
    keep: list[str]
    rebuild: list[str] = field(default_factory=list)


def agent_sizes(conn: Connection, at_least: int) -> list[tuple[str, int]]:
    """Agents holding at least ``at_least`` memories, largest first (one aggregate over
    the (agent_id, created_at) index)."""
    rows = conn.execute(text("""
        SELECT agent_id, count(*) AS n FROM memories GROUP BY agent_id
        HAVING count(*) >= :n ORDER BY count(*) DESC, agent_id
    """), {"n": at_least}).all()
    return [(str(r.agent_id), int(r.n)) for r in rows]


def plan(sizes: list[tuple[str, int]], existing: dict[str, bool], min_memories: int,
         cap: int = MAX_AGENT_INDEXES, older: frozenset[str] = frozenset()) -> IndexPlan:
    """The indexes to build, drop and rebuild, given agent sizes (largest first), the
    indexes there are and those of them built before ``GRAPH_OPTIONS`` (``older``).
    ``min_memories`` 0 means none wanted: every per-agent index is dropped."""
    chosen: list[str] = []
    if min_memories > 0:
        for agent, count in sizes:
            indexed = existing.get(index_name(agent), False)
            if count >= (min_memories // 2 if indexed else min_memories):
                chosen.append(agent)
            if len(chosen) == cap:
                break
    wanted = {index_name(agent) for agent in chosen}
    build = [a for a in chosen if not existing.get(index_name(a), False)]
    drop = sorted(name for name, valid in existing.items()
                  if name not in wanted or not valid)
    keep = [a for a in chosen if a not in build]
    rebuild = [a for a in keep if index_name(a) in older]
    return IndexPlan(build=build, drop=drop, keep=keep, rebuild=rebuild)


def _build(conn: Connection, agent_id: str) -> None:
    # The agent id goes into the DDL as a literal (DDL takes no parameters); recall's
    # vector query names it as the same literal.
    run_composed(conn, _INDEX_SQL.format(name=sql.Identifier(index_name(agent_id)),
                                         agent=sql.Literal(agent_id)))


def _rebuild(conn: Connection, agent_id: str) -> None:
    # The new options, then a concurrent rebuild that reads them: recall and writes go
    # on through the old graph until the new one takes its place (an interrupted rebuild
    # leaves an invalid ``..._ccnew`` index, which the next run drops).
    name = sql.Identifier(index_name(agent_id))
    run_composed(conn, sql.SQL(f"ALTER INDEX {{}} SET ({_GRAPH})").format(name))
    run_composed(conn, sql.SQL("REINDEX INDEX CONCURRENTLY {}").format(name))


def count_terms(session: Session, agent_id: str) -> int:
    """Count ``agent_id``'s lexemes afresh into ``agent_terms`` (in the caller's
    transaction): the terms that are not rare (``keywords.rare_cut``). Returns the
    terms kept."""
    # One pass over all of the agent's memories: not bounded by the engine's
    # per-statement timeout, which would fail it every hour for a huge agent; but a lock
    # is waited for only so long (``COUNT_LOCK_TIMEOUT``).
    session.execute(text("SELECT set_config('statement_timeout', '0', true), "
                         "set_config('lock_timeout', :wait, true)"),
                    {"wait": COUNT_LOCK_TIMEOUT})
    memories = int(session.execute(text(
        "SELECT count(*) FROM memories WHERE agent_id = :a"), {"a": agent_id}).scalar_one())
    session.execute(text("""
        INSERT INTO agent_term_stats (agent_id, memories, counted_at) VALUES (:a, :n, now())
        ON CONFLICT (agent_id) DO UPDATE SET memories = excluded.memories,
                                             counted_at = excluded.counted_at
    """), {"a": agent_id, "n": memories})
    session.execute(text("DELETE FROM agent_terms WHERE agent_id = :a"), {"a": agent_id})
    kept = session.execute(text(f"""
        INSERT INTO agent_terms (agent_id, lexeme, df)
        SELECT :a, word, ndoc FROM ts_stat(
            format('SELECT tsv FROM memories WHERE agent_id = %L', CAST(:a AS text)))
        WHERE ndoc > {rare_cut("CAST(:n AS integer)")}
    """), {"a": agent_id, "n": memories})
    return int(getattr(kept, "rowcount", 0) or 0)


def stale_counts(session: Session, sizes: dict[str, int]) -> list[str]:
    """The agents of ``sizes`` (agent -> memories now) whose term counts are missing,
    older than ``RECOUNT_AFTER``, or taken at a size more than ``RECOUNT_SHARE`` away
    from now; in the order of ``sizes``."""
    rows = session.execute(text(f"""
        SELECT agent_id, memories FROM agent_term_stats
        WHERE agent_id = ANY(CAST(:agents AS text[]))
          AND counted_at > now() - interval '{RECOUNT_AFTER}'
    """), {"agents": list(sizes)}).all()
    fresh = {str(r.agent_id) for r in rows
             if abs(sizes[str(r.agent_id)] - int(r.memories)) <= RECOUNT_SHARE * int(r.memories)}
    return [agent for agent in sizes if agent not in fresh]


def forget_terms(session: Session, keep: list[str]) -> int:
    """Delete the term counts of every agent not in ``keep``; how many agents'."""
    gone = session.execute(text(
        "DELETE FROM agent_term_stats WHERE agent_id <> ALL(CAST(:keep AS text[]))"),
        {"keep": keep})
    return int(getattr(gone, "rowcount", 0) or 0)


def _build_settings(conn: Connection) -> None:
    # A build takes as long as it takes (the engine's per-statement timeout would cancel
    # a large agent's build and leave an invalid index to retry forever). The connection
    # is discarded afterwards rather than reset.
    conn.execute(text("SET statement_timeout = 0"))
    conn.execute(text(f"SET lock_timeout = '{_BUILD_LOCK_TIMEOUT}'"))
    conn.execute(text(f"SET maintenance_work_mem = '{_BUILD_MEMORY}'"))


def index_agents(ctx: JobContext, **params: Any) -> JobOutcome:
    """Give each large agent an HNSW index of its own."""
    if params:
        raise ValidationError("params", f"index_agents takes none, got {sorted(params)}")
    if ctx.agent_id is not None:
        raise ValidationError("agent_id", "index_agents covers the whole fleet; run it "
                                          "without an agent")
    min_memories = ctx.store.settings.agent_index_min_memories
    # CONCURRENTLY needs autocommit.
    with ctx.store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        existing = existing_indexes(conn)
        sizes = agent_sizes(conn, max(1, min_memories // 2)) if min_memories else []
        todo = plan(sizes, existing, min_memories, older=older_graphs(conn))
        keyword_sizes = dict(agent_sizes(conn, keywords.KEYWORD_SCAN_MAX + 1))
        stats: dict[str, Any] = {"agents_indexed": len(todo.keep), "built": 0, "dropped": 0,
                                 "rebuilt": 0, "to_build": len(todo.build),
                                 "to_drop": len(todo.drop), "to_rebuild": len(todo.rebuild)}
        if ctx.dry_run:
            return JobOutcome(stats)
        try:
            _build_settings(conn)
            return _apply(ctx, conn, todo, stats, {**keyword_sizes, **dict(sizes)})
        finally:
            conn.invalidate()


def _apply(ctx: JobContext, conn: Connection, todo: IndexPlan,
           stats: dict[str, Any], sizes: dict[str, int]) -> JobOutcome:
    """Drop, build, rebuild, then count terms. Each index and each agent is a step of its
    own (``JobContext.apart``): one that fails is recorded and the run goes on, so one
    agent's id, lock or name in the way never leaves the rest of the fleet unindexed."""
    for name in todo.drop:
        if ctx.apart("drop", partial(drop_index, conn, name), index=name):
            stats["dropped"] += 1
    for agent in todo.build:
        if ctx.out_of_time():
            return JobOutcome(stats, complete=False)
        if ctx.apart("build", partial(_build, conn, agent), agent_id=agent):
            stats["built"] += 1
            stats["agents_indexed"] += 1
    for agent in todo.rebuild:
        if ctx.out_of_time():
            return JobOutcome(stats, complete=False)
        if ctx.apart("rebuild", partial(_rebuild, conn, agent), agent_id=agent):
            stats["rebuilt"] += 1
    return _count(ctx, todo, stats, sizes)


def _count(ctx: JobContext, todo: IndexPlan, stats: dict[str, Any],
           sizes: dict[str, int]) -> JobOutcome:
    """Count the terms of the agents whose counts are stale, one transaction each.
    Counted: the indexed agents, and every agent whose keyword side uses the index."""
    counted = sorted(set(todo.keep + todo.build)
                     | {a for a, n in sizes.items() if n > keywords.KEYWORD_SCAN_MAX})
    with ctx.store.session() as session:
        stats["term_counts_deleted"] = forget_terms(session, counted)
        stale = stale_counts(session, {agent: sizes[agent] for agent in counted})
    stats["agents_terms_counted"] = 0
    stats["agents_terms_fresh"] = len(counted) - len(stale)
    for agent in stale:
        if ctx.out_of_time():
            return JobOutcome(stats, complete=False)
        if ctx.apart("count_terms", partial(_count_one, ctx, agent),
                     agent_id=agent):
            stats["agents_terms_counted"] += 1
    return JobOutcome(stats)


def _count_one(ctx: JobContext, agent_id: str) -> None:
    with ctx.store.session() as session:  # one transaction per agent
        count_terms(session, agent_id)
