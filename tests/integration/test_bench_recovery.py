"""Smoke test of the crash-recovery benchmark (bench/recovery.py), so it cannot rot: one
trial on Redis with a short visibility timeout, the kill, the count of stores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import recovery

pytestmark = pytest.mark.slow


def test_recovery_benchmark_kills_a_worker_and_every_store_lands_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORYD_VISIBILITY_TIMEOUT_S", "3")  # the workers inherit it
    out = tmp_path / "recovery.json"
    assert recovery.main(["--trials", "1", "--no-rabbitmq", "--out", str(out)]) == 0
    [run] = json.loads(out.read_text())["results"]["redis"]
    assert run["landed"] == run["stores"] == run["distinct_results"] == recovery.STORES
    assert 0 < run["recovered_s"] < 3 + 1 + 2  # the lease, one sweep, slack
