"""The SQL of recall's statements: filters, the keyword and candidate queries, and the
transaction settings they run under. ``recall`` decides which of them a recall runs.

The texts vary only with the filters used and the agent's size class, so each is built
once (``lru_cache``) and parsed once (``statement``); the parameters carry the rest.
No caller value is ever written into them: the one literal, the HNSW search's agent, is
quoted into the driver's text after parsing (``Sql.literals``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any, Literal

from sqlalchemy import TextClause, text
from sqlalchemy.orm import Session

from memoryd.db.pipeline import Pipe, Sent, driver_text
from memoryd.memory import keywords
from memoryd.memory.rows import RANKED_COLUMNS, column_list

VectorSearch = Literal["exact", "hnsw"]
KeywordSearch = Literal["scan", "index"]

# The index keyword search (``keywords.large_cte``) runs with a generic plan: left to
# choose, PostgreSQL planned it afresh at every execution (its generic plan's estimate
# looked dearer), and planning a statement of this size is a noticeable part of recall.
# Its plan does not depend on the agent (every search goes through the (agent, lexeme)
# GIN index or a primary key). The agent scan (``keywords.small_cte``) keeps custom
# plans: a generic plan of it could scan the whole table. The statements after the
# index search plan as usual again (``KEYWORD_PLAN_CACHE_AFTER``), or as the vector
# query's settings say.
KEYWORD_PLAN_CACHE: Mapping[str, str] = {"plan_cache_mode": "force_generic_plan"}
KEYWORD_PLAN_CACHE_AFTER: Mapping[str, str] = {"plan_cache_mode": "auto"}
EF_SEARCH_MAX = 1000  # pgvector's cap; the iterative scan goes on past it if needed


@lru_cache(maxsize=512)
def statement(sql: str) -> TextClause:
    """``text(sql)``, built once per distinct SQL string: building it parses the string
    for bind parameters, a cost recall would otherwise pay on each of its statements."""
    return text(sql)


@dataclass(frozen=True)
class Sql:
    """One statement and its parameters, and the values it names as literals: each
    mark of ``literals`` in the text stands for its value, quoted into the driver's text
    only after SQLAlchemy parsed it (``memoryd.db.pipeline.driver_text``)."""

    text: str
    params: Mapping[str, Any]
    literals: Mapping[str, str] = field(default_factory=dict)

    def run(self, session: Session, *, prefix: str = "") -> Any:
        """Execute it, ``prefix`` (``EXPLAIN ...``) written before it; the SQLAlchemy
        result. Its text is parsed once (``statement``) unless it names literals."""
        if not self.literals:
            return session.execute(statement(prefix + self.text), self.params)
        connection = session.connection()
        return connection.exec_driver_sql(
            driver_text(connection, prefix + self.text, self.literals), dict(self.params))

    def send(self, pipe: Pipe) -> Sent:
        """Send it ahead of its result (``memoryd.db.pipeline``)."""
        return pipe.send(self.text, self.params, self.literals)


@dataclass(frozen=True)
class Filters:
    category: str | None = None
    tags: tuple[str, ...] = ()
    session_id: str | None = None
    include_archived: bool = False
    since: datetime | None = None  # created_at >= since
    until: datetime | None = None  # created_at < until
    metadata: str | None = None  # a JSON object the memory's metadata must contain
    include_superseded: bool = False  # replaced memories too (marked by their valid_to)
    as_of: datetime | None = None  # what was true then: valid_from <= as_of < valid_to

    @property
    def narrowing(self) -> bool:
        """Whether an indexed filter that can leave few of a large agent's rows is set
        (time: the agent's created_at btree; metadata: its GIN): the plan then counts
        them, and searches a few exactly instead of walking the HNSW graph for them."""
        return bool(self.since or self.until or self.metadata)

    def sql(self) -> str:
        """Recall's WHERE clauses: live memories passing the chosen filters."""
        clauses = ["(m.expires_at IS NULL OR m.expires_at > now())"]
        if not self.include_archived:
            clauses.append("m.archived_at IS NULL")
        return " AND ".join([*clauses, *self.listed()])

    def listed(self) -> list[str]:
        """What ``list`` applies: validity and the filters a caller chose."""
        return [*self.validity(), *self.chosen()]

    def validity(self) -> list[str]:
        """Current memories only, unless superseded ones are asked for, or a point in
        time (then those true at that time)."""
        if self.as_of is not None:
            return ["coalesce(m.valid_from, m.created_at) <= :as_of",
                    "(m.valid_to IS NULL OR m.valid_to > :as_of)"]
        return [] if self.include_superseded else ["m.valid_to IS NULL"]

    def chosen(self) -> list[str]:
        """The clauses of the filters a caller chose: what can leave few rows, whose
        values the plan depends on."""
        clauses = []
        if self.category:
            clauses.append("m.category = :category")
        if self.tags:
            clauses.append("m.tags @> CAST(:tags AS text[])")
        if self.session_id:
            clauses.append("m.session_id = :session_id")
        if self.since:
            clauses.append("m.created_at >= :since")
        if self.until:
            clauses.append("m.created_at < :until")
        if self.metadata:
            clauses.append("m.metadata @> CAST(:metadata AS jsonb)")
        return clauses

    def params(self) -> dict[str, Any]:
        return {"category": self.category, "tags": list(self.tags),
                "session_id": self.session_id, "since": self.since, "until": self.until,
                "metadata": self.metadata, "as_of": self.as_of}


@dataclass(frozen=True)
class KeywordHit:
    """A memory the keyword side found: its IDF score and its place in that list."""

    id: Any
    rank: float
    pos: int


# --- transaction settings ------------------------------------------------------------
def vector_settings(search: VectorSearch, *, ef_search: int,
                    generic: bool = True) -> dict[str, str]:
    """Transaction-local settings the candidate query needs.

    ``generic``: ``plan_cache_mode = force_generic_plan``. Once psycopg prepares the
    candidate query (after five executions on a connection) it is planned once, not at
    every recall: planning this statement cost more than running its vector search.
    A generic plan must not depend on the agent's size, which the planner no longer
    sees:
    - the exact search computes its distances behind a fence (``_exact_vector_cte``)
      and runs with ``enable_seqscan = off``, so its only plans read the agent's rows
      through an (agent_id, ...) index, whatever the statistics say of the agents'
      sizes (in a store of a few agents the planner would otherwise scan the table, or
      take the shared HNSW index and lose rows to its filter);
    - the HNSW search names the agent as a literal (``_hnsw_vector_cte``), so a generic
      plan still picks the agent's own partial index (``maintenance.index_agents``).
    Without ``generic`` (filtered recalls: how many rows the filters' values leave can
    decide between an index on them and the vector index), the exact search needs no
    setting and the HNSW search is planned afresh each time (``force_custom_plan``).

    For the HNSW search also pgvector's ``ef_search`` (capped at ``EF_SEARCH_MAX``) and
    the iterative scan, which keeps scanning until enough rows pass the filters.
    """
    if search == "exact":
        return {"plan_cache_mode": "force_generic_plan", "enable_seqscan": "off"} if generic else {}
    return {"plan_cache_mode": "force_generic_plan" if generic else "force_custom_plan",
            "hnsw.ef_search": str(min(int(ef_search), EF_SEARCH_MAX)),
            "hnsw.iterative_scan": "relaxed_order"}


@lru_cache(maxsize=8)
def _set_config(count: int) -> str:
    """One expression setting ``count`` settings for the transaction."""
    return f"concat({', '.join(f'set_config(:cfg_n{i}, :cfg_v{i}, true)' for i in range(count))})"


def _settings_params(settings: Mapping[str, str]) -> dict[str, str]:
    params = {}
    for i, (name, value) in enumerate(settings.items()):
        params[f"cfg_n{i}"], params[f"cfg_v{i}"] = name, value
    return params


def settings_statement(settings: Mapping[str, str]) -> Sql | None:
    """A statement of its own applying ``settings`` for the rest of the transaction
    (None if there are none)."""
    if not settings:
        return None
    return Sql(f"SELECT {_set_config(len(settings))}", _settings_params(settings))


# --- the keyword query -----------------------------------------------------------------
def keyword_statement(agent_id: str, words: str, filters: Filters, per_retriever: int, *,
                      search: KeywordSearch, settings_after: Mapping[str, str]) -> Sql:
    """The keyword query (``words``: ``keywords.query_words``, not empty). Its
    trailing condition also applies ``settings_after`` for the rest of the transaction:
    an uncorrelated condition, evaluated once, before the first row, even when the
    keyword side finds nothing; it saves the candidate query's settings a round trip."""
    params = {"agent_id": agent_id, "k": per_retriever, "words": words, **filters.params(),
              **_settings_params(settings_after)}
    return Sql(_keyword_text(filters.sql(), search, len(settings_after)), params)


@lru_cache(maxsize=64)
def _keyword_text(where: str, search: KeywordSearch, settings_count: int) -> str:
    ctes = keywords.large_cte(where) if search == "index" else keywords.small_cte(where)
    sql = f"WITH {ctes} SELECT id, rank, pos FROM kw"
    if settings_count:
        sql += f" WHERE (SELECT {_set_config(settings_count)}) IS NOT NULL"
    return compact(sql)


def compact(sql: str) -> str:
    """``sql`` with each run of whitespace made one space (the texts here hold no quoted
    runs of spaces and no ``--`` comments). psycopg converts a statement's parameters once
    per distinct text only up to 4,096 bytes; the indentation took the large agents'
    keyword statement past that, and its conversion then ran at every recall."""
    return " ".join(sql.split())


# --- the candidate query -----------------------------------------------------------
def candidate_statement(agent_id: str, query_vector: str, hits: list[KeywordHit],
                        filters: Filters, per_retriever: int, *,
                        search: VectorSearch, model: str | None = None,
                        sessions: Sessions | None = None) -> Sql:
    """The vector side's rows, then the keyword side's ``hits`` it did not find (their
    rows looked up by id), each with the columns ranking reads (``RANKED_COLUMNS``).
    The vector side's rows come straight from its scan, not looked up again. Needs
    ``vector_settings`` applied first. With ``model``, only memories embedded by that
    model (``query_vector`` is that model's), both sides.

    With ``sessions``, the same statement also reads the candidates' places in their
    sessions' message lists (``session_pos``, for the context score) and brings in the
    session neighbours of the seeds (``Sessions.seeds``), the second round, so neither
    costs a round trip of its own. Both come from the sessions' ``message_ids`` (the
    list's ids as an array, kept by a trigger), not from parsing the list itself."""
    params = {"agent_id": agent_id, "qv": query_vector, "k": per_retriever,
              "kw_ids": [h.id for h in hits], "kw_ranks": [h.rank for h in hits],
              "kw_pos": [h.pos for h in hits], "embedding_model": model, **filters.params()}
    if sessions is not None:
        params |= {"seeds": sessions.seeds, "reach": sessions.reach,
                   "cap": sessions.max_messages}
    sql = _candidate_text(filters.sql(), search, model is not None, sessions is not None)
    literals = {AGENT_LITERAL: agent_id} if search == "hnsw" else {}
    return Sql(sql, params, literals)


@dataclass(frozen=True)
class Sessions:
    """What the candidate query reads of the candidates' sessions: their places in the
    message lists, and the messages within ``reach`` places of each candidate the vector
    or the keyword side ranked within the first ``seeds`` (0: none). Sessions longer than
    ``max_messages`` are skipped rather than unnested on every recall."""

    seeds: int
    reach: int
    max_messages: int


# A message id is checked for a uuid's shape before the cast: session lists are repaired
# by maintenance, and a damaged entry must not fail a recall.
_UUID_SHAPE = "'^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'"


@lru_cache(maxsize=64)
def _candidate_text(where: str, search: VectorSearch, one_model: bool = False,
                    sessions: bool = False) -> str:
    return compact(_candidate_sql(where, search, one_model, sessions))


def _candidate_sql(where: str, search: VectorSearch, one_model: bool,
                   sessions: bool) -> str:
    same_model = "m.embedding_model = :embedding_model"
    if one_model:
        where = f"{where} AND {same_model}"
    vec = _hnsw_vector_cte(where) if search == "hnsw" else _exact_vector_cte(where)
    first = f"""
        SELECT {_ranked("v")}, 1 - v.dist AS semantic, coalesce(kw.rank, 0) AS keyword_raw,
               v.pos AS vector_rank, kw.pos AS keyword_rank
        FROM vec v LEFT JOIN kw ON kw.id = v.id
        UNION ALL
        SELECT {_ranked()}, 1 - (m.embedding <=> CAST(:qv AS vector)), kw.rank, NULL, kw.pos
        FROM kw JOIN memories m ON m.id = kw.id AND m.agent_id = :agent_id
        WHERE kw.id NOT IN (SELECT id FROM vec){f" AND {same_model}" if one_model else ""}"""
    ctes = f"""{vec},
        kw AS (
            SELECT * FROM unnest(CAST(:kw_ids AS uuid[]), CAST(:kw_ranks AS float8[]),
                                 CAST(:kw_pos AS bigint[])) AS k(id, rank, pos))"""
    if not sessions:
        return f"WITH {ctes} {first}"
    return f"""
        WITH {ctes},
        cand AS MATERIALIZED ({first}),
        seeds AS (
            SELECT CAST(id AS text) AS id FROM cand
            WHERE session_id IS NOT NULL AND (vector_rank <= :seeds OR keyword_rank <= :seeds)),
        msgs AS MATERIALIZED (
            SELECT s.session_id, e.pos, e.id,
                   CASE WHEN e.id IN (SELECT id FROM seeds) THEN ARRAY(
                       SELECT s.message_ids[CAST(e.pos + d AS int)]
                       FROM generate_series(-CAST(:reach AS int), CAST(:reach AS int)) AS d
                       ORDER BY d) END AS near
            FROM sessions s
            CROSS JOIN LATERAL unnest(s.message_ids) WITH ORDINALITY AS e(id, pos)
            WHERE s.agent_id = :agent_id AND cardinality(s.message_ids) <= :cap
              AND s.session_id IN (
                  SELECT session_id FROM cand WHERE session_id IS NOT NULL
                  GROUP BY session_id
                  HAVING count(*) > 1 OR bool_or(CAST(id AS text) IN (SELECT id FROM seeds)))
              AND e.id IN (SELECT CAST(id AS text) FROM cand)),
        near AS (
            SELECT DISTINCT ON (n.id) CAST(n.id AS uuid) AS id,
                   msgs.pos + n.i - 1 - CAST(:reach AS int) AS pos
            FROM msgs CROSS JOIN LATERAL unnest(msgs.near) WITH ORDINALITY AS n(id, i)
            WHERE n.id ~ {_UUID_SHAPE} AND n.id NOT IN (SELECT CAST(id AS text) FROM cand)
            ORDER BY n.id)
        SELECT cand.*, msgs.pos AS session_pos
        FROM cand LEFT JOIN msgs ON msgs.id = CAST(cand.id AS text)
                                AND msgs.session_id = cand.session_id
        UNION ALL
        SELECT {_ranked()}, 1 - (m.embedding <=> CAST(:qv AS vector)), 0, NULL, NULL, near.pos
        FROM near JOIN memories m ON m.id = near.id
        WHERE m.agent_id = :agent_id AND {where}
    """


def _ranked(alias: str = "m") -> str:
    return column_list(RANKED_COLUMNS, alias)


# Where the HNSW search names its agent: the mark of the agent id's literal
# (``Sql.literals``), never the id itself, in the text SQLAlchemy parses.
AGENT_LITERAL = "__memoryd_agent_literal__"


def _hnsw_vector_cte(where: str) -> str:
    """The agent's nearest memories through the HNSW index (iterative scan). The agent
    is a literal: a generic plan then still matches the agent's own partial index."""
    return f"""vec AS MATERIALIZED (
            SELECT v.*, row_number() OVER () AS pos
            FROM (SELECT {_ranked()}, m.embedding <=> CAST(:qv AS vector) AS dist
                  FROM memories m WHERE m.agent_id = {AGENT_LITERAL} AND {where}
                  ORDER BY m.embedding <=> CAST(:qv AS vector) LIMIT :k) v)"""


def _exact_vector_cte(where: str) -> str:
    """Exact kNN over the agent's rows, reached through an (agent_id, ...) index. The
    distances are computed behind a fence (``OFFSET 0``), so no plan, generic ones
    included, can order the rows by the HNSW index and filter them afterwards. Only the
    id and the distance are carried through the sort; the ranked columns are read for
    the ``:k`` nearest alone (by primary key): projected for every row of a
    10,000-memory agent, they cost more than the distances themselves."""
    return f"""vec AS MATERIALIZED (
            SELECT {_ranked()}, t.dist, t.pos
            FROM (SELECT a.id, a.dist, row_number() OVER (ORDER BY a.dist, a.id) AS pos
                  FROM (SELECT * FROM (
                            SELECT m.id, m.embedding <=> CAST(:qv AS vector) AS dist
                            FROM memories m WHERE m.agent_id = :agent_id AND {where}
                            OFFSET 0) a
                        ORDER BY a.dist, a.id LIMIT :k) a) t
            JOIN memories m ON m.id = t.id AND m.agent_id = :agent_id)"""
