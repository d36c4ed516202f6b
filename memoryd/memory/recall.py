"""Hybrid recall: candidates from the HNSW vector index and the full-text side (see
``keywords``: the agent's rows, or a GIN index keyed by (agent, lexeme)), scored in
Python (see ``scoring``).

Two queries, in one transaction: the keyword side first (``keyword_candidates``),
which needs no query embedding, so ``MemoryStore.recall`` runs it while the embedding
is computed on another thread; then the vector side merged with its hits
(``candidates``).

Two plans for the vector side, by the agent's size:
- small agents (<= ``recall_exact_threshold`` memories): exact kNN over the
  agent's rows, reached through the (agent_id, ...) btree. A filtered HNSW scan
  at 0.1 % selectivity would walk most of the graph to find a handful of rows.
- large agents: the HNSW index with pgvector's iterative scan, which keeps
  scanning until enough rows pass the agent filter.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from sqlalchemy import TextClause, text
from sqlalchemy.orm import Session

from memoryd.memory import keywords
from memoryd.memory.rows import select_list
from memoryd.memory.scoring import Candidate

SIZE_CACHE_SECONDS = 60.0
_CONTEXT_MAX_MESSAGES = 5_000


@lru_cache(maxsize=512)
def statement(sql: str) -> TextClause:
    """``text(sql)``, built once per distinct SQL string: building it parses the string
    for bind parameters, a cost recall would otherwise pay on each of its statements.
    The strings vary only with the filters used and the agent's size class."""
    return text(sql)


@dataclass(frozen=True)
class Filters:
    category: str | None = None
    tags: tuple[str, ...] = ()
    session_id: str | None = None
    include_archived: bool = False

    def sql(self) -> str:
        clauses = ["(m.expires_at IS NULL OR m.expires_at > now())"]
        if not self.include_archived:
            clauses.append("m.archived_at IS NULL")
        if self.category:
            clauses.append("m.category = :category")
        if self.tags:
            clauses.append("m.tags @> CAST(:tags AS text[])")
        if self.session_id:
            clauses.append("m.session_id = :session_id")
        return " AND ".join(clauses)

    def params(self) -> dict[str, Any]:
        return {"category": self.category, "tags": list(self.tags),
                "session_id": self.session_id}


@dataclass
class AgentSizeCache:
    """Per-process memo of "is this agent large?", so recall does not count every time."""

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
        count = int(session.execute(statement(
            "SELECT count(*) FROM (SELECT 1 FROM memories WHERE agent_id = :a LIMIT :n) s"),
            {"a": agent_id, "n": self.threshold + 1}).scalar_one())
        with self._lock:
            if len(self._seen) > 100_000:
                self._seen.clear()
            self._seen[agent_id] = (now, count)
        return count

    def is_large(self, session: Session, agent_id: str) -> bool:
        return self.size(session, agent_id) > self.threshold


@dataclass(frozen=True)
class KeywordHit:
    """A memory the keyword side found: its IDF score and its place in that list."""

    id: Any
    rank: float
    pos: int


def keyword_sql(agent_id: str, query: str, filters: Filters, per_retriever: int, *,
                keyword_index: bool, settings: dict[str, str] | None = None
                ) -> tuple[str, dict[str, Any]] | None:
    """The keyword query and its parameters, or None if the query has no words.
    ``keyword_index`` searches the GIN index instead of scanning the agent's rows.
    ``settings`` (``vector_settings``) are applied by the same statement, for the
    candidate query that follows."""
    words = keywords.query_words(query)
    if not words:
        return None
    where = filters.sql()
    ctes = keywords.large_cte(where) if keyword_index else keywords.small_cte(where)
    params = {"agent_id": agent_id, "k": per_retriever, "words": words, **filters.params()}
    sql = f"WITH {ctes} SELECT id, rank, pos FROM kw"
    if settings:
        # An uncorrelated condition: evaluated once, before the first row, even when
        # the keyword side finds nothing.
        expression, setting_params = _settings_sql(settings)
        sql += f" WHERE (SELECT {expression}) IS NOT NULL"
        params.update(setting_params)
    return sql, params


