"""Reads on sessions of explicit transactions: recall's BEGIN and COMMIT ride on its
statements and other reads send none, counted on the wire (libpq's protocol trace); the
pooled connection goes back to the pool as it came, whether the recall succeeded or
failed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from memoryd.db.engine import make_engine
from memoryd.memory import recall as rc
from memoryd.memory.recall_sql import Sql
from memoryd.memory.store import MemoryStore
from tests.support.wire import round_trips, wire

AGENT = "agent-round-trips"
MEMORIES = ["The user is allergic to peanuts.", "The user's sister lives in Lisbon.",
            "The staging server was rebooted after the kernel update.",
            "The weekly sync moved to the small meeting room."]
QUERY = "Which food allergies does the user have?"


@pytest.fixture
def small_pool(pg_url: str, store: MemoryStore) -> Iterator[MemoryStore]:
    """A store on one pooled connection, so each session reuses the one before's."""
    one = MemoryStore(engine=make_engine(pg_url, pool_size=1), embedder=store.embedder)
    one.store_many(AGENT, [{"content": c} for c in MEMORIES])
    one.recall(AGENT, QUERY)  # counts the agent's size, prepares nothing yet
    try:
        yield one
    finally:
        one.engine.dispose()


def test_a_recall_takes_three_round_trips_its_begin_and_commit_riding_on_its_statements(
        small_pool: MemoryStore, tmp_path: Path) -> None:
    small_pool.recall(AGENT, QUERY)  # the per-process memos fresh (sizes, models, indexes)
    with wire(small_pool.engine, tmp_path) as messages:
        hits = small_pool.recall(AGENT, QUERY, limit=2)
    assert hits and hits[0].content == MEMORIES[0]
    assert round_trips(messages) == 3, "\n".join(messages)
    sent = [m for m in messages if m.startswith("F")]
    assert sent.count("F Sync") == 3  # the keyword, candidate and access statements


def test_a_get_and_a_list_take_a_round_trip_per_statement_and_no_begin_or_commit(
        small_pool: MemoryStore, tmp_path: Path) -> None:
    first = small_pool.list(AGENT, limit=1).items[0]
    with wire(small_pool.engine, tmp_path) as messages:
        got = small_pool.get(AGENT, first.id)
        page = small_pool.list(AGENT, limit=2)
    assert got.id == first.id and page.total == len(MEMORIES)
    assert round_trips(messages) == 3, "\n".join(messages)


def test_a_session_of_explicit_transactions_runs_recalls_statements_in_one_transaction(
        small_pool: MemoryStore) -> None:
    """The BEGIN the pipeline sends holds the keyword side's settings for the candidate
    query: both see one transaction; the access bump, after the COMMIT, another."""
    plan = rc.build_plan(AGENT, QUERY, rc.Filters(), 20, vector_search="hnsw",
                         keyword_search="scan", ef_search=77)
    with small_pool.read_session(AGENT) as session:
        rc.keyword_hits(session, plan)
        inside = session.execute(text(
            "SELECT current_setting('hnsw.ef_search') AS ef, "
            "now() = statement_timestamp() AS own_start")).one()
        alone = session.execute(text("SELECT now() = statement_timestamp()")).scalar_one()
    assert inside.ef == "77"
    assert not inside.own_start  # the transaction began before this statement
    assert alone is False  # still the same transaction: nothing committed it


def test_the_connection_goes_back_to_the_pool_in_its_default_mode(
        small_pool: MemoryStore) -> None:
    small_pool.recall(AGENT, QUERY)
    with small_pool.session() as session:
        first = session.execute(text("SELECT txid_current()")).scalar_one()
        second = session.execute(text("SELECT txid_current()")).scalar_one()
    assert first == second  # one transaction: the driver is not in autocommit mode


def test_a_recall_that_fails_after_its_begin_leaves_no_transaction_open(
        small_pool: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(plan: rc.RecallPlan, *args: Any, **kwargs: Any) -> Sql:
        return Sql("SELECT 1 / (SELECT count(*) FROM memories WHERE false) AS id", {})

    monkeypatch.setattr(rc.RecallPlan, "candidate_statement", failing)
    with pytest.raises(DBAPIError):
        small_pool.recall(AGENT, QUERY)
    monkeypatch.undo()
    with small_pool.session() as session:
        state = session.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'memoryd' "
            "AND state LIKE 'idle in transaction%'")).scalar_one()
        first = session.execute(text("SELECT txid_current()")).scalar_one()
        second = session.execute(text("SELECT txid_current()")).scalar_one()
    assert state == 0 and first == second
    assert small_pool.recall(AGENT, QUERY)[0].content == MEMORIES[0]
