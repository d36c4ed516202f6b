"""The candidate query's plans: planned once per connection (generic), and still
reading only the agent's rows by index, in any store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text

from memoryd.config import override_settings
from memoryd.memory import recall as rc
from memoryd.memory.embeddings import to_pgvector
from memoryd.memory.recall_sql import AGENT_LITERAL, Sql
from memoryd.memory.store import MemoryStore
from tests.support.maint import bulk_insert
from tests.support.plans import generic_plan

SMALL = "agent-small"
FACTS = ["The user is allergic to peanuts.", "The user's dog is called Rex.",
         "The user works as a nurse in Lyon.", "The user plays the cello on Sundays.",
         "The user's sister lives in Montreal.", "The user prefers tea to coffee."]


@pytest.fixture
def large_store(store: MemoryStore, pg_url: str) -> Iterator[MemoryStore]:
    """A store whose recall takes the large-agent (HNSW) plan from 10 memories."""
    with override_settings(recall_exact_threshold="10"):
        large = MemoryStore(pg_url, embedder=store.embedder)
    try:
        yield large
    finally:
        large.close()


def _candidate_plans(store: MemoryStore) -> tuple[int, int]:
    """(generic, custom) plans of the candidate query prepared on the store's one
    pooled connection."""
    with store.session() as session:
        row = session.execute(text(
            "SELECT coalesce(sum(generic_plans), 0) AS g, coalesce(sum(custom_plans), 0) AS c "
            "FROM pg_prepared_statements WHERE statement LIKE '%WITH vec AS%'")).one()
    return int(row.g), int(row.c)


@pytest.mark.parametrize("agent_memories", [len(FACTS), 40])
def test_the_candidate_query_is_planned_once_per_connection(
        store: MemoryStore, large_store: MemoryStore, agent_memories: int) -> None:
    """A small agent (exact search) and a large one (HNSW): once psycopg prepares the
    candidate query, PostgreSQL reuses one plan instead of planning every recall."""
    store.store_many(SMALL, [{"content": f} for f in FACTS])
    bulk_insert(store, SMALL, agent_memories - len(FACTS))
    large_store.engine.dispose()  # one fresh connection: nothing prepared on it yet
    for _ in range(10):
        assert large_store.recall(SMALL, "Which pet does the user have?", limit=3)
    generic, custom = _candidate_plans(large_store)
    assert generic >= 3 and custom == 0


@pytest.mark.parametrize("filters", [{"since": "2000-01-01T00:00:00Z"}, {"category": "fact"}])
def test_a_filtered_recall_is_planned_with_its_values(store: MemoryStore,
                                                      filters: dict[str, str]) -> None:
    """How many rows a filter's value leaves can decide between an index on it and the
    vector search, so a filtered candidate query keeps custom plans."""
    store.store_many(SMALL, [{"content": f, "category": "fact"} for f in FACTS])
    store.engine.dispose()
    for _ in range(10):
        assert store.recall(SMALL, "Which pet does the user have?", limit=3, **filters)
    generic, custom = _candidate_plans(store)
    assert custom >= 3 and generic == 0


def test_a_small_agents_generic_plan_reads_its_own_rows_in_a_store_of_few_agents(
        store: MemoryStore) -> None:
    """In a store of two agents, one of them large, the planner's guess for "any
    agent" is half the table: the generic plan must still read the small agent's rows
    through an index and rank all of them exactly, not scan the table or take the
    shared HNSW index (whose filter would drop most of the agent's rows)."""
    bulk_insert(store, "agent-large", 3000)
    store.store_many(SMALL, [{"content": f} for f in FACTS])
    bulk_insert(store, SMALL, 14)
    with store.session() as session:
        session.execute(text("ANALYZE memories"))
    query = "Which pet does the user have?"
    vector = to_pgvector(store.embedder.embed([query])[0])
    plan = rc.build_plan(SMALL, query, rc.Filters(), 30, vector_search="exact",
                         keyword_search="scan", ef_search=100)
    with store.session() as session:
        shown = generic_plan(session, plan.candidate_statement(vector, [], store.model),
                             plan.vector_settings)
    assert "Seq Scan on memories" not in shown and "hnsw" not in shown
    store.engine.dispose()
    for _ in range(8):  # the last ones run the prepared, generic plan
        hits = store.recall(SMALL, query, limit=20)
    assert len(hits) == 20 and {h.memory.agent_id for h in hits} == {SMALL}
    assert _candidate_plans(store)[0] >= 2
    assert hits[0].content == "The user's dog is called Rex."


@pytest.mark.parametrize("agent", ["o'brien", "back\\slash", "quote'\\'mix", "ünï ♥ 'x'",
                                   "a/:x", "50%", "%(x)s", "$1", "{x}", ":agent_id"])
def test_agent_literals_read_back_as_the_agent_id(store: MemoryStore, agent: str) -> None:
    """The large agent's id is named as a literal in its vector query: it reads back
    exactly, whatever the string settings, and beside parameters that still bind."""
    statement = Sql(f"SELECT {AGENT_LITERAL} AS agent, CAST(:x AS text) AS x", {"x": "bound"},
                    {AGENT_LITERAL: agent})
    with store.session() as session:
        for conforming in ("on", "off"):
            session.execute(text(f"SET LOCAL standard_conforming_strings = {conforming}"))
            session.execute(text("SET LOCAL escape_string_warning = off"))
            assert tuple(statement.run(session).one()) == (agent, "bound")


def test_a_large_agent_with_quotes_in_its_id_recalls_only_its_own_memories(
        store: MemoryStore, large_store: MemoryStore) -> None:
    agent = "o'brien\\'; DROP TABLE memories; --"
    store.store_many(agent, [{"content": f} for f in FACTS])
    bulk_insert(store, agent, 20)
    store.store_many("o'brien", [{"content": f} for f in FACTS])
    hits = large_store.recall(agent, "Which pet does the user have?", limit=30)
    assert len(hits) == 26 and {h.memory.agent_id for h in hits} == {agent}
