"""Smoke test of the maintenance-at-scale benchmark on a tiny store (2,000 memories):
every job and its bare statement run, change the same rows, and are reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# bench/ is not an installed package: make the repository root importable however
# pytest was started.
from bench import maintenance


def test_expected_rows_shape() -> None:
    expected = maintenance.expected_rows(2000)
    assert expected == {"consolidate": 180, "evict": 200, "expire": 200}


@pytest.mark.slow
def test_maintenance_benchmark_end_to_end(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCH_NO_PROGRESS", "1")
    out, chart = tmp_path / "out" / "maintenance.json", tmp_path / "out" / "maintenance.png"
    assert maintenance.main(["--scale", "2000", "--out", str(out), "--chart", str(chart)]) == 0

    report = json.loads(out.read_text())
    assert chart.read_bytes().startswith(b"\x89PNG")
    assert report["scale"] == 2000
    assert report["seed"]["agents"] == 2
    assert set(report["results"]) == {"consolidate", "evict", "expire", "deduplicate"}
    expected = {**report["expected_rows"], "deduplicate": 200}
    for job, result in report["results"].items():
        assert result["rows_changed"] > 0, job
        assert result["rows_changed"] == result["bare_rows_changed"] == expected[job], job
        assert result["same_result"], job
        assert result["ratio"] is not None and result["ratio"] > 0, job
        assert result["seconds"] > 0 and result["bare_seconds"] > 0, job
        assert 0 < result["peak_rss_mb"] < 1000, job
        assert isinstance(result["meets_targets"], bool)
    # The decay pass only changes confidence: heap-only updates, not index re-inserts.
    assert report["results"]["consolidate"]["hot_update_share"] is not None
