"""``index_agents``: a partial HNSW index per large agent, on the real PostgreSQL.

The planning rules (threshold, hysteresis, cap, invalid builds) are checked on the plain
``plan`` function; building, dropping, the plan recall gets and quoting on the database.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text

from memoryd.config import override_settings
from memoryd.embedded.postgres import EmbeddedPostgres
from memoryd.errors import ValidationError
from memoryd.memory import recall as rc
from memoryd.memory.agent_indexes import (
    GRAPH_OPTIONS,
    INDEX_PREFIX,
    existing_indexes,
    index_name,
    older_graphs,
)
from memoryd.memory.embeddings import to_pgvector
from memoryd.memory.maintenance import run_job
from memoryd.memory.maintenance.index_agents import plan
from memoryd.memory.store import MemoryStore
from tests.support.maint import bulk_insert, run
from tests.support.plans import generic_plan

BIG, SMALL = "agent-big", "agent-small"


# --- the plan ---------------------------------------------------------------------------
def test_plan_indexes_agents_at_the_threshold_only() -> None:
    todo = plan([("a", 100), ("b", 99)], {}, 100)
    assert (todo.build, todo.drop, todo.keep) == (["a"], [], [])


def test_plan_keeps_an_index_until_its_agent_falls_below_half() -> None:
    existing = {index_name("a"): True, index_name("b"): True}
    todo = plan([("a", 50), ("b", 49)], existing, 100)
    assert (todo.build, todo.drop, todo.keep) == ([], [index_name("b")], ["a"])


def test_plan_caps_the_number_of_indexes_largest_first() -> None:
    sizes = [("c", 300), ("b", 200), ("a", 150)]
    existing = {index_name("a"): True}
    todo = plan(sizes, existing, 100, cap=2)
    assert (todo.build, todo.drop, todo.keep) == (["c", "b"], [index_name("a")], [])


def test_plan_rebuilds_an_invalid_index_and_drops_strangers() -> None:
    existing = {index_name("a"): False, INDEX_PREFIX + "0123456789abcdef": True}
    todo = plan([("a", 100)], existing, 100)
    assert todo.build == ["a"]
    assert todo.drop == sorted([index_name("a"), INDEX_PREFIX + "0123456789abcdef"])


def test_plan_rebuilds_only_kept_indexes_of_an_older_build() -> None:
    existing = {index_name("a"): True, index_name("b"): True, index_name("c"): True}
    older = frozenset({index_name("a"), index_name("c")})
    todo = plan([("a", 100), ("b", 100), ("c", 10)], existing, 100, older=older)
    assert (todo.keep, todo.rebuild) == (["a", "b"], ["a"])  # c is dropped, not rebuilt
    assert todo.drop == [index_name("c")]


def test_plan_with_threshold_zero_drops_everything() -> None:
    todo = plan([("a", 10**6)], {index_name("a"): True}, 0)
    assert (todo.build, todo.drop, todo.keep) == ([], [index_name("a")], [])


def test_index_names_are_identifiers_whatever_the_agent_id() -> None:
    name = index_name("o'brien \"x\" " + "é" * 300)
    assert name.startswith(INDEX_PREFIX) and len(name) <= 63
    assert name.replace("_", "").isalnum() and name.isascii()
    assert index_name("a") != index_name("b")


# --- on the database --------------------------------------------------------------------
@pytest.fixture
def indexing_store(store: MemoryStore, pg_url: str) -> Iterator[MemoryStore]:
    """A store whose agents get their own index from 20 memories, and whose recall takes
    the large-agent (HNSW) plan from 10; every per-agent index is dropped afterwards (a
    TRUNCATE does not remove indexes)."""
    with override_settings(agent_index_min_memories="20", recall_exact_threshold="10"):
        small = MemoryStore(pg_url)
    try:
        yield small
    finally:
        with small.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            for name in existing_indexes(conn):
                conn.execute(text(f'DROP INDEX "{name}"'))
        small.close()


def _predicates(store: MemoryStore) -> dict[str, str]:
    with store.session() as session:
        rows = session.execute(text("""
            SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) AS pred
            FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
            WHERE i.indrelid = 'memories'::regclass AND starts_with(c.relname, :p)
        """), {"p": INDEX_PREFIX}).all()
    return {r.relname: r.pred for r in rows}


def _vector_plan(store: MemoryStore, agent: str, *, generic: bool = False) -> str:
    """The plan of recall's candidate query for ``agent`` (large-agent settings), with
    sequential scans and sorts priced out, as on a table too big to scan; ``generic``:
    the plan a prepared statement reuses, made without the parameters' values."""
    vector = to_pgvector(store.embedder.embed(["notes about numbers"])[0])
    plan = rc.build_plan(agent, "", rc.Filters(), 30, vector_search="hnsw",
                         keyword_search="index", ef_search=100)
    candidate = plan.candidate_statement(vector, [])
    with store.session() as session:
        rc.keyword_hits(session, plan)  # no words: the vector settings alone
        session.execute(text("SET LOCAL enable_seqscan = off"))
        session.execute(text("SET LOCAL enable_sort = off"))
        if generic:
            return generic_plan(session, candidate, {})
        lines = candidate.run(session, prefix="EXPLAIN ").scalars().all()
    return "\n".join(lines)


