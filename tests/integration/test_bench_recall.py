"""Smoke test of the recall-latency benchmark (bench/recall.py, bench/scale.py) on a
tiny store, so the benchmark cannot rot: seeding, reuse with --keep, the in-process
and floor measurements, EXPLAIN, the size sweep and the neighbour case, and the JSON /
PNG reports."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import recall as bench_recall
from bench import scale
from memoryd.config import reset_settings
from tests.support.service_user import opened_for_service_user


def test_sentences_are_deterministic_distinct_and_unlike_queries() -> None:
    first = scale.sentences(500, seed=5)
    assert first == scale.sentences(500, seed=5)
    assert len(set(first)) == 500
    assert first != scale.sentences(500, seed=6)
    assert not set(first) & set(scale.sentences(200, seed=6, exclude=set(first)))
    questions = scale.queries(50)
    assert questions == scale.queries(50)
    assert all(q.endswith("?") for q in questions)
    assert not set(questions) & set(first)


def test_layout_and_percentiles() -> None:
    assert bench_recall.layout(1_000_000) == {
        "total": 1_000_000, "agents": 1000, "big_agent_size": 100_000,
        "typical_agent_size": 1000}
    stats = bench_recall.percentiles([float(i) for i in range(1, 101)])
    assert stats["n"] == 100
    assert stats["p50"] == pytest.approx(50.5)
    assert stats["p99"] <= stats["max"] == 100.0


@pytest.mark.slow
def test_recall_benchmark_end_to_end(tmp_path: Path) -> None:
    opened_for_service_user(tmp_path)  # the seeded cluster's server lives below it
    out, chart, keep = tmp_path / "recall.json", tmp_path / "recall.png", tmp_path / "cluster"
    argv = ["--scale", "300", "--queries", "20", "--no-client", "--keep", str(keep),
            "--out", str(out), "--chart", str(chart)]
    assert bench_recall.main(argv) == 0

    report = json.loads(out.read_text())
    assert chart.read_bytes().startswith(b"\x89PNG")
    seed = report["seed"]
    assert (seed["total"], seed["agents"]) == (300, 3)
    assert seed["big_agent_size"] + seed["typical_agent_size"] + seed["background_rows"] == 300
    assert set(report["results"]) == {"big (30)", "typical (15)"}
    # The hourly index_agents job ran; no agent this small gets an index of its own.
    assert report["index_agents"]["status"] == "ok"
    assert report["index_agents"]["stats"]["agents_indexed"] == 0
    for block in report["results"].values():
        latency = block["latency_ms"]
        assert set(latency) == {"in-process", "floor embed", "floor sql (hnsw)",
                                "floor (embed+sql)"}
        for stats in latency.values():
            assert stats["n"] == 20
            assert 0 < stats["p50"] <= stats["p95"] <= stats["p99"]
        assert block["plan"]["plan"] and block["plan"]["large_agent"] is False
        assert set(block["breakdown_ms"]) >= {"embed", "candidates", "touch"}
        cover = block["keyword_coverage"]
        assert cover["queries"] > 0 and 0 < cover["min_share"] <= cover["mean_share"] <= 1

    # --keep: the second run reuses the seeded cluster instead of seeding again.
    assert (keep / scale.SEED_FILE).exists()
    assert bench_recall.main(argv) == 0
    assert json.loads(out.read_text())["seed"]["created_at"] == seed["created_at"]
    info = scale.read_info(keep)
    assert info is not None and info.total == 300
    with scale.seeded_cluster(keep, total=300, agents=3, big_agent_size=30,
                              typical_agent_size=15, show=False,
                              serve_options=bench_recall.SMALL_SERVER) as (url, _):
        from sqlalchemy import create_engine, text

        engine = create_engine(url)
        try:
            with engine.connect() as conn:
                counts = dict(conn.execute(text(
                    "SELECT agent_id, count(*) FROM memories GROUP BY agent_id")).all())
        finally:
            engine.dispose()
    assert sum(counts.values()) == 300
    assert counts[scale.BIG_AGENT] == 30 and counts[scale.TYPICAL_AGENT] == 15


def test_sweep_sizes_add_the_reference_and_skip_what_the_store_cannot_hold() -> None:
    sizes, skipped = bench_recall.sweep_sizes([5000, 100, 2000, 100], total=3000)
    assert sizes == [100, 1000, 2000]
    assert [item["size"] for item in skipped] == [5000]
    assert "3,000" in skipped[0]["note"]
    args = bench_recall.parse_args(["--sweep-sizes", "100,2000", "--neighbour-size", "50"])
    assert (args.sweep, args.sweep_sizes) == (True, (100, 2000))
    assert (args.neighbour, args.neighbour_size) == (True, 50)
    plain = bench_recall.parse_args([])
    assert not plain.sweep and not plain.neighbour
    assert plain.sweep_sizes == bench_recall.SWEEP_SIZES
    with pytest.raises(SystemExit):
        bench_recall.parse_args(["--sweep-sizes", "100,,0"])


def counts_and_indexes(keep: Path) -> tuple[dict[str, int], set[str]]:
    """Memories per agent in the kept cluster, and the agents' own indexes there."""
    from sqlalchemy import create_engine, text

    from memoryd.memory.agent_indexes import existing_indexes

    with scale.seeded_cluster(keep, **bench_recall.layout(3000), show=False,
                              serve_options=bench_recall.SMALL_SERVER) as (url, _):
        engine = create_engine(url)
        try:
            with engine.connect() as conn:
                counts = dict(conn.execute(text(
                    "SELECT agent_id, count(*) FROM memories GROUP BY agent_id")).all())
                indexes = set(existing_indexes(conn))
        finally:
            engine.dispose()
    return counts, indexes


