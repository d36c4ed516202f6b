"""The worker's batched ``memoryd.store`` path (``MEMORYD_STORE_BATCH_SIZE``): each
message keeps its own result, error and dedup, and every message is acknowledged."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery
from sqlalchemy import text

from memoryd.client import MemoryClient, Pending
from memoryd.errors import ValidationError
from memoryd.memory.store import MemoryStore
from memoryd.types import StoreResult

BATCH_DB = 5  # this file's own broker database


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
