"""Flower as ``memoryd up`` runs it (``memoryd.cli.flower_monitor``) is a monitor only:
the real Flower on a Redis of its own, and a real worker. Every route Flower has that is
not a page or a read API is refused, whatever Flower version adds; no route answers
without the login; a stored result, a worker's reserved and scheduled tasks and a
sender's whole arguments never reach its pages."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from flower.urls import handlers as flower_routes

from memoryd.cli.flower_monitor import SHOWN
from memoryd.config import Settings
from memoryd.embedded.redis import EmbeddedRedis
from memoryd.worker.app import create_app
from tests.support.flower import FlowerProcess, until
from tests.support.service_user import opened_for_service_user
from tests.support.workers import WorkerProcess, memoryd_env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    broker_dir = opened_for_service_user(tmp_path_factory.mktemp("flower-broker"))
    server = EmbeddedRedis(broker_dir / "redis")
    url = server.start()
    yield url
    server.stop()


@pytest.fixture(scope="module")
def flower(broker: str, pg_url: str, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[FlowerProcess]:
    process = FlowerProcess(memoryd_env(pg_url, broker),
                            tmp_path_factory.mktemp("flower") / "flower.log")
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


def _refused_routes() -> list[str]:
    """Every route of the installed Flower that is not a page or a read API, as a path:
    a route a later Flower adds is tested (and refused) without a change here."""
    paths = []
    for route in flower_routes:
        pattern, handler = ((route.regex.pattern, route.handler_class)
                            if hasattr(route, "regex") else route[:2])
        if handler not in SHOWN:
            paths.append(re.sub(r"\(\.[*+]\)", "memoryd.recall", pattern).rstrip("$"))
    return paths


def test_every_control_route_of_flower_is_refused_and_sends_nothing(
        flower: FlowerProcess, broker: str) -> None:
    routes = _refused_routes()
    for expected in ("/api/task/apply/", "/api/task/send-task/", "/api/task/result/",
                     "/api/task/revoke/", "/api/task/abort/", "/api/task/rate-limit/",
                     "/api/task/timeout/", "/api/worker/shutdown/",
                     "/api/worker/pool/autoscale/", "/api/worker/queue/add-consumer/"):
        assert any(path.startswith(expected) for path in routes), expected
    recall = {"kwargs": {"agent_id": "someone-else", "query": "everything"}}
    for path in routes:
        for method in ("POST", "GET"):
            answer = flower.request(method, path, json=recall if method == "POST" else None)
            assert answer.status_code == 403, (method, path, answer.text[:200])
            assert flower.request(method, path, login=False).status_code == 401, path
    raw = redis.Redis.from_url(broker)
    assert (raw.llen("memory"), raw.llen("maintenance")) == (0, 0)  # no task was sent


def test_no_route_answers_without_the_login(flower: FlowerProcess) -> None:
    for path in ("/metrics", "/healthcheck", "/", "/tasks", "/api/tasks", "/api/workers",
                 "/api/task/info/x", "/static/css/flower.css", "/no-such-page"):
        answer = flower.request("GET", path, login=False)
        assert answer.status_code == 401, path
        assert answer.headers["WWW-Authenticate"].startswith("Basic")
        wrong = flower.request("GET", path, login=False, auth=("operator", "wrong"))
        assert wrong.status_code == 401, path
    assert flower.request("GET", "/metrics").status_code == 200
    assert flower.request("GET", "/healthcheck").text == "OK"


def test_a_stored_result_is_not_shown(flower: FlowerProcess, broker: str,
                                      tmp_path: Path) -> None:
    """A recall whose caller never fetched it (a 504, ``wait=False``, a crash) leaves its
    rows in the result backend: Flower does not read them out."""
    canary = f"canary{uuid.uuid4().hex}"
    app = create_app(Settings(data_dir=tmp_path, broker_url=broker))
    task_id = str(uuid.uuid4())
    try:
        app.backend.store_result(task_id, [{"memory": {"content": canary}}], "SUCCESS")
        assert canary in str(app.backend.get_task_meta(task_id))  # the control: it is there
    finally:
        app.close()
    answer = flower.request("GET", f"/api/task/result/{task_id}")
    assert answer.status_code == 403 and canary not in answer.text


def test_a_workers_scheduled_task_and_a_senders_whole_arguments_stay_out_of_flower(
        flower: FlowerProcess, broker: str, pg_url: str, tmp_path: Path) -> None:
    """A message whose sender did not summarise its arguments, held by a worker until
    its countdown: Celery reports it whole to whoever inspects the worker, and its
    task-received event would carry the sender's repr; Flower shows neither."""
    canary, agent = f"canary{uuid.uuid4().hex}", f"agent-{uuid.uuid4()}"
    worker = WorkerProcess(memoryd_env(pg_url, broker), tmp_path / "worker.log",
                           queues="memory", concurrency=1)
    app = create_app(Settings(data_dir=tmp_path, broker_url=broker))
    try:
        worker.wait_ready()
        # Flower sees events from when it connected: wait until it saw one.
        def flower_saw_a_task() -> bool:
            app.send_task("memoryd.sessions", kwargs={"agent_id": "warm-up"}, queue="memory")
            time.sleep(1)
            return any(t.get("name") == "memoryd.sessions" for t in flower.tasks().values())
        until(flower_saw_a_task, "flower to receive task events")
        sent = app.send_task("memoryd.store", queue="memory", countdown=600,
                             kwargs={"agent_id": agent, "content": f"the code is {canary}"})

        def scheduled() -> dict[str, Any]:
            found = app.control.inspect(timeout=2.0).scheduled() or {}
            return {node: tasks for node, tasks in found.items() if canary in str(tasks)}
        (node,) = until(scheduled, "the worker to hold the scheduled store")  # the control
        task = until(lambda: flower.tasks().get(sent.id), "flower to list the store")
        pages = [flower.get("/api/workers", workername=node, refresh=1),
                 flower.get(f"/worker/{node}"), flower.get("/api/tasks"),
                 flower.get(f"/task/{sent.id}"), flower.get(f"/api/task/info/{sent.id}")]
    finally:
        app.close()
        worker.stop()
    assert all(page.status_code == 200 for page in pages), [p.status_code for p in pages]
    assert "<" in str(task["kwargs"]) and "agent_sha256" in str(task["kwargs"])
    leaks = [page.url.path for page in pages if canary in page.text or agent in page.text]
    assert leaks == []


