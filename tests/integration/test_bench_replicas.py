"""Smoke test of the replica benchmark (bench/replicas.py) at a tiny scale, so it cannot
rot: primary, standby and Redis started, recall timed on both, the mixed run checked."""

from __future__ import annotations

import json
from pathlib import Path

from bench import replicas as bench_replicas


def test_the_replica_benchmark_runs_small_and_misses_no_own_write(tmp_path: Path) -> None:
    out = tmp_path / "replicas.json"
    argv = ["--agents", "3", "--per-agent", "20", "--calls", "60", "--queries", "10",
            "--out", str(out)]
    assert bench_replicas.main(argv) == 0

    report = json.loads(out.read_text())
    assert report["commit"] and report["machine"]["cpus"]
    for target in ("primary", "replica"):
        stats = report["recall_ms"][target]
        assert stats["n"] == 10 and 0 < stats["p50"] <= stats["p95"]
    # Every timed replica recall was served by the standby, none fell back.
    assert sum(report["recall_served"].values()) == 10
    assert not [k for k in report["recall_served"] if k.startswith("primary")]
    mixed = report["mixed"]
    assert mixed["calls"] == 60 and mixed["stores"] + mixed["recalls_checked"] == 60
    assert mixed["missed_own_writes"] == {"get": 0, "list": 0}
    assert sum(mixed["served"].values()) == 3 * mixed["recalls_checked"]