def test_large_agent_gets_its_own_index_and_recall_uses_it(
        indexing_store: MemoryStore) -> None:
    bulk_insert(indexing_store, BIG, 25)
    bulk_insert(indexing_store, SMALL, 5)
    record = run(indexing_store, "index_agents")
    assert record.stats | {"duration_ms": 0} == {
        "agents_indexed": 1, "built": 1, "dropped": 0, "to_build": 1, "to_drop": 0,
        "rebuilt": 0, "to_rebuild": 0, "term_counts_deleted": 0, "agents_terms_counted": 1,
        "agents_terms_fresh": 0, "duration_ms": 0}
    assert _predicates(indexing_store) == {
        index_name(BIG): f"((agent_id)::text = '{BIG}'::text)"}
    assert index_name(BIG) in _vector_plan(indexing_store, BIG)
    assert index_name(BIG) in _vector_plan(indexing_store, BIG, generic=True)
    assert index_name(BIG) not in _vector_plan(indexing_store, SMALL)
    assert index_name(BIG) not in _vector_plan(indexing_store, SMALL, generic=True)
    hits = indexing_store.recall(BIG, "note number 7", limit=5)
    assert len(hits) == 5 and all(h.memory.agent_id == BIG for h in hits)


def test_a_second_run_changes_nothing_and_a_dry_run_builds_nothing(
        indexing_store: MemoryStore) -> None:
    bulk_insert(indexing_store, BIG, 25)
    dry = run(indexing_store, "index_agents", dry_run=True)
    assert (dry.stats["to_build"], dry.stats["built"]) == (1, 0)
    assert _predicates(indexing_store) == {}
    run(indexing_store, "index_agents")
    again = run(indexing_store, "index_agents")
    assert (again.stats["built"], again.stats["dropped"], again.stats["agents_indexed"]) == \
        (0, 0, 1)


def test_index_is_dropped_once_its_agent_shrinks_below_half(
        indexing_store: MemoryStore) -> None:
    bulk_insert(indexing_store, BIG, 25)
    run(indexing_store, "index_agents")
    with indexing_store.session() as session:
        session.execute(text("DELETE FROM memories WHERE agent_id = :a AND id IN ("
                             "SELECT id FROM memories WHERE agent_id = :a LIMIT 15)"),
                        {"a": BIG})  # 10 left: half of 20 keeps it
    assert run(indexing_store, "index_agents").stats["dropped"] == 0
    with indexing_store.session() as session:
        session.execute(text("DELETE FROM memories WHERE id IN ("
                             "SELECT id FROM memories WHERE agent_id = :a LIMIT 1)"), {"a": BIG})
    assert run(indexing_store, "index_agents").stats["dropped"] == 1
    assert _predicates(indexing_store) == {}