def keyword_candidates(session: Session, agent_id: str, query: str, filters: Filters,
                       per_retriever: int, *, keyword_index: bool,
                       settings: dict[str, str] | None = None) -> list[KeywordHit]:
    """Up to ``per_retriever`` memories by keyword score, best first. It needs no query
    embedding, so recall runs it while the embedding is computed. ``settings`` are
    applied for the rest of the transaction, whether or not the query has words.

    The index search (``keywords.large_cte``) runs with a generic plan. Left to choose,
    PostgreSQL planned it afresh at every execution (its generic plan's estimate looked
    dearer), and planning a statement of this size cost about 1 ms of the 4.4 ms it took
    for the 100,000-memory agent of bench/recall.py (3.3 ms with the generic plan, same
    results). Its plan does not depend on the agent: every search goes through the
    (agent, lexeme) GIN index or a primary key. The agent-scan side (``small_cte``) keeps
    custom plans: a generic plan of it could scan the whole table. The setting is reset
    for the statements that follow (``settings`` may set it again).
    """
    after = {"plan_cache_mode": "auto", **(settings or {})} if keyword_index else settings
    built = keyword_sql(agent_id, query, filters, per_retriever, keyword_index=keyword_index,
                        settings=after)
    if built is None:
        apply_settings(session, settings or {})
        return []
    if keyword_index:
        apply_settings(session, {"plan_cache_mode": "force_generic_plan"})
    rows = session.execute(statement(built[0]), built[1]).all()
    return [KeywordHit(id=r.id, rank=float(r.rank), pos=int(r.pos)) for r in rows]


def candidate_sql(agent_id: str, query_vector: str, keyword_hits: list[KeywordHit],
                  filters: Filters, per_retriever: int, *,
                  large_agent: bool) -> tuple[str, dict[str, Any]]:
    """The candidate query and its parameters (``candidates`` runs it; benchmarks EXPLAIN
    it): the vector side's rows, then the keyword side's hits it did not find (their
    rows looked up by id). The vector side's rows come straight from its scan, not
    looked up again (0.4 ms of 3.7 for the 100,000-memory agent of bench/recall.py).
    For large agents the caller applies ``vector_settings`` first
    (``keyword_candidates`` does)."""
    where = filters.sql()
    vec = _large_vector_cte(where) if large_agent else _small_vector_cte(where)
    sql = f"""
        WITH {vec},
        kw AS (
            SELECT * FROM unnest(CAST(:kw_ids AS uuid[]), CAST(:kw_ranks AS float8[]),
                                 CAST(:kw_pos AS bigint[])) AS k(id, rank, pos))
        SELECT {select_list("v")}, 1 - v.dist AS semantic, coalesce(kw.rank, 0) AS keyword_raw,
               v.pos AS vector_rank, kw.pos AS keyword_rank
        FROM vec v LEFT JOIN kw ON kw.id = v.id
        UNION ALL
        SELECT {select_list()}, 1 - (m.embedding <=> CAST(:qv AS vector)), kw.rank, NULL, kw.pos
        FROM kw JOIN memories m ON m.id = kw.id AND m.agent_id = :agent_id
        WHERE kw.id NOT IN (SELECT id FROM vec)
    """
    params = {"agent_id": agent_id, "qv": query_vector, "k": per_retriever,
              "kw_ids": [h.id for h in keyword_hits], "kw_ranks": [h.rank for h in keyword_hits],
              "kw_pos": [h.pos for h in keyword_hits], **filters.params()}
    return sql, params


def _large_vector_cte(where: str) -> str:
    """The agent's nearest memories through the HNSW index (iterative scan)."""
    return f"""vec AS MATERIALIZED (
            SELECT v.*, row_number() OVER () AS pos
            FROM (SELECT {select_list()}, m.embedding <=> CAST(:qv AS vector) AS dist
                  FROM memories m WHERE m.agent_id = :agent_id AND {where}
                  ORDER BY m.embedding <=> CAST(:qv AS vector) LIMIT :k) v)"""


def _small_vector_cte(where: str) -> str:
    """Exact kNN over the agent's rows, reached through the agent_id btree."""
    return f"""vec AS MATERIALIZED (
            SELECT v.*, row_number() OVER (ORDER BY v.dist, v.id) AS pos
            FROM (SELECT {select_list()}, m.embedding <=> CAST(:qv AS vector) AS dist
                  FROM memories m WHERE m.agent_id = :agent_id AND {where}
                  ORDER BY dist, m.id LIMIT :k) v)"""


def vector_settings(*, large_agent: bool, ef_search: int) -> dict[str, str]:
    """Transaction-local settings the candidate query needs: none for small agents.

    For large agents:
    - ``plan_cache_mode = force_custom_plan``. psycopg prepares a statement after five
      executions, and after five more PostgreSQL may switch a prepared statement to a
      generic plan, planned without the agent id. For the candidate query that plan is
      5-15x slower (measured at a million memories: 90-380 ms instead of 13-40 ms for a
      100,000-memory agent), and it cannot use the agent's own HNSW index
      (``maintenance.agent_indexes``); planning afresh costs about 1 ms. (The keyword
      query is the other way round: see ``keyword_candidates``.)
    - pgvector's ``ef_search`` (capped at 1000; the iterative scan goes on past it if
      needed) and the iterative scan itself.

    The keyword query applies them on its way (``keyword_sql``), saving a round trip;
    ``apply_settings`` does when there is no keyword query.
    """
    if not large_agent:
        return {}
    return {"plan_cache_mode": "force_custom_plan",
            "hnsw.ef_search": str(min(int(ef_search), 1000)),
            "hnsw.iterative_scan": "relaxed_order"}


