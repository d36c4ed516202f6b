"""The worker's result backend (``memoryd.broker.redis_results``) on a Redis of its own,
so the server's command counts are this module's alone: a result is checked, written
and published by one script call, a success is never overwritten, results expire."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from memoryd.broker.redis_results import ResultBackend, worker_backend
from memoryd.config import Settings
from memoryd.embedded.redis import EmbeddedRedis
from memoryd.worker.app import create_app
from tests.support.service_user import opened_for_service_user


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    redis_server = EmbeddedRedis(
        opened_for_service_user(tmp_path_factory.mktemp("results")) / "redis")
    redis_server.start()
    yield redis_server
    redis_server.stop()


@pytest.fixture
def backend(server: EmbeddedRedis, tmp_path: Path) -> Any:
    app = create_app(Settings(data_dir=tmp_path, broker_url=server.url,
                              result_expires_s=321))
    try:
        yield app.backend
    finally:
        app.close()


def calls(client: redis.Redis) -> dict[str, int]:
    """Commands the server ran so far, by name (those a script ran included)."""
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(s["calls"]) for name, s in stats.items()}


def published(client: redis.Redis, key: str) -> Any:
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(key)
    pubsub.get_message(timeout=1.0)  # the subscription's confirmation
    return pubsub


def drain(pubsub: Any) -> list[bytes]:
    out = []
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.1)
        if message is not None:
            out.append(message["data"])
    return out


def test_the_worker_writes_results_with_the_scripted_backend(backend: Any) -> None:
    assert isinstance(backend, ResultBackend)
    assert worker_backend("amqp://guest@rabbit//") == "amqp://guest@rabbit//"
    assert worker_backend("disabled://") == "disabled://"


def test_a_result_is_checked_written_and_published_by_one_script_call(
        backend: Any, server: EmbeddedRedis) -> None:
    client = redis.Redis.from_url(server.url)
    task_id = str(uuid.uuid4())
    key = backend.get_key_for_task(task_id).decode()
    backend.store_result(str(uuid.uuid4()), {"warm": True}, "SUCCESS")  # the script loaded
    listener = published(client, key)
    before = calls(client)
    backend.store_result(task_id, {"hits": 3}, "SUCCESS")
    after = calls(client)
    ran = {name: after.get(name, 0) - before.get(name, 0) for name in after}
    assert ran.get("evalsha") == 1 and ran.get("publish") == 1, ran
    assert not ran.get("multi") and not ran.get("exec"), ran
    assert backend.get_task_meta(task_id)["result"] == {"hits": 3}
    assert 300 < client.ttl(key) <= 321
    assert len(drain(listener)) == 1


def test_a_later_run_never_overwrites_a_success_nor_announces_its_failure(
        backend: Any, server: EmbeddedRedis) -> None:
    client = redis.Redis.from_url(server.url)
    task_id = str(uuid.uuid4())
    backend.store_result(task_id, {"stored": True}, "SUCCESS")
    listener = published(client, backend.get_key_for_task(task_id).decode())
    backend.store_result(task_id, ValueError("a duplicate run failed"), "FAILURE")
    backend.store_result(task_id, {"stored": False}, "SUCCESS")
    meta = backend.get_task_meta(task_id)
    assert (meta["status"], meta["result"]) == ("SUCCESS", {"stored": True})
    assert drain(listener) == []


def test_an_earlier_state_is_overwritten_and_a_failure_is_kept_too(
        backend: Any, server: EmbeddedRedis) -> None:
    client = redis.Redis.from_url(server.url)
    task_id = str(uuid.uuid4())
    backend.store_result(task_id, None, "STARTED")
    backend.store_result(task_id, {"done": 1}, "SUCCESS")
    assert backend.get_task_meta(task_id)["status"] == "SUCCESS"
    failed = str(uuid.uuid4())
    backend.store_result(failed, ValueError("no"), "FAILURE")
    assert backend.get_task_meta(failed)["status"] == "FAILURE"
    assert 300 < client.ttl(backend.get_key_for_task(failed)) <= 321
