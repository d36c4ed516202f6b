"""Hybrid recall, from the query to the hits (``recall``): candidates from the vector
side and the keyword side (``keywords``), ranked in Python (``ranking``, ``scoring``).

A recall is planned first (``plan``: a ``RecallPlan`` says which searches and settings
the agent's size calls for, and holds their statements), then executed (``execute``)
in one transaction: the keyword side first, which needs no query embedding, so it is
sent ahead (``memoryd.db.pipeline``) and runs while the query is embedded
(``QueryVector``); then the vector side merged with its hits. On a session of explicit
transactions (``MemoryStore.read_session``) the BEGIN travels with the keyword side and
the COMMIT with the vector side, and the access bump is a transaction of its own.

Two vector searches, by the agent's size and index:
- ``hnsw`` for an agent with an HNSW index of its own (``index_agents``: the largest
  agents of ``agent_index_min_memories`` memories and more), and for any agent of more
  than ``recall_exact_threshold`` memories: pgvector's iterative scan, which on the
  shared index keeps scanning until enough rows pass the agent filter;
- ``exact`` for the others: exact kNN over the agent's rows, reached through the
  (agent_id, ...) btree. A filtered scan of the shared index at low selectivity would
  walk most of the graph to find a handful of rows; past a few thousand rows, though,
  the exact search costs more than the agent's own graph does.
Two keyword searches, by the agent's size: ``scan`` the agent's rows, or search the
``index`` keyed by (agent, lexeme) (above ``keywords.KEYWORD_SCAN_MAX`` memories).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from memoryd.config import Settings
from memoryd.db.pipeline import Pipe, Sent, pipeline
from memoryd.memory import asking, keywords, ranking, timewords
from memoryd.memory.embeddings import Embedder, to_pgvector
from memoryd.memory.recall_sql import (
    KEYWORD_PLAN_CACHE,
    KEYWORD_PLAN_CACHE_AFTER,
    Filters,
    KeywordHit,
    KeywordSearch,
    Sessions,
    Sql,
    VectorSearch,
    candidate_statement,
    keyword_statement,
    settings_statement,
    statement,
    vector_settings,
)
from memoryd.memory.rows import select_list
from memoryd.memory.scoring import Candidate
from memoryd.types import Recalled, RecallMode

__all__ = ["CONTEXT_REACH", "EXPAND_REACH", "AgentSizeCache", "Filters",
           "KeywordHit", "QueryVector", "RecallPlan", "Recaller", "Sessions", "StoreModels",
           "adjacent", "agent_models", "build_plan", "candidates", "execute", "keyword_hits",
           "plan", "plan_for", "recall", "search_breadth", "searched", "sessions_read",
           "store_models", "touch",
           "vector_settings", "whole_rows"]

SIZE_CACHE_SECONDS = 60.0
STORE_MODELS_SECONDS = 5.0
CONTEXT_MAX_MESSAGES = 5_000  # longer sessions are not read for context
# Chosen by the LoCoMo cross-validation (bench/README.md): a candidate's context score
# comes from the candidates up to CONTEXT_REACH places from it in its session (an answer
# is often the reply to a reply); the second round brings in the messages up to
# EXPAND_REACH places from its seeds (reaching 2 there found no more answers, and cost).
CONTEXT_REACH = 2
EXPAND_REACH = 1


@dataclass(frozen=True)
class RecallPlan:
    """How one recall reads its candidates, decided before any of it runs.

    Its round trips, in order (``execute``):
    1. ``keyword_setup``, for the index search only: ``keyword_plan_cache`` (a generic
       plan, see ``recall_sql.KEYWORD_PLAN_CACHE``), sent together with
    2. ``keyword_statement``, whose trailing condition ALSO APPLIES THE VECTOR QUERY'S
       SETTINGS for this transaction (``settings_after_keywords``: for the index search
       the plan-cache mode back to ``auto``, then ``vector_settings``), which saves a
       round trip; or, when the query has no words (no keyword statement),
       ``settings_statement`` applies ``vector_settings`` on its own, if any;
    3. the candidate query (``candidate_statement``), once the query's embedding is
       ready (it is computed while the server runs 1 and 2); with ``sessions``, it
       also reads the candidates' session positions and brings in the seeds' session
       neighbours (the second round).
    On a session of explicit transactions the transaction's BEGIN is sent with 1 and 2,
    its COMMIT with 3.
    """

    agent_id: str
    filters: Filters
    per_retriever: int
    vector_search: VectorSearch
    keyword_search: KeywordSearch
    vector_settings: Mapping[str, str]
    keyword_plan_cache: Mapping[str, str]
    settings_after_keywords: Mapping[str, str]
    keyword_setup: Sql | None
    keyword_statement: Sql | None
    settings_statement: Sql | None
    agent_size: int | None = None  # as counted by ``AgentSizeCache``, if it was
    sessions: Sessions | None = None

    def candidate_statement(self, query_vector: str, hits: list[KeywordHit],
                            model: str | None = None) -> Sql:
        """The candidate query: the vector side merged with the keyword side's ``hits``
        (with ``model``: only memories of that embedding model)."""
        return candidate_statement(self.agent_id, query_vector, hits, self.filters,
                                   self.per_retriever, search=self.vector_search,
                                   model=model, sessions=self.sessions)


@dataclass(frozen=True)
class Recaller:
    """What a store lends its recalls: its settings and per-process memos, the model of
    its memories, the query embedder of another model (while ``reembed`` moves an agent),
    and how it counts an access (at once on the primary, deferred from a replica) and
    notices an agent that outgrew the shared index."""

    settings: Settings
    sizes: AgentSizeCache
    models: StoreModels
    own_model: str
    query_embedder_for: Callable[[str], Embedder]
    touch: Callable[[Session, str, list[Any]], Mapping[Any, Mapping[Any, Any]]]
    notice_size: Callable[[Session, str, int], object]
    has_own_index: Callable[[Session, str], bool]
    # Whether the agent's own index is built with ``agent_indexes.GRAPH_OPTIONS``.
    own_graph_current: Callable[[Session, str], bool]


def recall(ctx: Recaller, session: Session, agent_id: str, query: str, filters: Filters, *,
           limit: int, mode: RecallMode, query_vector: QueryVector) -> list[Recalled]:
    """The agent's memories most relevant to ``query`` (validated), best first: the plan
    for the agent's size, the candidates of both sides, the ranking (the LLM's order in
    deep mode), and the access counted on the hits. ``query_vector`` is the query's
    embedding by ``ctx.own_model``, computed while the keyword statement runs."""
    settings = ctx.settings
    recall_plan = plan_for(ctx, session, agent_id, query, filters, limit)
    found = searched(ctx, session, recall_plan, query, query_vector)
    if recall_plan.agent_size is not None:
        ctx.notice_size(session, agent_id, recall_plan.agent_size)
    neighbours = adjacent(found) if settings.recall_context_weight > 0 else {}
    period = timewords.named_period(query) if settings.recall_time_boost else None
    asked = asking.asked(query) if settings.recall_fit_boost else None
    scored = ranking.order(found, neighbours, settings, period=period, asked=asked)
    if mode == "deep":
        rows = whole_rows(session, agent_id, [s.id for s in scored])
        scored = ranking.rerank(query, scored, {i: str(r["content"]) for i, r in rows.items()})
    scored = scored[:limit]
    return ranking.hits(scored, ctx.touch(session, agent_id, [s.id for s in scored]))


def plan_for(ctx: Recaller, session: Session, agent_id: str, query: str, filters: Filters,
             limit: int) -> RecallPlan:
    """The plan ``recall`` makes for ``limit`` hits under the store's settings."""
    settings = ctx.settings
    return plan(session, ctx.sizes, agent_id, query, filters,
                settings.recall_candidates * limit,
                ef_search=search_breadth(ctx, session, agent_id),
                sessions=sessions_read(settings.recall_context_weight, settings.recall_expand),
                has_own_index=ctx.has_own_index)


