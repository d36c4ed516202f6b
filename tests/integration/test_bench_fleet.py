"""Smoke test of the fleet benchmark (bench/fleet.py) on a tiny store, so the benchmark
cannot rot: caller processes through the default worker setup, the mix, the CPU profile
and the JSON / PNG reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import fleet


def test_the_steps_are_the_powers_of_two_up_to_the_last_caller_count() -> None:
    assert fleet.steps_of(fleet.parse_args(["--callers", "16"])) == [1, 2, 4, 8, 16]
    assert fleet.steps_of(fleet.parse_args(["--steps", "1,3"])) == [1, 3]


@pytest.mark.slow
def test_fleet_benchmark_end_to_end(tmp_path: Path) -> None:
    out, chart = tmp_path / "fleet.json", tmp_path / "fleet.png"
    argv = ["--store", "small", "--agents", "2", "--per-agent", "20", "--steps", "1,2",
            "--seconds", "2", "--mix", "--profile", "--out", str(out), "--chart", str(chart)]
    assert fleet.main(argv) == 0

    report = json.loads(out.read_text())
    assert chart.read_bytes().startswith(b"\x89PNG")
    assert report["machine"]["cpus"] >= 1 and report["commit"]
    for mode in ("recall", "mix"):
        steps = report[mode]
        assert [s["callers"] for s in steps] == [1, 2]
        for step in steps:
            assert step["calls"] > 0 and step["recall"]["errors"] == 0
            assert 0 < step["recall"]["p50"] <= step["recall"]["p95"] <= step["recall"]["p99"]
            # The memory worker's consumers did the work: no prefork main process.
            cpu = step["cpu_ms_per_call"]
            assert cpu["worker pool"] > 0 and cpu["callers"] > 0
            assert cpu["worker main"] < cpu["worker pool"]
    assert any("store" in step for step in report["mix"])
