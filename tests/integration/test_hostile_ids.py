"""Agent ids that look like SQL (``:name``, ``%``, ``$1``, quotes, backslashes, braces,
every printable ASCII character) on the paths that name an agent as a literal: the
``index_agents`` job (its partial index's DDL, term counts, rebuilds, drops) and recall's
HNSW vector query, beside the exact and keyword paths. And a fleet-wide job goes on past
one agent whose step fails."""

from __future__ import annotations

import json
import string
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from memoryd import validation as check
from memoryd.config import override_settings
from memoryd.errors import ValidationError
from memoryd.memory import keywords
from memoryd.memory import recall as rc
from memoryd.memory.agent_indexes import INDEX_PREFIX, existing_indexes, index_name
from memoryd.memory.embeddings import to_pgvector
from memoryd.memory.maintenance import index_agents as job
from memoryd.memory.maintenance import run_job
from memoryd.memory.store import MemoryStore
from tests.support.maint import FakeLLM, bulk_insert, run
from tests.support.plans import generic_plan


def _accepted(char: str) -> bool:
    try:
        check.agent_id(f"a{char}z")
    except ValidationError:
        return False
    return True


# Every printable ASCII character the agent-id rules take, in one id; the others (the
# whitespace control characters) are refused (``test_..._refused_cleanly``).
EVERY_PRINTABLE = "".join(c for c in string.printable if _accepted(c))
REFUSED = [c for c in string.printable if not _accepted(c)]
HOSTILE = ["team-a/:x", "victim/:agent_id", "50% off", "%(x)s", "%s", "$1", "o'brien",
           "back\\slash", "{x}", "'; DROP TABLE memories; --", "E'\\'' :: text",
           EVERY_PRINTABLE]
# What the HNSW query of ``victim/:agent_id`` searched once its ``:agent_id`` had been
# read as a parameter: another tenant's agent, whose memories it must never see.
DECOY = "victim/$1"
FLEET = [*HOSTILE, DECOY]
SIZE = 25  # above the index threshold (20), the HNSW line (10) and the keyword scan (15)


# Plain ids: the tests of one agent's failure fail for that alone.
PLAIN = ["agent-a", "agent-b", "agent-c"]


def _large_store(store: MemoryStore, pg_url: str, monkeypatch: pytest.MonkeyPatch,
                 agents: list[str]) -> Iterator[MemoryStore]:
    """A store whose agents of ``SIZE`` memories each get an index of their own, are
    searched through HNSW and use the indexed keyword side; each of ``agents`` holds
    ``SIZE`` memories. Per-agent indexes are dropped afterwards."""
    monkeypatch.setattr(keywords, "KEYWORD_SCAN_MAX", 15)
    with override_settings(agent_index_min_memories="20", recall_exact_threshold="10"):
        large = MemoryStore(pg_url, embedder=store.embedder)
    for agent in agents:
        bulk_insert(large, agent, SIZE)
    try:
        yield large
    finally:
        with large.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            for name in existing_indexes(conn):
                conn.exec_driver_sql(f'DROP INDEX "{name}"')
        large.close()


@pytest.fixture
def fleet(store: MemoryStore, pg_url: str, monkeypatch: pytest.MonkeyPatch
          ) -> Iterator[MemoryStore]:
    """Every agent of ``FLEET`` large (``_large_store``)."""
    yield from _large_store(store, pg_url, monkeypatch, FLEET)


@pytest.fixture
def plain(store: MemoryStore, pg_url: str, monkeypatch: pytest.MonkeyPatch
          ) -> Iterator[MemoryStore]:
    """Every agent of ``PLAIN`` large (``_large_store``)."""
    yield from _large_store(store, pg_url, monkeypatch, PLAIN)


def _owners(store: MemoryStore, ids: list[Any]) -> set[str]:
    with store.session() as session:
        return set(session.execute(text(
            "SELECT DISTINCT agent_id FROM memories WHERE id = ANY(:ids)"),
            {"ids": ids}).scalars())


def _predicate_agents(store: MemoryStore) -> dict[str, set[str]]:
    """For each per-agent index, the agents whose rows its predicate (as the catalog
    prints it) selects: the DDL's literal read back by PostgreSQL itself."""
    with store.session() as session:
        rows = session.execute(text("""
            SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) AS pred
            FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
            WHERE i.indrelid = 'memories'::regclass AND starts_with(c.relname, :p)
        """), {"p": INDEX_PREFIX}).all()
        conn = session.connection()
        return {r.relname: set(conn.exec_driver_sql(
            f"SELECT DISTINCT agent_id FROM memories WHERE {r.pred}",
            execution_options={"no_parameters": True}).scalars()) for r in rows}


def _term_counts(store: MemoryStore) -> dict[str, int]:
    with store.session() as session:
        return {str(r.agent_id): int(r.memories) for r in session.execute(text(
            "SELECT agent_id, memories FROM agent_term_stats"))}


