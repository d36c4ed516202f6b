"""A store that outlives the gateway's wait: 202 and a task id, never 504, for a write
that lands; the task followed to the stored memory, by a key of its agent only. The same
over MCP: ``remember`` answers the task id, ``remember_status`` follows it. A real
gateway on a broker database no worker consumes, then a worker started on it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from sqlalchemy import text

from memoryd.memory.store import MemoryStore
from tests.support.gateway import GatewayProcess, bearer, make_key
from tests.support.mcp_clients import run_http, structured
from tests.support.workers import WorkerProcess, redis_db_url

pytestmark = pytest.mark.slow

ACCEPTED_DB = 10  # the broker database no worker consumes until the test starts one
LANDING_S = 300.0  # a worker starting (embedding model loaded) on a busy machine


@pytest.fixture
def unconsumed_gateway(service_env: dict[str, str], redis_url: str, store: MemoryStore,
                       tmp_path: Path) -> Iterator[GatewayProcess]:
    """A gateway that waits 1 s for a worker, on a broker database none consumes yet."""
    env = {**service_env, "MEMORYD_BROKER_URL": redis_db_url(redis_url, ACCEPTED_DB),
           "MEMORYD_GATEWAY_TIMEOUT_S": "1"}
    process = GatewayProcess(env, tmp_path / "gateway.log", None, "--no-migrate")
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


def _followed(http: httpx.Client, path: str, auth: dict[str, str]) -> httpx.Response:
    """Follow ``path`` until it answers something else than 202."""
    deadline = time.monotonic() + LANDING_S
    while True:
        answer = http.get(path, headers=auth)
        if answer.status_code != 202 or time.monotonic() > deadline:
            return answer
        assert answer.json()["status"] == "pending"
        time.sleep(float(answer.headers["retry-after"]))


def _error(answer: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    error: dict[str, Any] = answer.json()["error"]
    assert error["type"] == kind
    return error


def test_a_store_no_worker_takes_in_time_is_202_and_followed_to_the_memory_it_wrote(
        unconsumed_gateway: GatewayProcess, store: MemoryStore, agent_id: str,
        spawn_worker: Callable[..., WorkerProcess]) -> None:
    auth = bearer(make_key(store, agents=(agent_id,)))
    with httpx.Client(base_url=unconsumed_gateway.url, timeout=120) as http:
        one = http.post(f"/v1/agents/{agent_id}/memories", headers=auth,
                        json={"content": "The release train leaves on Thursdays."})
        assert one.status_code == 202, one.text
        task_id = one.json()["task_id"]
        assert one.json() == {"task_id": task_id, "status": "pending"}
        assert one.headers["location"] == f"/v1/agents/{agent_id}/tasks/{task_id}"
        batch = http.post(f"/v1/agents/{agent_id}/memories", headers=auth, json={
            "items": [{"content": "Staging is rebuilt nightly."},
                      {"content": "The release train leaves on Thursdays."}]})
        assert batch.status_code == 202, batch.text
        pending = http.get(one.headers["location"], headers=auth)
        assert pending.status_code == 202 and pending.json()["task_id"] == task_id

        spawn_worker(ACCEPTED_DB, concurrency=1, queues="memory")
        done = _followed(http, one.headers["location"], auth)
        assert done.status_code == 201, done.text
        assert done.json()["stored"] is True
        both = _followed(http, batch.headers["location"], auth)
        assert both.status_code == 201, both.text
        assert [r["duplicate"] for r in both.json()] == [False, True]
        assert both.json()[1]["id"] == done.json()["id"]
        # Followed again, the same answer: the outcome stays until it expires.
        assert http.get(one.headers["location"], headers=auth).json() == done.json()

    with store.session() as session:
        landed = dict(session.execute(text("SELECT id::text, content FROM memories "
                                           "WHERE agent_id = :a"), {"a": agent_id}).all())
    assert landed[done.json()["id"]] == "The release train leaves on Thursdays."
    assert sorted(landed.values()) == ["Staging is rebuilt nightly.",
                                       "The release train leaves on Thursdays."]


def test_another_agents_key_cannot_follow_a_task(
        unconsumed_gateway: GatewayProcess, store: MemoryStore, agent_id: str,
        spawn_worker: Callable[..., WorkerProcess]) -> None:
    auth = bearer(make_key(store, agents=(agent_id,)))
    intruder = f"agent-{uuid.uuid4()}"
    theirs = bearer(make_key(store, agents=(intruder,)))
    with httpx.Client(base_url=unconsumed_gateway.url, timeout=120) as http:
        made = http.post(f"/v1/agents/{agent_id}/memories", headers=auth,
                         json={"content": "The vault code changes on Mondays."})
        assert made.status_code == 202, made.text
        task_id = made.json()["task_id"]
        spawn_worker(ACCEPTED_DB, concurrency=1, queues="memory")
        assert _followed(http, made.headers["location"], auth).status_code == 201

        # Through its own agent the task is unknown; through the owner's, the key is refused.
        unknown = http.get(f"/v1/agents/{intruder}/tasks/{task_id}", headers=theirs)
        never = http.get(f"/v1/agents/{intruder}/tasks/{uuid.uuid4()}", headers=theirs)
        assert _error(unknown, 404, "not_found") == _error(never, 404, "not_found")
        _error(http.get(made.headers["location"], headers=theirs), 403, "forbidden")
        # A read-only key of the agent did not write it and does not follow it either.
        reader = bearer(make_key(store, agents=(agent_id,), read_only=True))
        _error(http.get(made.headers["location"], headers=reader), 403, "forbidden")
        bad = http.get(f"/v1/agents/{agent_id}/tasks/not-a-task", headers=auth)
        assert _error(bad, 422, "validation_error")["field"] == "task_id"


async def _status_until_done(client: Client, task_id: str) -> dict[str, Any]:
    """``remember_status`` of ``task_id`` until it is no longer pending."""
    deadline = time.monotonic() + LANDING_S
    while True:
        found: dict[str, Any] = structured(await client.call_tool(
            "remember_status", {"task_id": task_id}))
        if found["status"] != "pending" or time.monotonic() > deadline:
            return found
        assert found["task_id"] == task_id
        await anyio.sleep(1)


def test_an_mcp_remember_no_worker_takes_in_time_is_accepted_and_followed_to_its_memory(
        unconsumed_gateway: GatewayProcess, store: MemoryStore, agent_id: str,
        spawn_worker: Callable[..., WorkerProcess]) -> None:
    auth = bearer(make_key(store, agents=(agent_id,)))

    async def remember(client: Client) -> tuple[Any, dict[str, Any]]:
        result = await client.call_tool("remember", {"content": "The canteen opens at 8."})
        task_id = structured(result)["task_id"]
        return result, structured(await client.call_tool("remember_status",
                                                          {"task_id": task_id}))

    accepted, pending = run_http(unconsumed_gateway.url, auth, remember)
    task_id = structured(accepted)["task_id"]
    assert structured(accepted) == {"status": "pending", "task_id": task_id, "id": None,
                                    "stored": False, "duplicate": False, "superseded": []}
    assert task_id in accepted.content[0].text and "remember_status" in accepted.content[0].text
    assert pending == structured(accepted)

    spawn_worker(ACCEPTED_DB, concurrency=1, queues="memory")
    done = run_http(unconsumed_gateway.url, auth,
                    lambda client: _status_until_done(client, task_id))
    assert done["status"] == "done" and done["stored"] is True, done
    with store.session() as session:
        landed = session.execute(text("SELECT content FROM memories WHERE id = :id"),
                                 {"id": done["id"]}).scalar_one()
    assert landed == "The canteen opens at 8."


def test_another_agents_task_id_is_unknown_to_remember_status(
        unconsumed_gateway: GatewayProcess, store: MemoryStore, agent_id: str) -> None:
    intruder = bearer(make_key(store, agents=(f"agent-{uuid.uuid4()}",)))

    async def remember(client: Client) -> str:
        made = await client.call_tool("remember", {"content": "The safe code is 4711."})
        return str(structured(made)["task_id"])

    task_id = run_http(unconsumed_gateway.url, bearer(make_key(store, agents=(agent_id,))),
                       remember)

    async def follow(client: Client) -> list[Any]:
        return [await client.call_tool("remember_status", {"task_id": ref})
                for ref in (task_id, str(uuid.uuid4()), "not-a-task")]

    theirs, never, bad = run_http(unconsumed_gateway.url, intruder, follow)
    assert theirs.is_error and never.is_error and bad.is_error
    assert theirs.content[0].text == never.content[0].text
    assert "not_found: no such task for this agent" in theirs.content[0].text
    assert "validation_error: task_id: " in bad.content[0].text