def search_breadth(ctx: Recaller, session: Session, agent_id: str) -> int:
    """The HNSW search breadth for the agent: ``agent_index_ef_search`` in a graph of
    its own built with ``agent_indexes.GRAPH_OPTIONS``, which finds more at that breadth
    than the other graphs do at ``hnsw_ef_search``, and faster."""
    if ctx.own_graph_current(session, agent_id):
        return ctx.settings.agent_index_ef_search
    return ctx.settings.hnsw_ef_search


def searched(ctx: Recaller, session: Session, recall_plan: RecallPlan, query: str,
             query_vector: QueryVector) -> list[Candidate]:
    """The plan's candidates, searched with the query's vector of each model. An agent
    whose memories all come from the store's model (the usual case) is searched with
    ``query_vector``; one whose memories come from other models (while ``reembed`` moves
    them) is searched once per model, each with the query embedded by that model, so no
    two models' vectors meet. Which models an agent has is asked only while the store
    holds several."""
    own = ctx.own_model
    models = ([own] if ctx.models.get(session) == (own,)
              else agent_models(session, recall_plan.agent_id))
    if not models or models == [own]:
        return execute(session, recall_plan, query_vector, own)
    hits = keyword_hits(session, recall_plan)
    found: list[Candidate] = []
    for i, model in enumerate(models):
        vector = (query_vector.result() if model == own
                  else to_pgvector(ctx.query_embedder_for(model).embed([query])[0]))
        found += candidates(session, recall_plan, vector, hits, model,
                            last=i == len(models) - 1)
    return found