def test_hostile_agent_ids_are_indexed_counted_rebuilt_and_dropped(fleet: MemoryStore) -> None:
    record = run(fleet, "index_agents")
    assert (record.stats["built"], record.stats["agents_terms_counted"]) == (
        len(FLEET), len(FLEET))
    assert "agents_failed" not in record.stats
    assert _predicate_agents(fleet) == {index_name(a): {a} for a in FLEET}
    assert _term_counts(fleet) == dict.fromkeys(FLEET, SIZE)
    with fleet.session() as session:
        noted = dict(session.execute(text(
            "SELECT agent_id, df FROM agent_terms WHERE lexeme = 'note'")).all())
    assert noted == dict.fromkeys(FLEET, SIZE)
    # Built before the graph options: every index is rebuilt in place.
    with fleet.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for agent in FLEET:
            conn.exec_driver_sql(f'ALTER INDEX "{index_name(agent)}" SET (ef_construction = 64)')
    record = run(fleet, "index_agents")
    assert (record.stats["rebuilt"], record.stats["built"]) == (len(FLEET), 0)
    assert _predicate_agents(fleet) == {index_name(a): {a} for a in FLEET}
    # Shrunk below half the threshold: every index is dropped, every count forgotten.
    with fleet.session() as session:
        session.execute(text("DELETE FROM memories WHERE content <> 'note number 1'"))
    record = run(fleet, "index_agents")
    assert (record.stats["dropped"], record.stats["term_counts_deleted"]) == (
        len(FLEET), len(FLEET))
    assert "agents_failed" not in record.stats
    with fleet.engine.connect() as conn:
        assert existing_indexes(conn) == {}
    assert _term_counts(fleet) == {}


@pytest.mark.parametrize("keyword_search", ["scan", "index"])
@pytest.mark.parametrize("vector_search", ["exact", "hnsw"])
def test_hostile_agent_ids_recall_only_their_own_memories_on_every_path(
        fleet: MemoryStore, vector_search: rc.VectorSearch,
        keyword_search: rc.KeywordSearch) -> None:
    run(fleet, "index_agents")  # the HNSW search goes through each agent's own index
    query = "note number 7"
    vector = to_pgvector(fleet.embedder.embed([query])[0])
    for agent in FLEET:
        plan = rc.build_plan(agent, query, rc.Filters(), 30, vector_search=vector_search,
                             keyword_search=keyword_search, ef_search=100)
        with fleet.session() as session:
            hits = rc.keyword_hits(session, plan)
            found = rc.candidates(session, plan, vector, hits, fleet.model)
        assert len(hits) == SIZE, agent
        assert sum(c.vector_rank is not None for c in found) == SIZE, agent
        assert _owners(fleet, [c.row["id"] for c in found]) == {agent}


def test_hostile_agent_ids_recall_through_the_store(fleet: MemoryStore) -> None:
    """The whole recall as a caller gets it, before and after the agents' own indexes:
    the HNSW plan (shared index, then the agent's) and the indexed keyword side."""
    for _ in range(2):
        for agent in FLEET:
            hits = fleet.recall(agent, "note number 7", limit=5)
            assert len(hits) == 5 and {h.memory.agent_id for h in hits} == {agent}, agent
        run(fleet, "index_agents")
        fleet.own_indexes.clear()


def test_a_hostile_agents_vector_query_uses_its_own_index_in_a_generic_plan(
        fleet: MemoryStore) -> None:
    run(fleet, "index_agents")
    vector = to_pgvector(fleet.embedder.embed(["notes about numbers"])[0])
    for agent in FLEET:
        plan = rc.build_plan(agent, "", rc.Filters(), 30, vector_search="hnsw",
                             keyword_search="index", ef_search=100)
        with fleet.session() as session:
            rc.keyword_hits(session, plan)  # no words: the vector settings alone
            session.execute(text("SET LOCAL enable_seqscan = off"))
            session.execute(text("SET LOCAL enable_sort = off"))
            shown = generic_plan(session, plan.candidate_statement(vector, []), {})
        assert index_name(agent) in shown, agent
        assert not {index_name(a) for a in FLEET if a != agent} & set(shown.split()), agent


@pytest.mark.parametrize("char", REFUSED, ids=[f"chr{ord(c)}" for c in REFUSED])
def test_agent_ids_with_control_characters_are_refused_cleanly(store: MemoryStore,
                                                               char: str) -> None:
    agent = f"team-a/{char}:x"
    for attempt in (lambda: store.store(agent, "a memory"),
                    lambda: store.recall(agent, "a memory"),
                    lambda: run_job(store, "consolidate", agent_id=agent)):
        with pytest.raises(ValidationError) as refused:
            attempt()
        assert refused.value.field == "agent_id" and agent not in str(refused.value)


