"""Recall's statement texts stay within what psycopg converts once per text: longer
ones have their parameters located again at every execution."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from psycopg import _queries
from sqlalchemy.dialects import postgresql

from memoryd.db.pipeline import _driver_sql
from memoryd.memory import recall
from memoryd.memory.recall_sql import Filters, Sessions, candidate_statement, compact

EVERY_FILTER = Filters(category="work", tags=("a", "b"), session_id="chat-1",
                       include_archived=False, since=datetime(2026, 1, 1, tzinfo=UTC),
                       until=datetime(2026, 2, 1, tzinfo=UTC), metadata='{"k": 1}')
QUERY = " ".join(f"word{n}" for n in range(40))  # more words than recall keeps


def _bytes(sql: str) -> int:
    return len(_driver_sql(sql, postgresql.psycopg.dialect()).encode())


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
    assert _bytes(candidates.text) <= limit


def test_compacting_keeps_every_word_and_makes_each_gap_one_space() -> None:
    assert compact("SELECT a,\n        b  FROM t\n\tWHERE x = ' | '") == (
        "SELECT a, b FROM t WHERE x = ' | '")