def sessions_read(context_weight: float, expand: int) -> Sessions | None:
    """What recall reads of the candidates' sessions under these settings: nothing when
    neither the context score nor the second round is on."""
    if context_weight <= 0 and expand <= 0:
        return None
    return Sessions(seeds=expand, reach=EXPAND_REACH, max_messages=CONTEXT_MAX_MESSAGES)


def plan(session: Session, sizes: AgentSizeCache, agent_id: str, query: str,
         filters: Filters, per_retriever: int, *, ef_search: int,
         sessions: Sessions | None = None,
         has_own_index: Callable[[Session, str], bool] | None = None) -> RecallPlan:
    """The plan for the agent's size (counted through ``sizes``) and index: the HNSW
    search above ``sizes.threshold`` memories or for an agent with an index of its own
    (``has_own_index``), the index keyword search above ``keywords.KEYWORD_SCAN_MAX``.
    Filters that can leave few rows are counted first: few enough, searched exactly."""
    size = sizes.size(session, agent_id)
    large = size > sizes.threshold or (
        has_own_index is not None and has_own_index(session, agent_id))
    if large and filters.narrowing:
        large = filtered_size(session, agent_id, filters, sizes.threshold + 1) > sizes.threshold
    return build_plan(agent_id, query, filters, per_retriever,
                      vector_search="hnsw" if large else "exact",
                      keyword_search="index" if size > keywords.KEYWORD_SCAN_MAX else "scan",
                      ef_search=ef_search, agent_size=size, sessions=sessions)


def agent_count(session: Session, agent_id: str, cap: int) -> int:
    """How many memories the agent holds, counted up to ``cap`` (cheap at any size)."""
    return int(session.execute(statement(
        "SELECT count(*) FROM (SELECT 1 FROM memories WHERE agent_id = :a LIMIT :n) s"),
        {"a": agent_id, "n": cap}).scalar_one())