def test_a_task_known_only_by_its_senders_event_shows_none_of_its_arguments(
        flower: FlowerProcess, broker: str, tmp_path: Path) -> None:
    """A message no worker has received yet (here, on a queue nobody consumes): Flower
    knows it from the task-sent event alone, whose arguments are the sender's own repr.
    Flower lists the task and keeps those out; a late task-sent event would otherwise be
    merged over the worker's summary too."""
    canary, agent = f"canary{uuid.uuid4().hex}", f"agent-{uuid.uuid4()}"
    app = create_app(Settings(data_dir=tmp_path, broker_url=broker))
    try:
        def listed() -> dict[str, Any] | None:
            sent = app.send_task("memoryd.store", queue=f"nobody-{uuid.uuid4().hex}",
                                 kwargs={"agent_id": agent, "content": f"the code is {canary}"})
            time.sleep(1)
            return flower.tasks().get(sent.id)
        task = until(listed, "flower to list a task from its task-sent event alone")
        pages = [flower.get("/api/tasks"), flower.get(f"/task/{task['uuid']}"),
                 flower.get(f"/api/task/info/{task['uuid']}")]
    finally:
        app.close()
    assert task["name"] == "memoryd.store"
    assert all(page.status_code == 200 for page in pages), [p.status_code for p in pages]
    assert [page.url.path for page in pages if canary in page.text or agent in page.text] == []
