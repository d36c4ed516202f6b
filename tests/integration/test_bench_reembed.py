"""Smoke test of the re-embedding benchmark (tiny N). What the ``reembed`` job
guarantees is tested in test_reembed.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import reembed as bench_reembed


def test_the_benchmark_texts_are_distinct() -> None:
    assert len(set(bench_reembed.texts(300))) == 300


@pytest.mark.slow
def test_reembed_benchmark_moves_every_memory_while_recalling(tmp_path: Path) -> None:
    out = tmp_path / "reembed.json"
    assert bench_reembed.main(["--n", "60", "--agents", "3", "--out", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert results["memories"] == results["reembedded"] == 60
    assert results["recalls_during"] >= 1 and results["recall_p95_ms"] > 0
