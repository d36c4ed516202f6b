"""RabbitMQ as memoryd's broker: quorum queues with a delivery limit, a killed worker's
message back in its queue within seconds, poison messages counted by the queue itself.

Against the RabbitMQ on 127.0.0.1:5672 (MEMORYD_TEST_AMQP_URL to change it); results go
to the session's Redis. On a machine without RabbitMQ these tests are skipped, and the
skip says that they did not run."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlparse

import pytest
from kombu import Connection
from sqlalchemy import text

from memoryd.broker import RabbitBroker
from memoryd.client import MemoryClient
from memoryd.config import get_settings
from memoryd.errors import DeadLettered
from memoryd.memory import dead_letters
from memoryd.memory.store import MemoryStore
from tests.support.locks import lock_waiters
from tests.support.workers import redis_db_url

pytestmark = pytest.mark.slow

AMQP_URL = os.environ.get("MEMORYD_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
RESULT_DB = 15  # the session Redis database holding these tests' results
MEMORYD_QUEUES = ("memory", "maintenance", "memoryd.dead")
STORES = 40


@pytest.fixture
def amqp_url() -> Iterator[str]:
    where = urlparse(AMQP_URL)
    try:
        socket.create_connection((where.hostname, where.port or 5672), timeout=2).close()
    except OSError:
        pytest.skip(f"RabbitMQ is not reachable at {where.hostname}:{where.port or 5672}: "
                    "the RabbitMQ tests did NOT run")
    _delete_queues()
    yield AMQP_URL
    _delete_queues()


def _delete_queues() -> None:
    with Connection(AMQP_URL) as conn:
        for name in MEMORYD_QUEUES:
            conn.default_channel.queue_delete(name)
            conn.default_channel.exchange_delete(name)


def _ready(name: str) -> int:
    """Messages waiting in a queue (delivered but unacknowledged ones not counted)."""
    with Connection(AMQP_URL) as conn:
        return int(conn.default_channel.queue_declare(queue=name, passive=True).message_count)


def _worker(spawn_worker: Callable[..., Any], redis_url: str, **options: Any) -> Any:
    worker = spawn_worker(0, broker_url=AMQP_URL, queues="memory",
                          MEMORYD_RESULT_BACKEND=redis_db_url(redis_url, RESULT_DB),
                          MEMORYD_PRELOAD_MODELS="false", **options)
    worker.wait_ready()
    return worker


def _client(redis_url: str) -> MemoryClient:
    return MemoryClient(broker_url=AMQP_URL, result_backend=redis_db_url(redis_url, RESULT_DB),
                        timeout=120.0)


def _rows(store: MemoryStore, agent: str) -> list[str]:
    with store.session() as session:
        return list(session.execute(text("SELECT content FROM memories WHERE agent_id = :a"),
                                    {"a": agent}).scalars())


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s: {what}"
        time.sleep(0.05)


def test_memory_works_over_rabbitmq_on_quorum_queues(
        amqp_url: str, spawn_worker: Callable[..., Any], store: MemoryStore,
        redis_url: str) -> None:
    _worker(spawn_worker, redis_url)
    agent = f"rabbit-{uuid.uuid4()}"
    with _client(redis_url) as client:
        client.store(agent, "RabbitMQ carries this memory.")
        assert client.recall(agent, "what carries it?")[0].memory.content.startswith("Rabbit")
    # The queue is a quorum queue with memoryd's arguments: declaring it with the same
    # arguments is accepted, and as a classic queue refused (406).
    declared = RabbitBroker().queue("memory", get_settings()).queue_arguments
    assert declared["x-delivery-limit"] == get_settings().dead_letter_after + 3
    with Connection(AMQP_URL) as conn:
        channel = conn.default_channel
        channel.queue_declare(queue="memory", durable=True, auto_delete=False,
                              arguments=declared)
        with pytest.raises(Exception, match="x-queue-type"):
            channel.queue_declare(queue="memory", durable=True, auto_delete=False,
                                  arguments={**declared, "x-queue-type": "classic"})


def test_a_killed_workers_message_is_back_in_its_queue_within_seconds(
        amqp_url: str, spawn_worker: Callable[..., Any], store: MemoryStore,
        redis_url: str) -> None:
    first = _worker(spawn_worker, redis_url)
    agent = f"rabbit-crash-{uuid.uuid4()}"
    contents = [f"rabbit fact {i:02d}: {uuid.uuid4()}" for i in range(STORES)]
    with _client(redis_url) as client:
        handles = [client.store(agent, content, wait=False) for content in contents]
        _wait(lambda: len(_rows(store, agent)) >= 5, 60, "the first stores to land")
        blocker = store.engine.connect()
        try:
            blocker.execute(text("LOCK TABLE memories IN SHARE MODE"))
            _wait(lambda: lock_waiters(store) > 0, 30, "the worker to block on insert")
            held = STORES - len(_rows(store, agent))  # waiting, plus the one being stored
            _wait(lambda: _ready("memory") == held - 1, 10, "the queue to settle")
            first.kill()
            killed_at = time.monotonic()
            _wait(lambda: _ready("memory") == held, 5, "the message to be requeued")
            requeued_after = time.monotonic() - killed_at
        finally:
            blocker.rollback()
            blocker.close()
        _worker(spawn_worker, redis_url)
        results = [handle.get(timeout=120) for handle in handles]
    assert requeued_after < 5
    assert sorted(_rows(store, agent)) == sorted(contents)  # none lost, none doubled
    assert len({r.id for r in results}) == STORES


def test_a_poison_message_is_dead_lettered_by_its_delivery_count(
        amqp_url: str, spawn_worker: Callable[..., Any], store: MemoryStore,
        redis_url: str) -> None:
    _worker(spawn_worker, redis_url, module="tests.support.poison_worker")
    agent = f"rabbit-poison-{uuid.uuid4()}"
    store.store(agent, "A memory a deep recall would rank.")
    store.store(agent, "Another memory to rank against it.")
    with _client(redis_url) as client, pytest.raises(DeadLettered, match="delivered 6 times"):
        client.recall(agent, "rank it deeply", mode="deep")
    with store.session() as session:
        [letter] = dead_letters.listing(session)
    assert (letter.task_name, letter.agent_id, letter.deliveries) == (
        "memoryd.recall", agent, 6)
    assert _ready("memoryd.dead") == 0  # memoryd's guard acted before the broker's limit



def test_a_countdown_task_waits_in_rabbitmq_and_then_runs(
        amqp_url: str, spawn_worker: Callable[..., Any], store: MemoryStore,
        redis_url: str) -> None:
    """Retries wait out their countdown in RabbitMQ's delayed-delivery queues (Celery's,
    for quorum queues; memoryd's queues sit on topic exchanges for it)."""
    from celery import Celery

    from memoryd.celery_config import celery_config

    worker = _worker(spawn_worker, redis_url)
    assert "delayed delivery" not in worker.log_tail(200_000).lower().replace(
        "native delayed delivery do not support", "")
    agent = f"rabbit-later-{uuid.uuid4()}"
    memory = store.store(agent, "Sent with a countdown.")
    app = Celery("rabbit-countdown", set_as_current=False)
    app.conf.update(celery_config(get_settings(), broker_url=AMQP_URL,
                                  result_backend=redis_db_url(redis_url, RESULT_DB)))
    sent = time.monotonic()
    result = app.send_task("memoryd.get", kwargs={"agent_id": agent,
                                                  "memory_id": str(memory.id)}, countdown=3)
    assert result.get(timeout=60)["content"] == "Sent with a countdown."
    assert time.monotonic() - sent >= 3
    app.close()
