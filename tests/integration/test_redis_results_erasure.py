"""What the result backend and the broker's Redis keep of an agent, on a real Redis
configured as ``memoryd up`` configures it: results that may hold contents expire within
minutes, an erasure deletes the results of the agent's tasks (and no other agent's), and
a rewrite leaves the append-only file with only what Redis still holds."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery.app.task import Context

from memoryd.broker import persistence
from memoryd.broker.redis_results import index_key
from memoryd.celery_config import CONTENT_RESULT_EXPIRES_S
from memoryd.config import Settings
from memoryd.embedded.redis import EmbeddedRedis
from memoryd.worker.app import create_app
from tests.support.service_user import opened_for_service_user


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    redis_server = EmbeddedRedis(
        opened_for_service_user(tmp_path_factory.mktemp("results-erasure")) / "redis")
    redis_server.start()
    yield redis_server
    redis_server.stop()


@pytest.fixture
def backend(server: EmbeddedRedis, tmp_path: Path) -> Iterator[Any]:
    app = create_app(Settings(data_dir=tmp_path, broker_url=server.url,
                              result_expires_s=3600))
    try:
        yield app.backend
    finally:
        app.close()


def _store(backend: Any, task: str, agent: str | None, value: Any) -> str:
    """A result as a worker stores it: with the request of the task that made it."""
    task_id = str(uuid.uuid4())
    request = Context(id=task_id, task=task, args=[],
                      kwargs={"agent_id": agent} if agent else {})
    backend.store_result(task_id, value, "SUCCESS", request=request)
    return task_id


def test_a_result_that_may_hold_contents_expires_within_minutes(
        backend: Any, server: EmbeddedRedis) -> None:
    client = redis.Redis.from_url(server.url)
    recall = _store(backend, "memoryd.recall", "agent-a", [{"content": "a diary"}])
    stored = _store(backend, "memoryd.store", "agent-a", {"id": "x", "stored": True})
    run = _store(backend, "memoryd.maintenance.expire", None, {"status": "ok"})
    ttl = {name: client.ttl(backend.get_key_for_task(task_id))
           for name, task_id in (("recall", recall), ("store", stored), ("run", run))}
    assert 0 < ttl["recall"] <= CONTENT_RESULT_EXPIRES_S
    assert 3500 < ttl["store"] <= 3600 and 3500 < ttl["run"] <= 3600


def test_erasing_an_agent_deletes_its_tasks_results_and_no_other_agents(
        backend: Any, server: EmbeddedRedis) -> None:
    client = redis.Redis.from_url(server.url)
    leaver, stayer = f"leaver-{uuid.uuid4()}", f"stayer-{uuid.uuid4()}"
    gone = [_store(backend, name, leaver, [{"content": "the leaver's diary"}])
            for name in ("memoryd.recall", "memoryd.get", "memoryd.maintenance.expire")]
    kept = _store(backend, "memoryd.recall", stayer, [{"content": "the stayer's notes"}])
    assert client.scard(index_key(leaver)) == 3
    assert leaver not in index_key(leaver)  # the set is named by the agent's hash
    assert backend.forget_agent(leaver) == 3
    assert [backend.get_task_meta(t)["status"] for t in gone] == ["PENDING"] * 3
    assert backend.get_task_meta(kept)["result"] == [{"content": "the stayer's notes"}]
    assert not client.exists(index_key(leaver))
    assert backend.forget_agent(leaver) == 0  # again: nothing left


def test_a_rewrite_leaves_the_append_only_file_with_only_what_redis_holds(
        server: EmbeddedRedis) -> None:
    client = redis.Redis.from_url(server.url)
    canary = f"canary{uuid.uuid4().hex}"
    client.set(f"held-{canary}", "kept")
    client.set("gone", canary)
    client.delete("gone")
    files = [p for p in server.data_dir.rglob("appendonly*") if p.is_file()]

    def holding(needle: str) -> bool:
        return any(needle.encode() in p.read_bytes() for p in files if p.exists())
    assert holding(f"held-{canary}") and holding(f"\r\n{canary}\r\n")  # the control
    deadline = time.monotonic() + 60
    while (answer := persistence.rewrite(client)) == persistence.BUSY:
        assert time.monotonic() < deadline, "a rewrite never ended"
        time.sleep(0.5)
    assert answer == persistence.STARTED
    while holding(f"\r\n{canary}\r\n"):
        assert time.monotonic() < deadline, "the deleted value stayed in the file"
        time.sleep(0.2)
    assert holding(f"held-{canary}")  # what Redis holds is kept