# --- one agent's failure ------------------------------------------------------------------
def _audit_stats(store: MemoryStore, run_id: int | None) -> dict[str, Any]:
    with store.session() as session:
        stats = session.execute(text("SELECT stats FROM maintenance_runs WHERE id = :id"),
                                {"id": run_id}).scalar_one()
    assert isinstance(stats, dict)
    return stats


def test_index_agents_goes_on_past_an_agent_whose_build_fails(plain: MemoryStore) -> None:
    """A relation already holds the name of one agent's index: its build fails, is
    recorded for it, and every other agent still gets its index and its counts."""
    fleet, blocked = plain, "agent-b"
    with fleet.session() as session:
        session.connection().exec_driver_sql(
            f'CREATE TABLE "{index_name(blocked)}" (x int)')
    try:
        record = run(fleet, "index_agents")
        assert record.stats["built"] == len(PLAIN) - 1
        assert record.stats["agents_indexed"] == len(PLAIN) - 1
        assert record.stats["agents_failed"] == 1
        [failure] = record.stats["failed"]
        assert (failure["agent_id"], failure["step"]) == (blocked, "build")
        assert "DuplicateTable" in failure["error"]
        assert _audit_stats(fleet, record.run_id)["failed"] == [failure]
        assert "note number" not in json.dumps(record.stats)
        with fleet.engine.connect() as conn:
            assert existing_indexes(conn) == {index_name(a): True for a in PLAIN
                                              if a != blocked}
        assert _term_counts(fleet) == dict.fromkeys(PLAIN, SIZE)  # counted regardless
    finally:
        with fleet.session() as session:
            session.connection().exec_driver_sql(f'DROP TABLE "{index_name(blocked)}"')
    again = run(fleet, "index_agents")
    assert (again.stats["built"], again.stats.get("agents_failed")) == (1, None)


def test_term_counting_goes_on_past_an_agent_whose_counts_are_locked(
        plain: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another transaction holds one agent's count row: its recount gives up after the
    lock timeout, is recorded for it, and the other agents are counted."""
    monkeypatch.setattr(job, "COUNT_LOCK_TIMEOUT", "200ms", raising=False)
    fleet, locked = plain, "agent-b"
    run(fleet, "index_agents")
    for agent in PLAIN:
        bulk_insert(fleet, agent, 5, prefix="more")  # 30: stale counts
    with fleet.engine.connect() as holder:
        # Released by the server then at the latest, should the job wait for it.
        holder.execute(text("SET idle_in_transaction_session_timeout = '60s'"))
        holder.execute(text("SELECT 1 FROM agent_term_stats WHERE agent_id = :a FOR UPDATE"),
                       {"a": locked})
        record = run(fleet, "index_agents")
        holder.rollback()
    assert record.stats["agents_terms_counted"] == len(PLAIN) - 1
    assert record.stats["agents_failed"] == 1
    assert [(f["agent_id"], f["step"]) for f in record.stats["failed"]] == [
        (locked, "count_terms")]
    assert "LockNotAvailable" in record.stats["failed"][0]["error"]
    assert _term_counts(fleet) == {a: SIZE if a == locked else SIZE + 5 for a in PLAIN}
    again = run(fleet, "index_agents")
    assert again.stats["agents_terms_counted"] == 1 and "agents_failed" not in again.stats
    assert _term_counts(fleet) == dict.fromkeys(PLAIN, SIZE + 5)


def test_compaction_goes_on_past_a_session_whose_rewrite_fails(store: MemoryStore) -> None:
    """The other fleet-wide sweeps take each agent's session or group apart too: a
    constraint refuses the rewrite of one agent's session, and the next agent's session
    is still compacted."""
    for agent in PLAIN:
        store.store_many(agent, [{"content": f"Message {i} of {agent}.", "session_id": "s",
                                  "role": ("user", "assistant")[i % 2]} for i in range(31)])
    with store.session() as session:
        session.execute(text("ALTER TABLE sessions ADD CONSTRAINT not_agent_b CHECK ("
                             "agent_id <> 'agent-b' OR compacted_at IS NULL) NOT VALID"))
    try:
        record = run(store, "compact_sessions", llm=FakeLLM())
    finally:
        with store.session() as session:
            session.execute(text("ALTER TABLE sessions DROP CONSTRAINT not_agent_b"))
    assert record.stats["compacted"] == len(PLAIN) - 1
    assert [(f["agent_id"], f["step"]) for f in record.stats["failed"]] == [
        ("agent-b", "compact")]
    assert "CheckViolation" in record.stats["failed"][0]["error"]
    assert "Message" not in json.dumps(record.stats)
    with store.session() as session:
        counts = dict(session.execute(text(
            "SELECT agent_id, message_count FROM sessions")).all())
    assert counts == {"agent-a": 11, "agent-b": 31, "agent-c": 11}
