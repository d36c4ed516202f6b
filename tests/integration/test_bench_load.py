"""Smoke test of the load benchmark (bench/load.py) on a tiny store, so it cannot rot:
both phases, the maintenance windows from the audit, the exact count of stores, the
JSON and PNG reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import load

pytestmark = pytest.mark.slow


def test_load_benchmark_runs_both_phases_and_counts_every_store(tmp_path: Path) -> None:
    out, chart = tmp_path / "load.json", tmp_path / "load.png"
    argv = ["--scale", "300", "--agents", "3", "--callers", "4", "--seconds", "3",
            "--out", str(out), "--chart", str(chart)]
    assert load.main(argv) == 0
    report = json.loads(out.read_text())
    assert chart.read_bytes().startswith(b"\x89PNG")
    assert report["agents"] == 3
    for phase in ("idle", "maintenance_phase"):
        assert report[phase]["recall"]["n"] > 0 and report[phase]["recall"]["errors"] == 0
        assert report[phase]["store"]["errors"] == 0
    assert {r["job"] for r in report["maintenance_runs"]} == set(load.MAINTENANCE_JOBS)
    stores = report["stores"]
    assert stores["sent"] == stores["unique_sent"] > 0
    assert stores["lost"] == 0 and stores["doubled"] == 0
