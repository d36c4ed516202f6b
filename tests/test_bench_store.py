"""Smoke test of the store-throughput benchmark (tiny N), and the guarantees of the
worker's batched ``memoryd.store`` path it measures (``MEMORYD_STORE_BATCH_SIZE``)."""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

# bench/ is not an installed package: make the repository root importable.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import store as bench_store  # noqa: E402
from memoryd.client import MemoryClient, Pending  # noqa: E402
from memoryd.errors import ValidationError  # noqa: E402
from memoryd.memory.store import MemoryStore  # noqa: E402
from memoryd.types import StoreResult  # noqa: E402

BATCH_DB = 5  # this file's own broker database


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


@pytest.mark.slow
def test_batched_stores_keep_per_task_results_errors_and_dedup(
        spawn_worker: Callable[..., Any], store: MemoryStore, redis_url: str) -> None:
    broker = redis_url.rsplit("/", 1)[0] + f"/{BATCH_DB}"
    raw = redis.Redis.from_url(broker)
    raw.flushdb()
    worker = spawn_worker(BATCH_DB, concurrency=2, queues="memory",
                          MEMORYD_STORE_BATCH_SIZE="8")
    worker.wait_ready()
    agent, other = f"batch-{uuid.uuid4()}", f"batch-{uuid.uuid4()}"
    contents = [f"batched fact {i:02d}: {uuid.uuid4()}" for i in range(30)]
    bare = Celery("memoryd-test-bare", broker=broker, backend=broker, set_as_current=False)
    bare.conf.update(accept_content=["json"], result_accept_content=["json"],
                     broker_connection_retry_on_startup=True)
    try:
        with MemoryClient(broker_url=broker, timeout=120.0) as client:
            handles = [client.store(agent if i % 2 else other, c, wait=False,
                                    session_id="s1", tags=["t"])
                       for i, c in enumerate(contents)]
            again = client.store(agent, contents[1], wait=False)  # a duplicate
            invalid = bare.send_task("memoryd.store", queue="memory",
                                     kwargs={"agent_id": "", "content": "no agent"})
            positional = bare.send_task("memoryd.store", queue="memory",
                                        args=[agent, "stored from positional arguments"])
            results = [h.get() for h in handles]
            assert isinstance(again, Pending)
            duplicate = again.get()
            with pytest.raises(ValidationError) as caught:
                invalid.get(timeout=120)
            assert caught.value.field == "agent_id"
            assert positional.get(timeout=120)["stored"] is True
    finally:
        bare.close()
    assert all(isinstance(r, StoreResult) and r.stored and not r.duplicate for r in results)
    assert len({r.id for r in results}) == 30
    assert duplicate.duplicate and duplicate.id == results[1].id
    with store.session() as session:
        from sqlalchemy import text

        stored = session.execute(text(
            "SELECT agent_id, count(*) FROM memories WHERE agent_id IN (:a, :b) "
            "GROUP BY agent_id"), {"a": agent, "b": other}).all()
    assert dict(stored) == {agent: 16, other: 15}
    assert {s.session_id: s.message_count for s in store.sessions(agent)} == {"s1": 15}
    # Every message acknowledged, none left behind. A message is acknowledged just after
    # its result is stored, so the last ack may trail the last result a little.
    deadline = time.monotonic() + 30
    while raw.hlen("unacked") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert raw.llen("memory") == 0 and raw.hlen("unacked") == 0
    raw.flushdb()
    raw.close()
