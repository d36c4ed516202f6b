"""Smoke test of the recall-latency benchmark (bench/recall.py, bench/scale.py) on a
tiny store, so the benchmark cannot rot: seeding, reuse with --keep, the in-process
and floor measurements, EXPLAIN, and the JSON / PNG reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import recall as bench_recall
from bench import scale


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


def test_large_agent_keyword_side_finds_the_best_idf_scores(store: object) -> None:
    """The large-agent keyword retriever (exact stems: a bounded set of multi-term and
    rare-term matches, then k memories holding the rarest term) scores memories by the
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