def filtered_size(session: Session, agent_id: str, filters: Filters, cap: int) -> int:
    """How many of the agent's memories pass ``filters``, counted up to ``cap``."""
    return int(session.execute(statement(
        f"SELECT count(*) FROM (SELECT 1 FROM memories m WHERE m.agent_id = :agent_id "
        f"AND {filters.sql()} LIMIT :cap) s"),
        {"agent_id": agent_id, "cap": cap, **filters.params()}).scalar_one())


def build_plan(agent_id: str, query: str, filters: Filters, per_retriever: int, *,
               vector_search: VectorSearch, keyword_search: KeywordSearch, ef_search: int,
               agent_size: int | None = None, sessions: Sessions | None = None) -> RecallPlan:
    """The plan for the searches given. ``ef_search`` is raised to ``per_retriever``.
    The candidate query is planned once per connection (a generic plan) unless the
    caller chose filters: how many rows their values leave can change the best plan."""
    settings = vector_settings(vector_search, ef_search=max(ef_search, per_retriever),
                               generic=not filters.chosen() and filters.as_of is None)
    index = keyword_search == "index"
    plan_cache = KEYWORD_PLAN_CACHE if index else {}
    after = {**KEYWORD_PLAN_CACHE_AFTER, **settings} if index else settings
    words = keywords.query_words(query)
    return RecallPlan(
        agent_id=agent_id, filters=filters, per_retriever=per_retriever,
        vector_search=vector_search, keyword_search=keyword_search,
        vector_settings=settings, keyword_plan_cache=plan_cache,
        settings_after_keywords=after,
        keyword_setup=settings_statement(plan_cache) if words else None,
        keyword_statement=keyword_statement(
            agent_id, words, filters, per_retriever, search=keyword_search,
            settings_after=after) if words else None,
        settings_statement=None if words else settings_statement(settings),
        agent_size=agent_size, sessions=sessions)


def keyword_hits(session: Session, recall_plan: RecallPlan) -> list[KeywordHit]:
    """The plan's statements before the candidate query: the keyword side's hits, best
    first (none if the query has no words), with the vector query's settings applied for
    the rest of the transaction either way."""
    with pipeline(session) as pipe:
        sent = _send_keyword_side(pipe, recall_plan)
    return [] if sent is None else _hits(sent.rows())


def _send_keyword_side(pipe: Pipe, recall_plan: RecallPlan) -> Sent | None:
    """Send the plan's statements before the candidate query; the keyword statement on
    its way, or None when the query has no words (the settings statement alone)."""
    if recall_plan.keyword_statement is None:
        if recall_plan.settings_statement is not None:
            recall_plan.settings_statement.send(pipe)
        return None
    if recall_plan.keyword_setup is not None:
        recall_plan.keyword_setup.send(pipe)
    return recall_plan.keyword_statement.send(pipe)


def _hits(rows: Iterable[Mapping[str, Any]]) -> list[KeywordHit]:
    """The keyword statement's rows as hits, best first."""
    return [KeywordHit(id=r["id"], rank=float(r["rank"]), pos=int(r["pos"])) for r in rows]


def candidates(session: Session, recall_plan: RecallPlan, query_vector: str,
               hits: list[KeywordHit], model: str | None = None, *,
               last: bool = False) -> list[Candidate]:
    """Up to ``per_retriever`` candidates from the vector side, merged with the keyword
    side's ``hits``, with raw components (after ``keyword_hits``, which applied the
    settings the vector side needs), and with the plan's ``sessions``, the seeds' session
    neighbours and everyone's session position. With ``model``, only memories of that
    embedding model, and ``query_vector`` must be that model's. ``last``: the plan's
    last read, whose COMMIT, on a session of explicit transactions, goes with it."""
    with pipeline(session) as pipe:
        sent = recall_plan.candidate_statement(query_vector, hits, model).send(pipe)
        if last:
            pipe.commit()
    found: dict[Any, Candidate] = {}
    for row in sent.rows():
        # A damaged session list can hold an id twice: the first place counts.
        found.setdefault(row["id"], Candidate(
            row=row, semantic=float(row["semantic"]), keyword_raw=float(row["keyword_raw"]),
            vector_rank=row["vector_rank"], keyword_rank=row["keyword_rank"],
            model=model or "", session_pos=row.get("session_pos")))
    return list(found.values())