def test_agent_ids_are_quoted_in_the_index_predicate(indexing_store: MemoryStore) -> None:
    agent = "o'brien; DROP TABLE memories; --"
    bulk_insert(indexing_store, agent, 20)
    run(indexing_store, "index_agents")
    assert _predicates(indexing_store) == {
        index_name(agent): "((agent_id)::text = 'o''brien; DROP TABLE memories; --'::text)"}
    assert len(indexing_store.recall(agent, "note number 3", limit=3)) == 3


def test_an_invalid_index_is_rebuilt(indexing_store: MemoryStore,
                                     pg_server: EmbeddedPostgres) -> None:
    bulk_insert(indexing_store, BIG, 25)
    run(indexing_store, "index_agents")
    # As an interrupted concurrent build leaves it (the catalog is the superuser's to edit).
    with pg_server.connect_owner() as conn:
        conn.execute("UPDATE pg_index SET indisvalid = false "
                     "WHERE indexrelid = CAST(%s AS regclass)", (index_name(BIG),))
    record = run(indexing_store, "index_agents")
    assert (record.stats["dropped"], record.stats["built"]) == (1, 1)
    with indexing_store.engine.connect() as conn:
        assert existing_indexes(conn) == {index_name(BIG): True}


def _options(store: MemoryStore, name: str) -> set[str]:
    with store.session() as session:
        found = session.execute(text("SELECT reloptions FROM pg_class WHERE relname = :n"),
                                {"n": name}).scalar_one()
    return set(found or ())


def test_an_index_built_before_the_graph_options_is_rebuilt_in_place(
        indexing_store: MemoryStore) -> None:
    """An agent's index is built with ``GRAPH_OPTIONS``; one built with others (as every
    index was before them) is rebuilt by the next run under the same name, valid
    throughout, and recall searches it at the smaller breadth only once it is."""
    wanted = {f"{key}={value}" for key, value in GRAPH_OPTIONS.items()}
    bulk_insert(indexing_store, BIG, 25)
    run(indexing_store, "index_agents")
    name = index_name(BIG)
    assert _options(indexing_store, name) == wanted
    with indexing_store.engine.connect().execution_options(
            isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f'ALTER INDEX "{name}" SET (ef_construction = 64)'))
        conn.execute(text(f'REINDEX INDEX "{name}"'))
        assert older_graphs(conn) == {name}

    def breadth() -> str:
        indexing_store.own_indexes.clear()
        with indexing_store.session() as session:
            recall_plan = rc.plan_for(indexing_store.recaller, session, BIG,
                                      "note number 7", rc.Filters(), 10)
        return recall_plan.vector_settings["hnsw.ef_search"]

    settings = indexing_store.settings
    assert breadth() == str(settings.hnsw_ef_search)
    record = run(indexing_store, "index_agents")
    assert (record.stats["rebuilt"], record.stats["to_rebuild"]) == (1, 1)
    assert (record.stats["built"], record.stats["dropped"]) == (0, 0)
    assert _options(indexing_store, name) == wanted
    with indexing_store.engine.connect() as conn:
        assert existing_indexes(conn) == {name: True} and not older_graphs(conn)
    assert breadth() == str(settings.agent_index_ef_search) != str(settings.hnsw_ef_search)
    assert run(indexing_store, "index_agents").stats["rebuilt"] == 0
    hits = indexing_store.recall(BIG, "note number 7", limit=5)
    assert len(hits) == 5 and all(h.memory.agent_id == BIG for h in hits)


def test_job_is_fleet_wide_and_takes_no_parameters(indexing_store: MemoryStore) -> None:
    with pytest.raises(ValidationError, match="whole fleet"):
        run_job(indexing_store, "index_agents", agent_id=BIG)
    with pytest.raises(ValidationError, match="takes none"):
        run_job(indexing_store, "index_agents", params={"min": 3})


# --- term counts --------------------------------------------------------------------------
def _terms(store: MemoryStore, agent: str) -> tuple[int | None, dict[str, int]]:
    with store.session() as session:
        n = session.execute(text("SELECT memories FROM agent_term_stats WHERE agent_id = :a"),
                            {"a": agent}).scalar_one_or_none()
        rows = session.execute(text("SELECT lexeme, df FROM agent_terms WHERE agent_id = :a"),
                               {"a": agent}).all()
    return n, {r.lexeme: r.df for r in rows}


