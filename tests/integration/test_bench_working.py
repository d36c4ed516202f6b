"""Smoke test of the working-memory benchmark (bench/working.py) at tiny sizes, so it
cannot rot: every section against a real worker, gateway, Redis and PostgreSQL, the
worker killed and Redis restarted mid-way, and the JSON report's shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import working as bench_working

pytestmark = pytest.mark.slow

TINY = ["--threads", "20", "--messages", "5", "--processes", "1,2", "--seconds", "0.5",
        "--lost-processes", "2", "--lost-updates", "10", "--lag-threads", "3",
        "--lag-messages", "2", "--sweep-interval", "0.5", "--kill-threads", "6",
        "--kill-messages", "4", "--lease", "5", "--context-memories", "20",
        "--context-queries", "5", "--redis-writers", "2", "--redis-updates", "30"]


def test_every_section_reports_its_figures_and_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "working.json"
    assert bench_working.main([*TINY, "--out", str(out)]) == 0

    report = json.loads(out.read_text())
    results = report["results"]
    assert set(results) == set(bench_working.SECTIONS)

    for callers in ("1", "2"):
        for path in bench_working.PATHS:
            step = results["latency"]["steps"][callers][path]
            assert step["errors"] == 0, step["error_types"]
            for op in ("get", "update"):
                assert 0 < step[op]["p50"] <= step[op]["p95"] <= step[op]["p99"]
            assert step["ops_per_s"] > 0

    lost = results["lost"]
    assert lost["acknowledged"] == lost["expected"] == 20
    assert (lost["counter"], lost["version"], lost["messages_numbered"]) == (20, 20, 20)
    assert (lost["lost_messages"], lost["doubled_messages"]) == (0, 0)

    lag = results["lag"]
    assert lag["promoted_threads"] == 3 and lag["lag_ms"]["n"] == 3
    assert (lag["lost"], lag["doubled"]) == (0, 0)

    kill = results["kill"]
    assert kill["ledger_rows"] == kill["messages"] == 24
    assert (kill["lost"], kill["doubled"]) == (0, 0)

    restart = results["redis"]
    assert restart["acknowledged"] == 60 and restart["given_up"] == 0
    assert (restart["lost"], restart["doubled"], restart["counter_mismatch"]) == (0, 0, 0)

    context = results["context"]
    assert context["with_thread"]["n"] == context["without_thread"]["n"] == 5
    assert context["p95_ratio"] > 0

    memory = results["memory"]
    assert memory["bytes_per_thread"] > 0
    assert {"meta", "msgs", "vars"} <= set(memory["one_thread_keys"])