# The distinct embedding models of the memories, as a loose scan of the (model, agent,
# id) index: one probe per model in the store (and, for an agent, one per model found),
# never a read of the rows.
_MODELS_CTE = """
WITH RECURSIVE models(name) AS (
    (SELECT embedding_model FROM memories ORDER BY embedding_model LIMIT 1)
    UNION ALL
    SELECT (SELECT embedding_model FROM memories WHERE embedding_model > models.name
            ORDER BY embedding_model LIMIT 1)
    FROM models WHERE models.name IS NOT NULL)"""
_STORE_MODELS = _MODELS_CTE + """
SELECT name FROM models WHERE name IS NOT NULL ORDER BY name"""
_AGENT_MODELS = _MODELS_CTE + """
SELECT name FROM models WHERE name IS NOT NULL AND EXISTS (
    SELECT 1 FROM memories WHERE embedding_model = models.name AND agent_id = :agent_id)
ORDER BY name"""


def store_models(session: Session) -> tuple[str, ...]:
    """The embedding models of all the store's memories."""
    return tuple(session.execute(statement(_STORE_MODELS)).scalars())


def agent_models(session: Session, agent_id: str) -> list[str]:
    """The embedding models of the agent's memories (one, except while ``reembed`` moves
    them to another; none for an agent without memories)."""
    return list(session.execute(statement(_AGENT_MODELS), {"agent_id": agent_id}).scalars())


@dataclass
class StoreModels:
    """Per-process memo of the embedding models of the whole store, read at most every
    ``STORE_MODELS_SECONDS``: while it holds one model, recall need not ask which models
    each agent's memories use. It may be that long out of date, so recall still names
    the model in its vector query: a model that appeared meanwhile is missed for a few
    seconds, never compared with another model's query."""

    _seen: tuple[float, tuple[str, ...]] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, session: Session) -> tuple[str, ...]:
        now = time.monotonic()
        with self._lock:
            seen = self._seen
        if seen is not None and now - seen[0] < STORE_MODELS_SECONDS:
            return seen[1]
        models = store_models(session)
        with self._lock:
            self._seen = (now, models)
        return models

    def clear(self) -> None:
        """Forget what was read (tests re-embed and empty the tables between them)."""
        with self._lock:
            self._seen = None


def execute(session: Session, recall_plan: RecallPlan, query_vector: QueryVector,
            model: str | None = None) -> list[Candidate]:
    """Run the plan: the keyword side sent ahead and ``query_vector`` computed while
    PostgreSQL runs it, then the vector side merged with its hits (with ``model``: its
    memories only). Embedding on this thread spares two thread wake-ups; sending the
    plan-cache setting with the keyword statement spares its round trip."""
    with pipeline(session) as pipe:
        sent = _send_keyword_side(pipe, recall_plan)
        vector = query_vector.result()
    hits = [] if sent is None else _hits(sent.rows())
    return candidates(session, recall_plan, vector, hits, model, last=True)