@pytest.fixture
def index_line(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """Agents of 1,500 memories get an index of their own (``index_agents``)."""
    monkeypatch.setenv("MEMORYD_AGENT_INDEX_MIN_MEMORIES", "1500")
    reset_settings()
    yield 1500
    monkeypatch.undo()
    reset_settings()


@pytest.mark.slow
def test_size_sweep_and_neighbour_case_end_to_end(tmp_path: Path, index_line: int) -> None:
    from memoryd.memory.agent_indexes import index_name

    opened_for_service_user(tmp_path)  # the seeded cluster's server lives below it
    out, chart, keep = tmp_path / "recall.json", tmp_path / "recall.png", tmp_path / "cluster"
    argv = ["--scale", "3000", "--queries", "10", "--no-client", "--keep", str(keep),
            "--out", str(out), "--chart", str(chart),
            "--sweep", "--sweep-sizes", "100,1000,2000,5000"]
    assert bench_recall.main([*argv, "--neighbour", "--neighbour-size", "2000"]) == 0
    report = json.loads(out.read_text())
    assert chart.read_bytes().startswith(b"\x89PNG")
    assert report["args"]["sweep_sizes"] == [100, 1000, 2000, 5000]

    sweep = report["sweep"]
    assert (sweep["reference_size"], sweep["target_ratio"]) == (1000, 1.5)
    assert [item["size"] for item in sweep["skipped"]] == [5000]
    rows = {row["size"]: row for row in sweep["agents"]}
    assert set(rows) == {100, 1000, 2000}
    assert rows[1000]["p95_ratio"] == 1.0
    for size, row in rows.items():
        assert row["agent"] == scale.sweep_agent(size) and row["added"]
        assert row["memories"] == size
        stats = row["latency_ms"]
        assert stats["n"] == 10 and 0 < stats["p50"] <= stats["p95"] <= stats["p99"]
        assert row["p95_ratio"] == pytest.approx(stats["p95"] / rows[1000]["latency_ms"]["p95"],
                                                 abs=1e-3)
        assert row["meets_target"] == (row["p95_ratio"] <= 1.5)
        assert row["own_index"] == (size >= index_line)

    case = report["neighbour"]
    assert (case["a_memories"], case["b_memories"], case["b_own_index"]) == (1000, 2000, True)
    assert case["index_agents"]["stats"]["built"] == 1
    for key in ("before", "after"):
        stats = case[key]["latency_ms"]
        assert stats["n"] == 10 and 0 < stats["p50"] <= stats["p95"]
    assert case["p95_ratio"] == pytest.approx(
        case["after"]["latency_ms"]["p95"] / case["before"]["latency_ms"]["p95"], abs=1e-3)
    assert case["meets_target"] == (case["p95_ratio"] <= 1.2)

    # The kept cluster holds each swept agent at its size, and neither neighbour agent
    # nor the arriving one's index.
    counts, indexes = counts_and_indexes(keep)
    assert {size: counts.get(scale.sweep_agent(size)) for size in rows} == {
        100: 100, 1000: 1000, 2000: 2000}
    assert scale.NEIGHBOUR_A not in counts and scale.NEIGHBOUR_B not in counts
    assert index_name(scale.NEIGHBOUR_B) not in indexes
    assert index_name(scale.sweep_agent(2000)) in indexes

    # A second run finds the swept agents instead of storing them again.
    assert bench_recall.main(argv) == 0
    again = json.loads(out.read_text())
    assert "neighbour" not in again
    assert [(r["size"], r["added"], r["memories"]) for r in again["sweep"]["agents"]] == [
        (100, False, 100), (1000, False, 1000), (2000, False, 2000)]
    assert counts_and_indexes(keep)[0] == counts


def test_large_agent_keyword_side_finds_the_best_idf_scores(store: object) -> None:
    """The large-agent keyword retriever (exact stems: a bounded set of multi-term and
    rare-term matches; if fewer than k, k memories holding the rarest term) scores memories by the
    summed IDF of the query stems they hold, and finds the same top scores as scoring
    every memory; the reference here is computed in Python from each memory's lexemes."""
    import math

    from sqlalchemy import text

    from memoryd.memory import keywords
    from memoryd.memory import recall as rc
    from memoryd.memory.embeddings import to_pgvector
    from memoryd.memory.store import MemoryStore

    assert isinstance(store, MemoryStore)
    agent = "kw-agent"
    store.store_many(agent, [{"content": s} for s in scale.sentences(120, seed=21)])
    vector = to_pgvector(store.embedder.embed(["anything"])[0])
    with store.session() as session:
        docs = [set(r) for r in session.execute(text(
            "SELECT tsvector_to_array(tsv) FROM memories WHERE agent_id = :a"),
            {"a": agent}).scalars()]

    def reference(query: str) -> list[float]:
        with store.session() as session:
            stems = session.execute(text(
                "SELECT (tsvector_to_array(to_tsvector('english', :w)))[1:12]"),
                {"w": keywords.query_words(query)}).scalar_one()
        n = len(docs)
        idf = {t: math.log(1 + (n - df + 0.5) / (df + 0.5))
               for t in stems for df in [sum(t in d for d in docs)]}
        scores = (sum(idf[t] for t in stems if t in d) for d in docs)
        return sorted((round(x, 6) for x in scores if x > 0), reverse=True)

    def keyword_scores(query: str, k: int) -> list[float]:
        plan = rc.build_plan(agent, query, rc.Filters(), k, vector_search="hnsw",
                             keyword_search="index", ef_search=100)
        with store.session() as session:
            hits = rc.keyword_hits(session, plan)
            rows = rc.candidates(session, plan, vector, hits)
        return sorted((round(r.keyword_raw, 6) for r in rows
                       if r.keyword_rank is not None), reverse=True)

    for query in [*scale.queries(15, seed=3), "Alice", "pottery in Lisbon?"]:
        expected = reference(query)
        assert expected, query
        assert keyword_scores(query, 30) == expected[:30], query
        assert keyword_scores(query, 3) == expected[:3], query