def _settings_sql(settings: dict[str, str]) -> tuple[str, dict[str, str]]:
    """One expression setting every one of ``settings`` for the transaction, and its
    parameters."""
    calls = ", ".join(f"set_config(:cfg_n{i}, :cfg_v{i}, true)" for i in range(len(settings)))
    params = {}
    for i, (name, value) in enumerate(settings.items()):
        params[f"cfg_n{i}"], params[f"cfg_v{i}"] = name, value
    return f"concat({calls})", params


def apply_settings(session: Session, settings: dict[str, str]) -> None:
    """``settings`` (from ``vector_settings``) for the rest of the transaction."""
    if settings:
        expression, params = _settings_sql(settings)
        session.execute(statement(f"SELECT {expression}"), params)


def candidates(session: Session, agent_id: str, query_vector: str,
               keyword_hits: list[KeywordHit], filters: Filters, per_retriever: int, *,
               large_agent: bool) -> list[Candidate]:
    """Up to ``per_retriever`` candidates from the vector side, merged with the keyword
    side's hits, with raw components. Apply ``vector_settings`` first
    (``keyword_candidates`` does)."""
    sql, params = candidate_sql(agent_id, query_vector, keyword_hits, filters, per_retriever,
                                large_agent=large_agent)
    rows = session.execute(statement(sql), params).mappings().all()
    return [
        Candidate(row=row, semantic=float(row["semantic"]),
                  keyword_raw=float(row["keyword_raw"]),
                  vector_rank=row["vector_rank"], keyword_rank=row["keyword_rank"])
        for row in rows
    ]


def session_neighbours(session: Session, agent_id: str,
                       found: list[Candidate]) -> dict[Any, list[Any]]:
    """For each candidate, the candidates next to it in its session's message list.

    A conversation's answer often shares no words with the question it answers (the
    question turn does): adjacency lets the turn that matched lend part of its score to
    its neighbours (``scoring.with_context``). Only sessions holding two or more
    candidates are read, and only up to ``_CONTEXT_MAX_MESSAGES`` messages long (longer
    ones are skipped rather than unnested on every recall).
    """
    by_session: dict[str, list[str]] = {}
    for c in found:
        if c.row["session_id"]:
            by_session.setdefault(str(c.row["session_id"]), []).append(str(c.row["id"]))
    shared = {sid: ids for sid, ids in by_session.items() if len(ids) > 1}
    if not shared:
        return {}
    rows = session.execute(statement("""
        SELECT s.session_id, e.msg ->> 'id' AS id, e.pos
        FROM sessions s
        CROSS JOIN LATERAL jsonb_array_elements(s.messages) WITH ORDINALITY AS e(msg, pos)
        WHERE s.agent_id = :agent_id AND s.session_id = ANY(:sids)
          AND s.message_count <= :cap AND e.msg ->> 'id' = ANY(:ids)
    """), {"agent_id": agent_id, "sids": list(shared), "cap": _CONTEXT_MAX_MESSAGES,
           "ids": [i for ids in shared.values() for i in ids]}).all()
    at = {(r.session_id, int(r.pos)): r.id for r in rows}
    ids = {str(c.row["id"]): c.row["id"] for c in found}
    neighbours: dict[Any, list[Any]] = {}
    for (sid, pos), mid in at.items():
        near = [at[(sid, p)] for p in (pos - 1, pos + 1) if (sid, p) in at]
        if near and mid in ids:
            neighbours[ids[mid]] = [ids[n] for n in near if n in ids]
    return neighbours


def touch(session: Session, agent_id: str, ids: list[Any]) -> None:
    """Count an access for each returned memory.

    The same statement sets ``synchronous_commit = off`` for the rest of the transaction
    (an uncorrelated subquery, evaluated once): the access bump is recall's only write,
    and waiting for its WAL flush at commit (milliseconds on an ordinary disk) bought
    nothing worth the latency. A crash can lose the last fraction of a second of access
    counts, never a memory. Setting it here rather than up front saves a round trip.
    """
    if ids:
        session.execute(statement("""
            UPDATE memories SET access_count = access_count + 1, last_accessed_at = now()
            WHERE agent_id = :agent_id AND id = ANY(:ids)
              AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL
        """), {"agent_id": agent_id, "ids": ids})