def _true_df(store: MemoryStore, agent: str) -> dict[str, int]:
    with store.session() as session:
        docs = session.execute(text(
            "SELECT tsvector_to_array(tsv) FROM memories WHERE agent_id = :a"),
            {"a": agent}).scalars().all()
    df: dict[str, int] = {}
    for lexemes in docs:
        for lexeme in lexemes:
            df[lexeme] = df.get(lexeme, 0) + 1
    return df


def test_indexed_agents_get_their_lexemes_counted(indexing_store: MemoryStore) -> None:
    contents = [f"The {colour} kite number {i} flew over the harbour"
                for i, colour in enumerate(["red", "blue", "green"] * 8)]
    contents.append("A solitary zeppelin")
    indexing_store.store_many(BIG, [{"content": c} for c in contents])
    bulk_insert(indexing_store, SMALL, 5)
    record = run(indexing_store, "index_agents")
    assert record.stats["agents_terms_counted"] == 1
    n, counted = _terms(indexing_store, BIG)
    assert n == 25
    truth = _true_df(indexing_store, BIG)
    # 0.2 % of 25 memories is below 2: every lexeme held by 3 or more is counted, exactly.
    assert counted == {lexeme: df for lexeme, df in truth.items() if df > 2}
    assert counted["kite"] == 24 and counted["red"] == 8
    assert "zeppelin" not in counted and truth["zeppelin"] == 1
    assert _terms(indexing_store, SMALL) == (None, {})


def test_rare_terms_are_left_out_of_the_counts(indexing_store: MemoryStore) -> None:
    from memoryd.memory.maintenance.index_agents import count_terms

    bulk_insert(indexing_store, BIG, 1500, prefix="memo")  # "memo number <i>"
    with indexing_store.session() as session:
        # 3 memories of 1,500 (0.2 %: rare) and 4 (not rare)
        session.execute(text("UPDATE memories SET content = content || ' pelican' "
                             "WHERE agent_id = :a AND content IN ('memo number 1', "
                             "'memo number 2', 'memo number 3')"), {"a": BIG})
        session.execute(text("UPDATE memories SET content = content || ' heron' "
                             "WHERE agent_id = :a AND content IN ('memo number 4', "
                             "'memo number 5', 'memo number 6', 'memo number 7')"), {"a": BIG})
        kept = count_terms(session, BIG)
    n, counted = _terms(indexing_store, BIG)
    assert n == 1500
    # "memo" and "number" are in every memory, "heron" in 4; each number and "pelican"
    # in at most 3 of 1,500 (the rare cut is 3): left out.
    assert counted == {"memo": 1500, "number": 1500, "heron": 4} and kept == 3


def test_keyword_side_reads_the_counts_instead_of_sampling(
        indexing_store: MemoryStore) -> None:
    """Tamper with a counted frequency: the keyword score follows it, so recall read the
    counts (a sample would have found the true frequency)."""
    from memoryd.memory.maintenance.index_agents import count_terms

    indexing_store.store_many(BIG, [{"content": f"The walrus ate fish number {i}"}
                                    for i in range(30)])

    def walrus_score() -> float:
        with indexing_store.session() as session:
            hits = rc.keyword_hits(session, rc.build_plan(
                BIG, "walrus", rc.Filters(), 5, vector_search="exact", keyword_search="index",
                ef_search=100))
        return hits[0].rank

    sampled = walrus_score()
    with indexing_store.session() as session:
        count_terms(session, BIG)
    assert walrus_score() == pytest.approx(sampled)  # exact counts equal the full sample
    with indexing_store.session() as session:
        session.execute(text("UPDATE agent_terms SET df = 1 WHERE agent_id = :a "
                             "AND lexeme = 'walrus'"), {"a": BIG})
    assert walrus_score() > sampled + 1


