"""Erasure reaches the copies memoryd keeps outside the database: the real embedded
Redis, configured as ``memoryd up`` configures it (append-only), a real worker, gateway
and Flower. An agent stores canaries, recalls them (once through the gateway, once by a
caller who never fetches the result), and is erased over HTTP; then the Redis data
directory's files, every process's log and Flower's task list and pages hold neither a
canary nor the agent's id."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from memoryd.config import Settings
from memoryd.embedded.redis import EmbeddedRedis
from memoryd.memory.store import MemoryStore
from memoryd.redaction import agent_digest
from memoryd.worker.app import create_app
from tests.support.flower import FlowerProcess, every_page, until
from tests.support.gateway import GatewayProcess, bearer, make_key
from tests.support.service_user import opened_for_service_user
from tests.support.workers import WorkerProcess, memoryd_env

pytestmark = pytest.mark.slow


class Stack:
    def __init__(self, redis: EmbeddedRedis, worker: WorkerProcess, gateway: GatewayProcess,
                 flower: FlowerProcess, logs: list[Path]) -> None:
        self.redis, self.worker, self.gateway, self.flower = redis, worker, gateway, flower
        self.logs = logs


@pytest.fixture
def stack(pg_url: str, tmp_path: Path) -> Iterator[Stack]:
    redis_server = EmbeddedRedis(opened_for_service_user(tmp_path) / "redis")
    env = memoryd_env(pg_url, redis_server.start())
    logs = [tmp_path / f"{name}.log" for name in ("worker", "gateway", "flower")]
    worker = WorkerProcess(env, logs[0], queues="memory", concurrency=1)
    gateway = GatewayProcess(env, logs[1])
    flower = FlowerProcess(env, logs[2])
    try:
        worker.wait_ready()
        gateway.wait_ready()
        flower.wait_ready()
        yield Stack(redis_server, worker, gateway, flower, logs)
    finally:
        flower.stop()
        gateway.stop()
        worker.stop()
        redis_server.stop()


def _files_holding(root: Path, *needles: str) -> list[str]:
    return [f"{path.name}: {needle}" for path in sorted(root.rglob("*")) if path.is_file()
            for needle in needles if needle.encode() in path.read_bytes()]


def _fill(http: httpx.Client, stack: Stack, agent: str, canary: str) -> str:
    """Canaries stored and recalled through the gateway, and a recall whose caller
    never fetched its result; that recall's task id."""
    for n in range(2):
        made = http.post("/memories", json={"content": f"The vault code is {canary} {n}.",
                                             "tags": [canary], "metadata": {"note": canary}})
        assert made.status_code == 201, made.text
    recalled = http.post("/recall", json={"query": f"vault code {canary}"})
    assert recalled.status_code == 200 and canary in recalled.text
    app = create_app(Settings(broker_url=stack.redis.url))
    try:
        gone = app.send_task("memoryd.recall", queue="memory",
                             kwargs={"agent_id": agent, "query": f"vault {canary}"})
        until(gone.ready, "the unfetched recall")
        assert canary in str(app.backend.get_task_meta(gone.id))  # its rows wait there
    finally:
        app.close()
    return str(gone.id)


def test_an_erased_agent_leaves_no_copy_in_redis_files_logs_or_flower(
        stack: Stack, store: MemoryStore) -> None:
    canary, agent = f"canary{uuid.uuid4().hex}", f"leaver-{uuid.uuid4().hex[:12]}"
    http = httpx.Client(base_url=f"{stack.gateway.url}/v1/agents/{agent}", timeout=120,
                        headers=bearer(make_key(store, agents=(agent,))))
    admin = bearer(make_key(store, prefixes=("",), admin=True))

    def flower_saw_a_task() -> bool:
        http.get("/sessions")
        return any(t.get("name") == "memoryd.sessions"
                   for t in stack.flower.tasks().values())
    until(flower_saw_a_task, "flower to receive task events")
    unfetched = _fill(http, stack, agent, canary)
    data_dir = stack.redis.data_dir
    assert _files_holding(data_dir, canary, agent)  # the control: the log has them now

    erased = httpx.delete(f"{stack.gateway.url}/v1/agents/{agent}", headers=admin,
                          timeout=180)
    assert erased.status_code == 200, erased.text
    assert erased.json()["complete"] is True and erased.json()["agent_id"] == agent
    http.close()
    # The rewrite follows the erasure once its message is acknowledged.
    until(lambda: not _files_holding(data_dir, canary, agent), "the AOF rewrite")
    app = create_app(Settings(broker_url=stack.redis.url))
    try:
        assert app.backend.get_task_meta(unfetched)["status"] == "PENDING"  # deleted
    finally:
        app.close()
    pages = every_page(stack.flower)
    until(lambda: any(t.get("name") == "memoryd.admin.compact_broker"
                       and t.get("state") == "SUCCESS" for t in stack.flower.tasks().values()),
           "flower to see the rewrite")
    for process in (stack.flower, stack.gateway, stack.worker):
        process.stop()
    logs = "".join(path.read_text(errors="replace") for path in stack.logs)
    assert agent_digest(agent) in logs  # the worker names it, by its hash
    leaks = [f"flower {page.url.path}" for page in pages
             if canary in page.text or agent in page.text]
    leaks += [path.name for path in stack.logs for needle in (canary, agent)
              if needle in path.read_text(errors="replace")]
    leaks += _files_holding(data_dir, canary, agent)
    assert leaks == []
