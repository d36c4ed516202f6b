"""Recall's statement texts stay within what psycopg converts once per text: longer
ones have their parameters located again at every execution."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from psycopg import _queries
from psycopg import sql as psql
from sqlalchemy.dialects import postgresql

from memoryd.db.pipeline import _driver_sql
from memoryd.memory import recall
from memoryd.memory.recall_sql import (
    AGENT_LITERAL,
    Filters,
    Sessions,
    Sql,
    candidate_statement,
    compact,
)

EVERY_FILTER = Filters(category="work", tags=("a", "b"), session_id="chat-1",
                       include_archived=False, since=datetime(2026, 1, 1, tzinfo=UTC),
                       until=datetime(2026, 2, 1, tzinfo=UTC), metadata='{"k": 1}')
QUERY = " ".join(f"word{n}" for n in range(40))  # more words than recall keeps


def _bytes(sql: str) -> int:
    return len(_driver_sql(sql, postgresql.psycopg.dialect()).encode())


def _sent(statement: Sql) -> str:
    """The statement's text with its literals quoted in, as sent."""
    text = statement.text
    for mark, value in statement.literals.items():
        text = text.replace(mark, psql.Literal(value).as_string())
    return text


@pytest.mark.parametrize("filters", [Filters(), EVERY_FILTER])
@pytest.mark.parametrize("keyword_search", ["scan", "index"])
@pytest.mark.parametrize("vector_search", ["exact", "hnsw"])
def test_every_recall_statement_fits_psycopgs_conversion_cache(
        filters: Filters, keyword_search: str, vector_search: str) -> None:
    plan = recall.build_plan("agent-" + "x" * 200, QUERY, filters, 20,
                             vector_search=vector_search,  # type: ignore[arg-type]
                             keyword_search=keyword_search,  # type: ignore[arg-type]
                             ef_search=100, sessions=Sessions(5, 1, 5000))
    assert plan.keyword_statement is not None
    candidates = candidate_statement(plan.agent_id, "[0.1]", [], filters, 20,
                                     search=plan.vector_search, model="minilm",
                                     sessions=plan.sessions)
    limit = _queries.MAX_CACHED_STATEMENT_LENGTH
    assert _bytes(plan.keyword_statement.text) <= limit
    assert _bytes(_sent(candidates)) <= limit


@pytest.mark.parametrize("vector_search", ["exact", "hnsw"])
def test_no_agent_id_is_written_into_the_text_sqlalchemy_parses(vector_search: str) -> None:
    """The HNSW search names its agent by a mark, quoted in only after parsing; the
    exact search binds it like every other statement."""
    agent = "team-a/:agent_id %(x)s $1 '{x}'"
    plan = recall.build_plan(agent, "hello world", EVERY_FILTER, 20,
                             vector_search=vector_search,  # type: ignore[arg-type]
                             keyword_search="index", ef_search=100,
                             sessions=Sessions(5, 1, 5000))
    candidates = plan.candidate_statement("[0.1]", [])
    assert plan.keyword_statement is not None
    for statement in (plan.keyword_statement, candidates):
        assert agent not in statement.text and statement.params["agent_id"] == agent
    hnsw = vector_search == "hnsw"
    assert dict(candidates.literals) == ({AGENT_LITERAL: agent} if hnsw else {})
    assert (AGENT_LITERAL in candidates.text) == hnsw


def test_compacting_keeps_every_word_and_makes_each_gap_one_space() -> None:
    assert compact("SELECT a,\n        b  FROM t\n\tWHERE x = ' | '") == (
        "SELECT a, b FROM t WHERE x = ' | '")
