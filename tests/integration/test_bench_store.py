"""Smoke test of the store-throughput benchmark (tiny N). The guarantees of the
worker's batched store path it measures are tested in test_worker_batching.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import store as bench_store


def test_make_texts_is_deterministic_and_distinct() -> None:
    texts = bench_store.make_texts(500)
    assert texts == bench_store.make_texts(500)
    assert len(set(texts)) == 500
    assert all(8 <= len(t.split()) <= 30 for t in texts)


@pytest.mark.slow
def test_store_benchmark_end_to_end(tmp_path: Path) -> None:
    out, chart = tmp_path / "out" / "store.json", tmp_path / "out" / "store.png"
    assert bench_store.main(["--n", "30", "--batch", "10", "--agents", "3",
                             "--out", str(out), "--chart", str(chart)]) == 0
    report = json.loads(out.read_text())
    assert chart.read_bytes().startswith(b"\x89PNG")
    assert report["benchmark"] == "store"
    assert report["n"] == 30
    assert report["worker"]["concurrency"] == 2
    assert report["worker"]["store_batch_size"] == bench_store.DEFAULT_STORE_BATCH
    assert report["machine"]["cpus"] >= 1
    assert report["target"] == {"per_s": 250.0, "ratio_to_raw": 0.75}
    raw = report["raw_embedding"]
    assert raw["per_s"] > 0 and raw["batch_size"] in bench_store.RAW_BATCH_SIZES
    assert len(raw["passes_per_s"]) == 2 and raw["per_s"] == max(raw["passes_per_s"])
    assert set(raw["sweep_per_s"]) == {str(s) for s in bench_store.RAW_BATCH_SIZES}
    assert report["single"]["calls"] == 30 and report["single"]["stored"] == 30
    assert report["store_many"]["calls"] == 3 and report["store_many"]["stored"] == 30
    for block in (report["single"], report["store_many"]):
        assert block["per_s"] > 0 and block["seconds"] > 0
        assert block["ratio_to_raw"] == pytest.approx(block["per_s"] / raw["per_s"], abs=0.01)
        assert isinstance(block["meets_target"], bool)