@dataclass
class AgentSizeCache:
    """Per-process memo of each agent's size, so recall does not count every time."""

    threshold: int
    _seen: dict[str, tuple[float, int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def size(self, session: Session, agent_id: str) -> int:
        """The agent's number of memories, counted up to ``threshold + 1`` at most."""
        now = time.monotonic()
        with self._lock:
            hit = self._seen.get(agent_id)
        if hit and now - hit[0] < SIZE_CACHE_SECONDS:
            return hit[1]
        # Counting stops at threshold + 1 rows: cheap for every agent size.
        count = agent_count(session, agent_id, self.threshold + 1)
        with self._lock:
            if len(self._seen) > 100_000:
                self._seen.clear()
            self._seen[agent_id] = (now, count)
        return count

    def clear(self) -> None:
        """Forget every size counted (tests empty the tables between them)."""
        with self._lock:
            self._seen.clear()


class QueryVector:
    """A recall query's embedding in pgvector's text form, computed on the first
    ``result()`` (then kept): recall asks for it once its keyword statement is on its
    way, so the embedding and the statement run at the same time. An embedding that
    fails raises there, and the recall fails with it."""

    def __init__(self, embedder: Callable[[], Embedder], text: str) -> None:
        self._embedder = embedder  # called at the first result(): it may load the model
        self._text = text
        self._vector: str | None = None

    def result(self) -> str:
        if self._vector is None:
            self._vector = to_pgvector(self._embedder().embed([self._text])[0])
        return self._vector


def adjacent(found: list[Candidate], reach: int = CONTEXT_REACH) -> dict[Any, list[Any]]:
    """For each candidate, the candidates within ``reach`` places of it in its session's
    message list (by the positions the candidate query read).

    A conversation's answer often shares no words with the question it answers (the
    question turn does): adjacency lets the turn that matched lend part of its score to
    its neighbours (``scoring.with_context``).
    """
    at = {(str(c.row["session_id"]), c.session_pos): c.row["id"]
          for c in found if c.session_pos is not None}
    neighbours: dict[Any, list[Any]] = {}
    for (sid, pos), mid in at.items():
        near = [at[(sid, pos + step)] for step in range(-reach, reach + 1)
                if step and (sid, pos + step) in at]
        if near:
            neighbours[mid] = near
    return neighbours


def touch(session: Session, agent_id: str, ids: list[Any]) -> dict[Any, Mapping[Any, Any]]:
    """Count an access for each memory recall returns, and read the whole rows of those
    memories (the candidate query read only what ranking needs), by id. A row shows the
    access this recall counted.

    The same statement sets ``synchronous_commit = off`` for the rest of the transaction
    (an uncorrelated subquery, evaluated once): the access bump is recall's only write,
    and waiting for its WAL flush at commit bought nothing worth the latency. A crash
    can lose the last fraction of a second of access counts, never a memory. Setting it
    here rather than up front saves a round trip. On a session of explicit transactions,
    after the reads' COMMIT, the statement is a transaction of its own, committed as it
    ends: no COMMIT round trip either.

    Rows another transaction holds locked (a maintenance job rewriting them) are skipped,
    not waited for: recall never waits on maintenance, and never deadlocks with a job
    that updates several of the agent's rows in another order (``reembed``'s batches
    did); such a memory misses one access count and is read as it stands.
    """
    if not ids:
        return {}
    rows: dict[Any, Mapping[Any, Any]] = {row["id"]: row for row in session.execute(statement(f"""
        UPDATE memories AS m SET access_count = m.access_count + 1, last_accessed_at = now()
        WHERE m.id IN (SELECT id FROM memories WHERE agent_id = :agent_id
                       AND id = ANY(:ids) FOR UPDATE SKIP LOCKED)
          AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL
        RETURNING {select_list()}
    """), {"agent_id": agent_id, "ids": ids}).mappings()}
    if len(rows) < len(ids):
        rows |= whole_rows(session, agent_id, [i for i in ids if i not in rows])
    return rows


def whole_rows(session: Session, agent_id: str, ids: list[Any]) -> dict[Any, Mapping[Any, Any]]:
    """The agent's memories among ``ids``, whole rows by id (deep mode reads their
    contents; ``touch`` the rows it could not lock)."""
    return {row["id"]: row for row in session.execute(statement(
        f"SELECT {select_list()} FROM memories m WHERE m.agent_id = :agent_id "
        f"AND m.id = ANY(:ids)"), {"agent_id": agent_id, "ids": ids}).mappings()}
