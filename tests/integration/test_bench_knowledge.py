"""The changing-knowledge benchmark end to end at a tiny size: stored through the real
store with backdated ``created_at``, asked, every scheduled maintenance job run for its
agent, asked again; the report's figures agree with its own per-question rows."""

from __future__ import annotations

import json
import statistics
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

# bench/ is not an installed package: make the repository root importable however
# pytest was started.
from bench import knowledge
from memoryd.db.engine import normalize_url

METRICS = ("current_at_1", "replaced_in_top3_unmarked")


def _check_pass(block: dict[str, Any], rows: list[dict[str, Any]], people: int) -> None:
    """One pass's figures: shares in [0, 1] that are the means of its own rows."""
    for name in METRICS:
        share = block[name]
        assert isinstance(share, float) and 0.0 <= share <= 1.0, name
        assert share == pytest.approx(statistics.fmean(bool(r[name]) for r in rows)), name
    by_kind = block["by_kind"]
    assert isinstance(by_kind, dict) and len(by_kind) == people
    assert all(one["n"] == 1 for one in by_kind.values())
    for row in rows:
        assert row["current_at_1"] == (row["current_rank"] == 1)
        rank = row["replaced_rank"]
        assert row["replaced_in_top3_unmarked"] == (isinstance(rank, int) and rank <= 3)
    not_live = block["not_live_by_role"]
    assert isinstance(not_live, dict) and set(not_live) == set(knowledge.ROLES)
    assert block["false_supersessions"] >= not_live["additive"] + not_live["distractor"]
    assert 0 <= block["old_values_superseded"] <= not_live["old"]
    assert 0 <= block["versions_lost"] <= not_live["old"] <= people


@pytest.mark.slow
def test_the_knowledge_benchmark_runs_end_to_end(tmp_path: Path, pg_url: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCH_NO_PROGRESS", "1")
    out = tmp_path / "out" / "knowledge.json"
    assert knowledge.main(["--people", "8", "--phrasings", "tune", "--seed", "4",
                           "--out", str(out), "--database-url", pg_url]) == 0

    report = json.loads(out.read_text())
    assert (report["people"], report["questions"], report["memories"]) == (8, 8, 48)
    assert report["phrasings"] == "tune" and len(report["kinds"]) == 8
    for mode in ("without_judge", "with_judge"):
        assert report["store_ms"][mode]["calls"] == 48
        assert 0 < report["store_ms"][mode]["p50"] <= report["store_ms"][mode]["p95"]
    assert report["judge"] == "auto" and report["review_queue"] >= 0
    assert [r["calls"] for r in report["recall_ms"].values()] == [8, 8]
    assert [j["job"] for j in report["maintenance"]] == knowledge.scheduled_jobs()
    assert all(j["status"] == "ok" for j in report["maintenance"])
    rows = report["per_question"]
    assert len(rows) == 8
    _check_pass(report["before_maintenance"], [r["before"] for r in rows], 8)
    _check_pass(report["after_maintenance"], [r["after"] for r in rows], 8)
    # Right after the stores the judge has replaced old values only: nothing is lost,
    # and every memory but an old value is live.
    before = report["before_maintenance"]
    assert before["versions_lost"] == 0
    assert before["old_values_superseded"] == before["not_live_by_role"]["old"] > 0
    assert {role: n for role, n in before["not_live_by_role"].items() if role != "old"} == {
        role: 0 for role in knowledge.ROLES if role != "old"}

    # The benchmark's agent is gone from the database afterwards.
    engine = create_engine(normalize_url(pg_url))
    try:
        with engine.connect() as conn:
            left = conn.execute(text("SELECT count(*) FROM memories "
                                     "WHERE agent_id LIKE 'knowledge-%'")).scalar_one()
    finally:
        engine.dispose()
    assert left == 0


def test_the_benchmarks_data_is_the_same_for_a_seed_and_names_one_memory_per_answer() -> None:
    now = datetime(2026, 6, 1, tzinfo=UTC)
    data = knowledge.generate(8, seed=4, which="tune", now=now)
    assert data == knowledge.generate(8, seed=4, which="tune", now=now)
    for q in data.questions:
        holding = [f for f in data.facts if q.current in f.content]
        assert holding == [data.facts[q.new_fact]]
