"""Smoke test of the gateway benchmark (bench/gateway.py) on a tiny store, so it cannot
rot: a real worker and gateway, both paths at two concurrency levels, the JSON report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import gateway as bench_gateway

pytestmark = pytest.mark.slow


def test_gateway_benchmark_measures_both_paths_at_each_concurrency(tmp_path: Path) -> None:
    out = tmp_path / "gateway.json"
    argv = ["--scale", "300", "--queries", "20", "--concurrency", "1,4", "--out", str(out)]
    assert bench_gateway.main(argv) == 0

    report = json.loads(out.read_text())
    assert set(report["results"]) == {"big (30)", "typical (15)"}
    for block in report["results"].values():
        for level in ("1", "4"):
            for path in ("client", "http"):
                stats = block[level][path]
                assert stats["errors"] == 0
                assert stats["n"] == 20
                assert 0 < stats["p50"] <= stats["p95"] <= stats["p99"]
                assert stats["recalls_per_s"] > 0
