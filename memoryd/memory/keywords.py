"""The keyword side of recall: IDF-weighted matches of the query's English stems.

A memory's keyword score is the sum of the inverse document frequencies (BM25's
``ln(1 + (N - df + 0.5) / (df + 0.5))``) of the query stems it holds, N and df counted
over the agent's own memories. Two plans, by the agent's size (``KEYWORD_SCAN_MAX``):
scan the agent's rows (``small_cte``), or search the GIN index keyed by (agent, lexeme)
within bounds (``large_cte``). Each returns CTEs ending in ``kw (id, rank, pos)`` for
``recall_sql.keyword_statement``.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
MAX_TERMS = 32
_MAX_PAIR_TERMS = 6  # pairs among the 6 rarest terms: 15 at most
_STRICT_FACTOR = 10
_MIN_POOL = 500
_DF_SAMPLE = 1000  # memories sampled for a large agent's term frequencies, if not counted
# A term held by at most this share of the agent's memories (and at least by 2) is rare:
# searched alone. The ``index_agents`` job counts (in ``agent_terms``) only the others.
RARE_SHARE = 0.002
RARE_MIN = 2
KEYWORD_SCAN_MAX = 2_000  # above this many memories, the keyword side uses the GIN index
# The expression of ix_memories_agent_lexemes (migration 0006): the memory's lexemes,
# each prefixed with its agent's key, so one GIN posting list per (agent, lexeme).
AGENT_LEXEMES = "memoryd_agent_lexemes(m.agent_id, m.tsv)"
_KEY_PREFIX = "left(md5(:agent_id), 12)"
# The agent filter of those searches, as a recheck only: written as a plain equality,
# the planner ANDs the search with a scan of an agent_id index (every memory of the
# agent), which the key prefix makes useless.
SAME_AGENT = "(m.agent_id = :agent_id) IS TRUE"


def rare_cut(n: str) -> str:
    """SQL for the most memories, of ``n``, a rare term is held by."""
    return f"greatest({n} * {RARE_SHARE}, {RARE_MIN})"


def query_words(query: str) -> str:
    """The query's distinct words (no query syntax can leak through), space-separated;
    PostgreSQL stems them and drops the stop words."""
    words = dict.fromkeys(w.lower() for w in _WORD.findall(query) if len(w) > 1)
    return " ".join(list(words)[:MAX_TERMS])


def _idf(df: str, n: str) -> str:
    """A term's weight: BM25's inverse document frequency, never negative."""
    return f"ln(1 + ({n} - {df} + 0.5) / ({df} + 0.5))"


def small_cte(where: str) -> str:
    """The keyword side for small agents: every memory holding a query term, scored by
    the sum of the inverse document frequencies of the terms it holds.

    A term is the query word's English stem. It matches a memory holding the stem, or,
    if no memory of the agent holds the stem itself, a word starting with it (prefix
    matching: "photo" finds "photography"). Document frequencies are counted over the
    agent's own memories, so a speaker's name or a date word present in most of an
    agent's memories weighs little, and a rare word weighs a lot: ``ts_rank_cd`` over an
    OR of terms scored nearly every match alike (measured on LoCoMo, see bench/README.md).

    The agent's rows (``mine``, with whether each passes the filters ``where``) are
    matched one by one, not through the GIN index: for a small agent one pass over its
    rows counts the frequencies and finds the matches, prefix ones included, for less
    than the index searches would cost. The CTEs are MATERIALIZED so
    that the frequencies, and the agent's memory count (``total``), are counted once,
    not once per matching row: the planner, which expects one hit, would otherwise
    count the agent's rows again for each of them.
    """
    return f"""
        mine AS MATERIALIZED (
            SELECT m.id, m.tsv, ({where}) AS ok FROM memories m WHERE m.agent_id = :agent_id)
        , terms AS MATERIALIZED (
            SELECT DISTINCT CAST(quote_literal(l) AS tsquery) AS ex,
                   CAST(quote_literal(l) || ':*' AS tsquery) AS px
            FROM unnest((tsvector_to_array(to_tsvector('english', :words)))[1:{MAX_TERMS}])
                 AS l)
        , hits AS MATERIALIZED (
            SELECT r.id, t.ex, r.tsv @@ t.ex AS exact, r.ok
            FROM mine r JOIN terms t ON r.tsv @@ t.px)
        , total AS MATERIALIZED (SELECT count(*) AS n FROM mine)
        , idf AS MATERIALIZED (
            SELECT h.ex, bool_or(h.exact) AS any_exact,
                   {_idf("count(*) FILTER (WHERE h.exact)", "n.n")} AS w_exact,
                   {_idf("count(*)", "n.n")} AS w_prefix
            FROM hits h, total n
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


def large_cte(where: str) -> str:
    """The keyword side for large agents, bounded whatever the query.

    Scored like the small-agent side (the sum of the inverse document frequencies of
    the query's stems a memory holds), with bounds. The searches go through the GIN
    index keyed by (agent, lexeme) (``AGENT_LEXEMES``), so each reads only the entries
    of the agent's memories holding the words searched. In order: the terms and their
    weights (``_TERM_WEIGHTS``), the searches for the memories that can score high
    (``_SEARCHES``, ``_found``), then, only when those find fewer than ``k``, the rarest
    other term (``_rarest``) and a fill (``_fill``), and the scoring (``_SCORED``).
    Prefix-only matches are not looked for here.
    """
    return _ctes(*_TERM_WEIGHTS, *_SEARCHES, _found(where), _rarest(where), _fill(where),
                 _SCORED)


def _ctes(*pieces: str) -> str:
    """CTEs joined into one WITH list (the caller writes ``WITH``)."""
    return "\n        " + "\n        , ".join(pieces) + "\n    "


def _index_search(query: str, where: str) -> str:
    """The agent's memories passing ``where`` whose lexemes match the tsquery ``query``,
    through the (agent, lexeme) GIN index."""
    return f"{SAME_AGENT} AND {AGENT_LEXEMES} @@ {query} AND {where}"


def _score(alias: str) -> str:
    """A memory's keyword score: the weights of the query terms its ``tsv`` holds."""
    return f"(SELECT sum(i.w) FROM idf i WHERE {alias}.tsv @@ i.ex)"


# The query's stems, and the agent's memory count: counted by the ``index_agents`` job
# (``agent_term_stats``) or, for an agent it does not count, that of a sample of the
# agent's newest memories, read backwards along the (agent_id, created_at) index: the
# same plan whatever the agent's size, so recall can run this query with a generic plan
# (``recall_sql.KEYWORD_PLAN_CACHE``).
_LEX = f"""lex AS (
            SELECT (tsvector_to_array(to_tsvector('english', :words)))[1:{MAX_TERMS}] AS l)"""
_COUNTED = """counted AS MATERIALIZED (
            SELECT c.memories AS n FROM agent_term_stats c WHERE c.agent_id = :agent_id)"""
_SAMPLE = f"""sample AS MATERIALIZED (
            SELECT m.tsv FROM memories m
            WHERE m.agent_id = :agent_id AND NOT EXISTS (SELECT 1 FROM counted)
            ORDER BY m.created_at DESC LIMIT {_DF_SAMPLE})"""
# Each term's document frequency (from ``agent_terms``, where a term not counted is
# rare: df 0; or from the sample), weight ``w`` and whether it is rare.
_IDF = f"""idf AS MATERIALIZED (
            SELECT t.a, t.ex, t.key, d.df, n.n, {_idf("d.df", "n.n")} AS w,
                   d.df <= {rare_cut("n.n")} AS rare
            FROM (SELECT a, CAST(quote_literal(a) AS tsquery) AS ex, {_KEY_PREFIX} || a AS key
                  FROM lex, unnest(lex.l) AS a) t,
                 (SELECT coalesce((SELECT c.n FROM counted c),
                                  (SELECT count(*) FROM sample)) AS n) n,
                 LATERAL (SELECT CASE WHEN EXISTS (SELECT 1 FROM counted)
                     THEN coalesce((SELECT g.df FROM agent_terms g
                                    WHERE g.agent_id = :agent_id AND g.lexeme = t.a), 0)
                     ELSE (SELECT count(*) FROM sample s WHERE s.tsv @@ t.ex) END AS df) d)"""
_TERM_WEIGHTS = (_LEX, _COUNTED, _SAMPLE, _IDF)

# The searches for memories holding two of the ``_MAX_PAIR_TERMS`` rarest terms, or one
# rare term, each with the number of memories it is expected to match (a pair's as if
# its terms were independent); ``wanted`` matches any one term.
_RAREST = f"rarest AS (SELECT key, df, n FROM idf ORDER BY df, a LIMIT {_MAX_PAIR_TERMS})"
_PAIRS_AND_RARE = """searches AS MATERIALIZED (
            SELECT CAST(format('%L & %L', x.key, y.key) AS tsquery) AS q,
                   CAST(x.df AS float8) * y.df / greatest(x.n, 1) AS expected
            FROM rarest x, rarest y WHERE x.key < y.key
            UNION ALL
            SELECT CAST(quote_literal(key) AS tsquery), df FROM idf WHERE rare)"""
_WANTED = """wanted AS (
            SELECT (SELECT CAST(string_agg(quote_literal(key), ' | ') AS tsquery) FROM idf)
                       AS any_q)"""
_SEARCHES = (_RAREST, _PAIRS_AND_RARE, _WANTED)
_POOL = f"greatest({_STRICT_FACTOR} * :k, {_MIN_POOL})"


def _found(where: str) -> str:
    """The searches run one by one, those expected to match fewest first, until
    ``_STRICT_FACTOR`` x ``k`` (at least ``_MIN_POOL``) memories are found: the memories
    that can score high, most specific first. One search of them all together returned
    an arbitrary part of the matches, mostly those of the commonest pair, which is now
    read only if the specific ones found too few."""
    return f"""kw_found AS MATERIALIZED (
            SELECT DISTINCT ON (f.id) f.id, f.tsv
            FROM (SELECT f.id, f.tsv
                  FROM (SELECT q, expected FROM searches ORDER BY expected) s
                  CROSS JOIN LATERAL (
                      SELECT m.id, m.tsv FROM memories m
                      WHERE {_index_search("s.q", where)}
                      LIMIT {_POOL}) f
                  LIMIT {_POOL}) f
            ORDER BY f.id)"""


def _rarest(where: str) -> str:
    """Only if the searches found fewer than ``k``: ``k`` more memories holding the
    rarest of the other terms (typically a name: they outscore memories holding one
    commoner term). When the searches found ``k``, holders of one commonish term seldom
    rank among the best, and finding them costs a GIN scan of that term's whole posting
    list (measured in bench/README.md, the keyword side)."""
    return f"""kw_rarest AS MATERIALIZED (
            SELECT m.id, m.tsv FROM memories m,
                   (SELECT CAST(quote_literal(key) AS tsquery) AS q FROM idf
                    WHERE NOT rare ORDER BY df, a LIMIT 1) r
            WHERE {_index_search("r.q", where)}
              AND m.id NOT IN (SELECT id FROM kw_found)
              AND (SELECT count(*) FROM kw_found) < :k
            LIMIT :k)"""


def _fill(where: str) -> str:
    """Only if those found fewer than ``k``: up to ``k`` memories holding any one term."""
    return f"""kw_fill AS (
            SELECT m.id, m.tsv FROM memories m, wanted
            WHERE (SELECT count(*) FROM kw_found) + (SELECT count(*) FROM kw_rarest) < :k
              AND {_index_search("wanted.any_q", where)}
              AND m.id NOT IN (SELECT id FROM kw_found UNION ALL SELECT id FROM kw_rarest)
            LIMIT :k)"""


# The memories found, scored and ranked: ``kw (id, rank, pos)``.
_SCORED = f"""kw AS (
            SELECT s.id, s.rank, row_number() OVER (ORDER BY s.rank DESC, s.id) AS pos
            FROM (SELECT c.id, {_score("c")} AS rank
                  FROM (SELECT id, tsv FROM kw_found
                        UNION ALL SELECT id, tsv FROM kw_rarest
                        UNION ALL SELECT id, tsv FROM kw_fill) c) s
            ORDER BY s.rank DESC, s.id LIMIT :k)"""


def exhaustive_sql(where: str) -> str:
    """The top ``:k`` scores over every memory of the agent holding a query term, scored
    as ``large_cte`` scores: the reference its bounded searches are measured against
    (bench/recall.py). Parameters: ``agent_id``, ``words``, ``k`` and the filters'."""
    return f"""WITH {large_cte(where)}
        SELECT {_score("m")} AS rank
        FROM memories m, wanted
        WHERE {_index_search("wanted.any_q", where)}
        ORDER BY 1 DESC LIMIT :k"""
