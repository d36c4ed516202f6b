"""Hybrid recall: candidates from the HNSW vector index and the (agent, tsvector)
GIN index, scored in Python (see ``scoring``).

Two plans for the vector side, by the agent's size:
- small agents (<= ``recall_exact_threshold`` memories): exact kNN over the
  agent's rows, reached through the (agent_id, ...) btree. A filtered HNSW scan
  at 0.1 % selectivity would walk most of the graph to find a handful of rows.
- large agents: the HNSW index with pgvector's iterative scan, which keeps
  scanning until enough rows pass the agent filter.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd.memory.rows import select_list
from memoryd.memory.scoring import Candidate

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_MAX_TERMS = 32
_MAX_PAIR_TERMS = 6  # pairs among the 6 rarest terms: 15 at most
_STRICT_FACTOR = 10
_MIN_POOL = 500
_CONTEXT_MAX_MESSAGES = 5_000
_DF_SAMPLE = 1000  # memories sampled for a large agent's term frequencies
_RARE_IN_SAMPLE = 2
KEYWORD_SCAN_MAX = 2_000  # above this many memories, the keyword side uses the GIN index
SIZE_CACHE_SECONDS = 60.0
_NO_KEYWORDS = (", kw AS (SELECT NULL::uuid AS id, 0.0::real AS rank, 0::bigint AS pos"
                " WHERE false)")


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
    words = query_words(query)
    # "+ 0" keeps the planner off the HNSW index for small agents (exact kNN instead).
    if not words:
        keyword_cte = _NO_KEYWORDS
    elif large_agent or keyword_index:  # the row scan needs the small vector side's rows
        keyword_cte = _large_keyword_cte(filters.sql())
    else:
        keyword_cte = _small_keyword_cte()
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


def query_words(query: str) -> str:
    """The query's distinct words (no query syntax can leak through), space-separated;
    PostgreSQL stems them and drops the stop words."""
    words = dict.fromkeys(w.lower() for w in _WORD.findall(query) if len(w) > 1)
    return " ".join(list(words)[:_MAX_TERMS])


def _idf(df: str, n: str) -> str:
    """A term's weight: BM25's inverse document frequency, never negative."""
    return f"ln(1 + ({n} - {df} + 0.5) / ({df} + 0.5))"


def _small_keyword_cte() -> str:
    """The keyword side for small agents: every memory holding a query term, scored by
    the sum of the inverse document frequencies of the terms it holds.

    A term is the query word's English stem. It matches a memory holding the stem, or,
    if no memory of the agent holds the stem itself, a word starting with it (prefix
    matching: "photo" finds "photography"). Document frequencies are counted over the
    agent's own memories, so a speaker's name or a date word present in most of an
    agent's memories weighs little, and a rare word weighs a lot: ``ts_rank_cd`` over an
    OR of terms scored nearly every match alike (measured on LoCoMo, see bench/README.md).

    The agent's rows (``mine``, read once for both sides) are matched one by one, not
    through the GIN index: prefix terms are expanded over the whole table there, tens of
    ms at a million memories. The CTEs are MATERIALIZED so that the frequencies are
    counted once, not once per candidate row.
    """
    return f"""
        , terms AS MATERIALIZED (
            SELECT DISTINCT CAST(quote_literal(l) AS tsquery) AS ex,
                   CAST(quote_literal(l) || ':*' AS tsquery) AS px
            FROM unnest((tsvector_to_array(to_tsvector('english', :words)))[1:{_MAX_TERMS}])
                 AS l)
        , hits AS MATERIALIZED (
            SELECT r.id, t.ex, r.tsv @@ t.ex AS exact, r.ok
            FROM mine r JOIN terms t ON r.tsv @@ t.px)
        , idf AS MATERIALIZED (
            SELECT h.ex, bool_or(h.exact) AS any_exact,
                   {_idf("count(*) FILTER (WHERE h.exact)", "n.n")} AS w_exact,
                   {_idf("count(*)", "n.n")} AS w_prefix
            FROM hits h, (SELECT count(*) AS n FROM mine) n
            GROUP BY h.ex, n.n)
        , kw AS (
            SELECT s.id, s.rank, row_number() OVER (ORDER BY s.rank DESC, s.id) AS pos
            FROM (SELECT h.id,
                         sum(CASE WHEN h.exact THEN i.w_exact ELSE i.w_prefix END) AS rank
                  FROM hits h JOIN idf i ON i.ex = h.ex
                  WHERE h.ok AND (h.exact OR NOT i.any_exact)
                  GROUP BY h.id) s
            ORDER BY s.rank DESC, s.id LIMIT :k)
    """


def _large_keyword_cte(where: str) -> str:
    """The keyword side for large agents, bounded whatever the query.

    Scored like the small-agent side (the sum of the inverse document frequencies of
    the query's stems a memory holds), with bounds, because every GIN search here walks
    the agent's own posting list (100,000 entries for a 100,000-memory agent, 1.5-3 ms):

    - document frequencies are estimated on a sample of ``_DF_SAMPLE`` of the agent's
      memories (the first ones its agent_id index yields), not counted over all of them;
    - one GIN search (exact stems; prefix terms are expanded over the whole table there)
      finds at most ``_STRICT_FACTOR`` x ``k`` (at least ``_MIN_POOL``) memories holding
      two or more of the ``_MAX_PAIR_TERMS`` rarest terms (an OR of pairs costs about a ms
      per pair here),
      or a rare one (at most ``_RARE_IN_SAMPLE`` hits in the sample): the memories that
      can score high;
    - a second search adds ``k`` memories holding the rarest of the other terms (a name,
      typically: they outscore memories holding one commoner term);
    - only if those find fewer than ``k``, a last search adds up to ``k`` memories
      holding any one term.

    Prefix-only matches are not looked for here.
    """
    return f"""
        , lex AS (
            SELECT (tsvector_to_array(to_tsvector('english', :words)))[1:{_MAX_TERMS}] AS l)
        , sample AS MATERIALIZED (
            SELECT m.tsv FROM memories m WHERE m.agent_id = :agent_id LIMIT {_DF_SAMPLE})
        , idf AS MATERIALIZED (
            SELECT t.a, t.ex, d.df, {_idf("d.df", "n.n")} AS w
            FROM (SELECT a, CAST(quote_literal(a) AS tsquery) AS ex
                  FROM lex, unnest(lex.l) AS a) t,
                 (SELECT count(*) AS n FROM sample) n,
                 LATERAL (SELECT count(*) AS df FROM sample s WHERE s.tsv @@ t.ex) d)
        , rarest AS (SELECT a FROM idf ORDER BY df, a LIMIT {_MAX_PAIR_TERMS})
        , wanted AS (
            SELECT CAST(string_agg(p, ' | ') AS tsquery) AS q,
                   (SELECT CAST(string_agg(quote_literal(a), ' | ') AS tsquery) FROM idf) AS any_q
            FROM (SELECT format('(%L & %L)', x.a, y.a) AS p
                  FROM rarest x, rarest y WHERE x.a < y.a
                  UNION ALL
                  SELECT quote_literal(a) FROM idf WHERE df <= {_RARE_IN_SAMPLE}) s)
        , kw_found AS MATERIALIZED (
            SELECT m.id, m.tsv FROM memories m, wanted
            WHERE m.agent_id = :agent_id AND m.tsv @@ wanted.q AND {where}
            LIMIT greatest({_STRICT_FACTOR} * :k, {_MIN_POOL}))
        , kw_rarest AS MATERIALIZED (
            SELECT m.id, m.tsv FROM memories m,
                   (SELECT ex FROM idf WHERE df > {_RARE_IN_SAMPLE}
                    ORDER BY df, a LIMIT 1) r
            WHERE m.agent_id = :agent_id AND m.tsv @@ r.ex AND {where}
              AND m.id NOT IN (SELECT id FROM kw_found)
            LIMIT :k)
        , kw_fill AS (
            SELECT m.id, m.tsv FROM memories m, wanted
            WHERE (SELECT count(*) FROM kw_found) + (SELECT count(*) FROM kw_rarest) < :k
              AND m.agent_id = :agent_id AND m.tsv @@ wanted.any_q AND {where}
              AND m.id NOT IN (SELECT id FROM kw_found UNION ALL SELECT id FROM kw_rarest)
            LIMIT :k)
        , kw AS (
            SELECT s.id, s.rank, row_number() OVER (ORDER BY s.rank DESC, s.id) AS pos
            FROM (SELECT c.id, (SELECT sum(i.w) FROM idf i WHERE c.tsv @@ i.ex) AS rank
                  FROM (SELECT id, tsv FROM kw_found
                        UNION ALL SELECT id, tsv FROM kw_rarest
                        UNION ALL SELECT id, tsv FROM kw_fill) c) s
            ORDER BY s.rank DESC, s.id LIMIT :k)
    """


def vector_settings(session: Session, *, large_agent: bool, ef_search: int,
                    custom_plan: bool = False) -> None:
    """Transaction-local settings for recall, in one round trip.

    - ``synchronous_commit = off``: recall's only write is the access bump; waiting for
      its WAL flush (milliseconds on an ordinary disk) bought nothing worth the latency.
      A crash can lose the last fraction of a second of access counts, never a memory.
    - large agents and ``custom_plan``: ``plan_cache_mode = force_custom_plan``. psycopg
      prepares a statement after five
      executions, and after five more PostgreSQL may switch a prepared statement to a
      generic plan, planned without the agent id or the query's terms. For the candidate
      query that plan is 5-15x slower (measured at a million memories: 90-380 ms instead
      of 13-40 ms for a 100,000-memory agent); planning it afresh costs about 1 ms. Small
      agents keep the generic plan: it has their custom plan's shape and saves that 1 ms.
    - large agents: pgvector's ``ef_search`` (capped at 1000; the iterative scan goes on
      past it if needed) and the iterative scan itself.
    """
    settings = {"synchronous_commit": "off"}
    if large_agent or custom_plan:
        settings["plan_cache_mode"] = "force_custom_plan"
    if large_agent:
        settings["hnsw.ef_search"] = str(min(int(ef_search), 1000))
        settings["hnsw.iterative_scan"] = "relaxed_order"
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
    """Count an access for each returned memory."""
    if ids:
        session.execute(text("""
            UPDATE memories SET access_count = access_count + 1, last_accessed_at = now()
            WHERE agent_id = :agent_id AND id = ANY(:ids)
        """), {"agent_id": agent_id, "ids": ids})
