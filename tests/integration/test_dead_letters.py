"""Poison messages on the default (Redis) broker: a message whose task kills its worker
process every time is set aside as a dead letter after MEMORYD_DEAD_LETTER_AFTER
deliveries, the caller gets ``DeadLettered``, the worker keeps serving, and ``memoryd
dlq`` lists, re-sends and drops dead letters. The poison is real: the worker's injected
LLM SIGKILLs the pool process a deep recall runs in (tests/support/poison_worker.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
from sqlalchemy import text

from memoryd.client import MemoryClient
from memoryd.errors import DeadLettered
from memoryd.memory import dead_letters
from memoryd.memory.store import MemoryStore
from memoryd.redaction import agent_digest
from tests.support.cli import as_json, memoryd
from tests.support.workers import memoryd_env, redis_db_url

pytestmark = pytest.mark.slow

POISON_DB = 14  # this file's own broker database
SECRET_QUERY = "what did the vault combination say"


def _access_count(store: MemoryStore, memory_id: str) -> int:
    with store.session() as session:
        return int(session.execute(text("SELECT access_count FROM memories WHERE id = :i"),
                                   {"i": memory_id}).scalar_one())


def test_a_message_that_kills_its_worker_becomes_a_dead_letter_and_can_be_retried(
        spawn_worker: Callable[..., Any], store: MemoryStore, redis_url: str,
        pg_url: str) -> None:
    broker = redis_db_url(redis_url, POISON_DB)
    raw = redis.Redis.from_url(broker)
    raw.flushdb()
    poisoned = spawn_worker(POISON_DB, concurrency=1, queues="memory",
                            module="tests.support.poison_worker",
                            MEMORYD_PRELOAD_MODELS="false")
    poisoned.wait_ready()
    agent = f"poison-{uuid.uuid4()}"
    memory = str(store.store(agent, "The vault combination is written on the blue card.").id)
    store.store(agent, "The vault is in the basement.")  # deep mode re-ranks two or more

    with MemoryClient(broker_url=broker, timeout=180.0) as client:
        with pytest.raises(DeadLettered, match="delivered 6 times"):
            client.recall(agent, SECRET_QUERY, mode="deep")
        # The worker survived its five lost processes and still serves.
        assert client.recall(agent, "blue card")[0].memory.content.endswith("blue card.")

    with store.session() as session:
        [letter] = dead_letters.listing(session)
    assert (letter.task_name, letter.agent_id, letter.deliveries) == (
        "memoryd.recall", agent, 6)
    assert letter.kwargs["query"] == SECRET_QUERY and letter.kwargs["mode"] == "deep"
    log = poisoned.log_tail(1_000_000)
    warning = next(line for line in log.splitlines() if "task.dead_lettered" in line)
    # The log names the agent by its hash (as the erasure audit does), never its id.
    assert agent_digest(agent) in warning and "memoryd.recall" in warning
    assert agent not in log
    assert SECRET_QUERY not in log  # never the content, anywhere in the worker's log

    env = memoryd_env(pg_url, broker)
    listed = as_json(memoryd(env, "dlq", "list", "--json"))
    assert [(d["id"], d["task"], d["agent_id"]) for d in listed] == [
        (letter.id, "memoryd.recall", agent)]
    assert SECRET_QUERY not in memoryd(env, "dlq", "list").stdout
    assert as_json(memoryd(env, "status", "--json"))["dead_letters"] == 1

    # Retried once the cause is gone (a worker without the poison): it runs, and the
    # recall's access bump shows it did.
    poisoned.stop(grace=5.0)
    spawn_worker(POISON_DB, concurrency=1, queues="memory").wait_ready()
    before = _access_count(store, memory)
    assert "sent memoryd.recall again" in memoryd(env, "dlq", "retry", str(letter.id)).stdout
    _wait_until_changed(lambda: _access_count(store, memory), before)
    with store.session() as session:
        assert dead_letters.count(session) == 0
    missing = memoryd(env, "dlq", "retry", str(letter.id), check=False)
    assert missing.returncode == 2 and "NotFound" in missing.stderr
    raw.flushdb()
    raw.close()


def test_dlq_drop_deletes_one_dead_letter_and_nothing_else(
        store: MemoryStore, service_env: dict[str, str]) -> None:
    with store.session() as session:
        for n in (1, 2):
            dead_letters.record(session, task_id=f"task-{n}", task_name="memoryd.store",
                                queue="memory", agent_id="a", deliveries=6, args=[],
                                kwargs={"agent_id": "a", "content": f"secret {n}"})
        first, second = sorted(d.id for d in dead_letters.listing(session))
        # Recording the same task again (a redelivered dead letter) adds no second row.
        dead_letters.record(session, task_id="task-1", task_name="memoryd.store",
                            queue="memory", agent_id="a", deliveries=7, args=[], kwargs={})
    assert "dropped" in memoryd(service_env, "dlq", "drop", str(first)).stdout
    with store.session() as session:
        assert [d.id for d in dead_letters.listing(session)] == [second]


def _wait_until_changed(read: Callable[[], int], before: int, timeout: float = 60) -> None:
    import time

    deadline = time.monotonic() + timeout
    while read() == before:
        assert time.monotonic() < deadline, "the retried task did not run"
        time.sleep(0.2)