def test_counts_go_with_the_index_and_with_the_agent(indexing_store: MemoryStore) -> None:
    bulk_insert(indexing_store, BIG, 25)
    bulk_insert(indexing_store, "agent-other", 25)
    run(indexing_store, "index_agents")
    assert _terms(indexing_store, BIG)[0] == 25
    indexing_store.forget_agent(BIG)
    assert _terms(indexing_store, BIG) == (None, {})
    assert _terms(indexing_store, "agent-other")[0] == 25
    with indexing_store.session() as session:
        session.execute(text("DELETE FROM memories WHERE agent_id = 'agent-other'"))
    record = run(indexing_store, "index_agents")
    assert record.stats["term_counts_deleted"] == 1
    assert _terms(indexing_store, "agent-other") == (None, {})


def test_term_counts_are_taken_again_only_when_stale(indexing_store: MemoryStore) -> None:
    """Counted again once the agent's size moved by more than 5 %, or after a day."""
    from memoryd.memory.maintenance.index_agents import RECOUNT_SHARE

    assert RECOUNT_SHARE == 0.05
    bulk_insert(indexing_store, BIG, 40)
    assert run(indexing_store, "index_agents").stats["agents_terms_counted"] == 1

    def rerun() -> tuple[int, int, int | None]:
        stats = run(indexing_store, "index_agents").stats
        return stats["agents_terms_counted"], stats["agents_terms_fresh"], \
            _terms(indexing_store, BIG)[0]

    assert rerun() == (0, 1, 40)
    bulk_insert(indexing_store, BIG, 2, prefix="extra")  # 42: 5 % more
    assert rerun() == (0, 1, 40)
    bulk_insert(indexing_store, BIG, 1, prefix="more")  # 43: past 5 %
    assert rerun() == (1, 0, 43)
    with indexing_store.session() as session:
        session.execute(text("UPDATE agent_term_stats SET counted_at = now() - "
                             "interval '25 hours' WHERE agent_id = :a"), {"a": BIG})
    assert rerun() == (1, 0, 43)
    assert rerun() == (0, 1, 43)


def test_agents_above_the_keyword_scan_line_get_their_lexemes_counted_without_an_index(
        store: MemoryStore, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent whose recalls use the indexed keyword side is counted even below the line
    of its own vector index; a smaller one is not."""
    from memoryd.memory import keywords

    monkeypatch.setattr(keywords, "KEYWORD_SCAN_MAX", 30)
    with override_settings(agent_index_min_memories="1000"):
        unindexed = MemoryStore(pg_url)
    try:
        bulk_insert(unindexed, BIG, 40)
        bulk_insert(unindexed, SMALL, 30)
        record = run(unindexed, "index_agents")
        assert record.stats["agents_indexed"] == 0
        assert record.stats["agents_terms_counted"] == 1
        assert _terms(unindexed, BIG)[0] == 40
        assert _terms(unindexed, SMALL) == (None, {})
    finally:
        unindexed.close()


def test_an_agent_with_its_own_index_is_searched_through_it_below_the_exact_threshold(
        store: MemoryStore, pg_url: str) -> None:
    """Reading every row of a mid-sized agent costs more than walking its own graph: an
    agent with an index of its own takes the HNSW plan whatever its size; without one
    (before the job ran, or once its index is gone) the exact search."""
    with override_settings(agent_index_min_memories="20", recall_exact_threshold="1000"):
        mid = MemoryStore(pg_url)
    try:
        bulk_insert(mid, BIG, 25)

        def search() -> str:
            mid.own_indexes.clear()
            with mid.session() as session:
                return rc.plan(session, mid.agent_sizes, BIG, "note number 7", rc.Filters(),
                               30, ef_search=100,
                               has_own_index=mid.own_indexes.has).vector_search

        assert search() == "exact"
        run(mid, "index_agents")
        assert search() == "hnsw"
        hits = mid.recall(BIG, "note number 7", limit=5)
        assert len(hits) == 5 and all(h.memory.agent_id == BIG for h in hits)
        with mid.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(f'DROP INDEX "{index_name(BIG)}"'))
        assert search() == "exact"
    finally:
        mid.close()
