"""Hybrid recall: candidates from the HNSW vector index and the (agent, tsvector)
GIN index (see ``keywords``), scored in Python (see ``scoring``).

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
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd.memory import keywords
from memoryd.memory.rows import select_list
from memoryd.memory.scoring import Candidate

SIZE_CACHE_SECONDS = 60.0
_CONTEXT_MAX_MESSAGES = 5_000


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
        count = int(session.execute(text(
            "SELECT count(*) FROM (SELECT 1 FROM memories WHERE agent_id = :a LIMIT :n) s"),
            {"a": agent_id, "n": self.threshold + 1}).scalar_one())
        with self._lock:
            if len(self._seen) > 100_000:
                self._seen.clear()
            self._seen[agent_id] = (now, count)
        return count

    def is_large(self, session: Session, agent_id: str) -> bool:
        return self.size(session, agent_id) > self.threshold


def candidate_sql(agent_id: str, query_vector: str, query: str, filters: Filters,
                  per_retriever: int, *, large_agent: bool,
                  keyword_index: bool | None = None) -> tuple[str, dict[str, Any]]:
    """The candidate query and its parameters (``candidates`` runs it; benchmarks EXPLAIN
    it). For large agents the caller sets ``hnsw.*`` first (``vector_settings``)."""
    words = keywords.query_words(query)
    if not words:
        keyword_cte = keywords.NO_KEYWORDS
    elif large_agent or keyword_index:  # the row scan needs the small vector side's rows
        keyword_cte = keywords.large_cte(filters.sql())
    else:
        keyword_cte = keywords.small_cte()
    sql = f"""
        WITH {_large_vector_cte(filters.sql()) if large_agent else _small_vector_cte(filters.sql())}
        {keyword_cte}
        SELECT {select_list()}, 1 - (m.embedding <=> CAST(:qv AS vector)) AS semantic,
               coalesce(kw.rank, 0) AS keyword_raw, vec.pos AS vector_rank, kw.pos AS keyword_rank
        FROM (SELECT id FROM vec UNION SELECT id FROM kw) c
        JOIN memories m ON m.id = c.id AND m.agent_id = :agent_id
        LEFT JOIN vec ON vec.id = c.id
        LEFT JOIN kw ON kw.id = c.id
    """
    params = {"agent_id": agent_id, "qv": query_vector, "k": per_retriever, "words": words,
              **filters.params()}
    return sql, params


def _large_vector_cte(where: str) -> str:
    """The agent's nearest memories through the HNSW index (iterative scan)."""
    return f"""vec AS (
            SELECT m.id, row_number() OVER () AS pos
            FROM (SELECT m.id FROM memories m
                  WHERE m.agent_id = :agent_id AND {where}
                  ORDER BY m.embedding <=> CAST(:qv AS vector) LIMIT :k) m)"""


def _small_vector_cte(where: str) -> str:
    """Exact kNN over the agent's rows. ``mine`` reads them once (through the agent_id
    btree) for both sides: distance, lexemes and whether the filters pass."""
    return f"""mine AS MATERIALIZED (
            SELECT m.id, m.tsv, m.embedding <=> CAST(:qv AS vector) AS dist, ({where}) AS ok
            FROM memories m WHERE m.agent_id = :agent_id),
        vec AS (
            SELECT id, row_number() OVER (ORDER BY dist, id) AS pos
            FROM (SELECT id, dist FROM mine WHERE ok ORDER BY dist, id LIMIT :k) m)"""


def vector_settings(session: Session, *, large_agent: bool, ef_search: int,
                    custom_plan: bool = False) -> None:
    """Transaction-local settings for the candidate query, in one round trip; none (and
    no round trip) for small agents.

    - large agents and ``custom_plan``: ``plan_cache_mode = force_custom_plan``. psycopg
      prepares a statement after five executions, and after five more PostgreSQL may
      switch a prepared statement to a generic plan, planned without the agent id or the
      query's terms. For the candidate query that plan is 5-15x slower (measured at a
      million memories: 90-380 ms instead of 13-40 ms for a 100,000-memory agent);
      planning it afresh costs about 1 ms. Small agents keep the generic plan: it has
      their custom plan's shape and saves that 1 ms.
    - large agents: pgvector's ``ef_search`` (capped at 1000; the iterative scan goes on
      past it if needed) and the iterative scan itself.
    """
    settings = {}
    if large_agent or custom_plan:
        settings["plan_cache_mode"] = "force_custom_plan"
    if large_agent:
        settings["hnsw.ef_search"] = str(min(int(ef_search), 1000))
        settings["hnsw.iterative_scan"] = "relaxed_order"
    if not settings:
        return
    calls = ", ".join(f"set_config(:n{i}, :v{i}, true)" for i in range(len(settings)))
    params = {}
    for i, (name, value) in enumerate(settings.items()):
        params[f"n{i}"], params[f"v{i}"] = name, value
    session.execute(text(f"SELECT {calls}"), params)


def candidates(session: Session, agent_id: str, query_vector: str, query: str,
               filters: Filters, per_retriever: int, *, large_agent: bool,
               ef_search: int, keyword_index: bool | None = None) -> list[Candidate]:
    """Up to ``per_retriever`` candidates from each index, merged, with raw components.
    ``keyword_index`` takes the keyword side from the GIN index instead of scanning the
    agent's rows (always so for large agents)."""
    vector_settings(session, large_agent=large_agent, ef_search=ef_search,
                    custom_plan=bool(keyword_index))
    sql, params = candidate_sql(agent_id, query_vector, query, filters, per_retriever,
                                large_agent=large_agent, keyword_index=keyword_index)
    rows = session.execute(text(sql), params).mappings().all()
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
    rows = session.execute(text("""
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
        session.execute(text("""
            UPDATE memories SET access_count = access_count + 1, last_accessed_at = now()
            WHERE agent_id = :agent_id AND id = ANY(:ids)
              AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL
        """), {"agent_id": agent_id, "ids": ids})
