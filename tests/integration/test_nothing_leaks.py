"""What a caller sends reaches the caller and the database, nothing else: a real worker,
gateway and Flower serve stores, recalls, lists, gets, context, graph queries and a write
that PostgreSQL refuses with the row in its DETAIL; every HTTP route (in bodies, query
strings and paths), every MCP tool, the MCP endpoint itself, the client commands of the
CLI and hand-crafted tasks get bad values holding the same string; then every log,
every file the run wrote, Flower's pages, the error bodies, the MCP errors and the CLI's
stderr are searched for it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from celery import Celery
from mcp import Client
from sqlalchemy import text

from memoryd.celery_config import MEMORY_QUEUE, celery_config
from memoryd.config import get_settings
from memoryd.errors import ValidationError
from memoryd.memory.store import MemoryStore
from memoryd.redaction import summarize
from tests.integration.conftest import TEST_HOME
from tests.support.canary import (
    bad_cli_commands,
    bad_http_requests,
    bad_jsonrpc_messages,
    bad_mcp_calls,
)
from tests.support.cli import memoryd
from tests.support.flower import FlowerProcess, every_page
from tests.support.gateway import GatewayProcess, bearer, make_key
from tests.support.mcp_clients import TOOLS, run_http
from tests.support.workers import WorkerProcess, memoryd_env, redis_db_url

pytestmark = pytest.mark.slow

REDACT_DB = 0  # this file's own broker database
REFUSED = "refused-by-check"
BUSY = "table-is-busy"
# The database's and the broker's own storage hold contents by design (the broker
# holds task messages); everything else a run writes, their logs included, must not.
STORAGE = (TEST_HOME / "postgres" / "pgdata", TEST_HOME / "redis" / "appendonly.aof",
           TEST_HOME / "redis" / "appendonlydir")


@pytest.fixture
def stack(pg_url: str, redis_url: str, tmp_path: Path
          ) -> Iterator[tuple[GatewayProcess, FlowerProcess, WorkerProcess]]:
    env = memoryd_env(pg_url, redis_db_url(redis_url, REDACT_DB))
    worker = WorkerProcess(env, tmp_path / "worker.log", concurrency=1)
    gateway = GatewayProcess(env, tmp_path / "gateway.log")
    flower = FlowerProcess(env, tmp_path / "flower.log")
    try:
        worker.wait_ready()
        gateway.wait_ready()
        flower.wait_ready()
        yield gateway, flower, worker
    finally:
        flower.stop()
        gateway.stop()
        worker.stop()


@pytest.fixture
def refusing_check(store: MemoryStore) -> Iterator[None]:
    """A CHECK constraint that PostgreSQL enforces on the INSERT: its violation names
    the whole row, content included, in the error's DETAIL."""
    with store.session() as session:
        session.execute(text(f"ALTER TABLE memories ADD CONSTRAINT test_refuses CHECK "
                             f"(position('{REFUSED}' in content) = 0) NOT VALID"))
    try:
        yield
    finally:
        with store.session() as session:
            session.execute(text("ALTER TABLE memories DROP CONSTRAINT test_refuses"))


@pytest.fixture
def busy_table(store: MemoryStore) -> Iterator[Callable[[], None]]:
    """A trigger that fails an INSERT of a content holding ``BUSY`` as a busy table would
    (``lock_not_available``: transient, so the task retries), quoting the content in
    its message; the fixture's value lifts it."""
    with store.session() as session:
        session.execute(text(f"""
            CREATE FUNCTION test_busy() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
              IF position('{BUSY}' in NEW.content) > 0 THEN
                RAISE EXCEPTION 'busy with %', NEW.content USING ERRCODE = '55P03';
              END IF;
              RETURN NEW;
            END $$"""))
        session.execute(text("CREATE TRIGGER test_busy BEFORE INSERT ON memories "
                             "FOR EACH ROW EXECUTE FUNCTION test_busy()"))

    def lift() -> None:
        with store.session() as session:
            session.execute(text("DROP TRIGGER IF EXISTS test_busy ON memories"))
            session.execute(text("DROP FUNCTION IF EXISTS test_busy()"))
    try:
        yield lift
    finally:
        lift()


def _until(check: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def _written_files(*roots: Path) -> Iterator[Path]:
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and not any(path.is_relative_to(s) for s in STORAGE):
                yield path


def _serve(http: httpx.Client, canary: str) -> tuple[str, list[httpx.Response]]:
    """Store two memories holding ``canary`` and read them back every way; the first
    memory's id and the error responses."""
    made = [http.post("/memories", json={
        "content": f"The user's locker code is {canary} number {n}.", "key": f"{canary}-{n}",
        "tags": [canary], "metadata": {"note": canary}, "session_id": "s1"})
        for n in range(2)]
    assert [r.status_code for r in made] == [201, 201], made[0].text
    memory_id = made[0].json()["id"]
    answers = [
        http.post("/recall", json={"query": f"locker code {canary}"}),
        http.post("/context", json={"query": f"locker code {canary}"}),
        http.get("/memories"),
        http.get(f"/memories/{memory_id}"),
        http.post("/kg/entities", json={"id": "locker", "type": "thing",
                                        "attributes": {"code": canary}}),
        http.get("/kg/entities/locker"),
    ]
    # Working memory: the thread's messages, variables and topic, read, then promoted.
    answers += [
        http.patch("/threads/t-1", json={
            "messages": [{"role": "user", "content": f"My locker code is {canary}."}],
            "variables": {"code": canary}, "topic": canary, "entities": [canary]}),
        http.get("/threads/t-1"),
        http.post("/context", json={"query": f"locker code {canary}", "thread_id": "t-1"}),
        http.post("/threads/t-1/end"),
    ]
    assert all(r.status_code in (200, 201) for r in answers), [r.text for r in answers]
    assert canary in answers[0].text and canary in answers[3].text  # the caller gets it
    assert canary in answers[7].text and answers[9].json()["promoted"] == 1
    refused = http.post("/memories", json={"content": f"{REFUSED} {canary}"})
    missing = http.get(f"/memories/{uuid.uuid4()}")
    assert refused.status_code >= 400 and missing.status_code == 404
    return memory_id, [refused, missing]


def _store_while_busy(http: httpx.Client, flower: FlowerProcess, lift: Callable[[], None],
                      canary: str) -> None:
    """A store that PostgreSQL fails as busy until the worker has retried it at least
    once; then the table is free and the store lands."""
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(http.post, "/memories", json={"content": f"{BUSY} {canary}"})
        _until(lambda: any(t.get("name") == "memoryd.store" and t.get("retries")
                           for t in flower.tasks().values()), "the busy store's retry")
        lift()
        assert pending.result().status_code == 201


def _refuse_over_http(gateway: GatewayProcess, agent: str, keys: dict[str, dict[str, str]],
                      canary: str) -> list[httpx.Response]:
    """Every HTTP route, with values holding ``canary`` that it refuses: each a 4xx."""
    answers = []
    with httpx.Client(base_url=gateway.url, timeout=120) as http:
        for key, method, path, params, body in bad_http_requests(agent, canary):
            answers.append(http.request(method, path, params=params, json=body,
                                        headers=keys[key]))
    assert all(400 <= a.status_code < 500 for a in answers), [
        (a.request.url.path, a.status_code) for a in answers if not 400 <= a.status_code < 500]
    return answers


def _refuse_over_mcp(gateway: GatewayProcess, key: dict[str, str], canary: str) -> list[str]:
    """Every MCP tool, with arguments of the wrong type and wrong values holding
    ``canary``: the texts of the errors (each call is one)."""
    calls = bad_mcp_calls(canary)
    assert {name for name, _ in calls} >= TOOLS

    async def session(client: Client) -> list[Any]:
        return [await client.call_tool(name, arguments) for name, arguments in calls]

    results = run_http(gateway.url, key, session)
    assert all(r.is_error for r in results), [
        (name, r.content) for (name, _), r in zip(calls, results, strict=True) if not r.is_error]
    return [" ".join(getattr(part, "text", "") for part in r.content) for r in results]


def _refuse_jsonrpc(gateway: GatewayProcess, key: dict[str, str], canary: str
                    ) -> list[httpx.Response]:
    """Bodies that are JSON but no JSON-RPC message, each holding ``canary``: each a
    JSON-RPC error, never a 5xx."""
    headers = {**key, "Accept": "application/json, text/event-stream"}
    answers = [httpx.post(f"{gateway.url}/mcp", json=body, headers=headers, timeout=120)
               for body in bad_jsonrpc_messages(canary)]
    assert all(400 <= a.status_code < 500 and "error" in a.json() for a in answers), [
        (a.status_code, a.text) for a in answers]
    return answers


def _refuse_on_the_command_line(env: dict[str, str], agent: str, canary: str) -> list[str]:
    """The client commands, with options holding ``canary`` that they refuse: stderr."""
    said = []
    for command in bad_cli_commands(agent, canary):
        done = memoryd(env, *command, check=False)
        assert done.returncode != 0 and done.stderr, (command, done.stdout)
        said.append(done.stderr)
    return said


def _refuse_hand_crafted_tasks(worker: WorkerProcess, agent: str, canary: str
                               ) -> list[str]:
    """Messages that skipped the client's checks, with ``canary`` in free texts and in
    fields that are options or ids when memoryd sends them: the worker refuses each by
    name. (Each carries a summary of its arguments for the task events, as memoryd's
    senders do: Flower shows whatever a sender puts there.)"""
    app = Celery("memoryd-canary", set_as_current=False)
    app.conf.update(celery_config(get_settings(), broker_url=worker.broker_url))
    recall = {"agent_id": agent, "query": "locker", "session_id": canary, "tags": [canary],
              "metadata": {canary: canary}}
    messages = [("memoryd.recall", {**recall, "limit": 3, "since": canary}, "since"),
                ("memoryd.recall", {**recall, "mode": canary}, "mode"),
                ("memoryd.list", {"agent_id": agent, "category": canary}, "category"),
                ("memoryd.forget", {"agent_id": agent, "memory_id": canary}, "memory_id"),
                ("memoryd.admin.job_runs", {"job": canary}, "job")]
    said = []
    try:
        for name, kwargs, field in messages:
            result = app.send_task(name, queue=MEMORY_QUEUE, kwargs=kwargs,
                                   argsrepr="()", kwargsrepr=summarize(kwargs))
            refusal = result.get(timeout=120, propagate=False)
            result.forget()
            assert isinstance(refusal, ValidationError) and refusal.field == field, refusal
            said.append(str(refusal))
    finally:
        app.close()
    return said


def test_what_a_caller_sends_reaches_the_caller_and_the_database_and_nothing_else(
        stack: tuple[GatewayProcess, FlowerProcess, WorkerProcess], store: MemoryStore,
        refusing_check: None, busy_table: Callable[[], None], tmp_path: Path) -> None:
    gateway, flower, worker = stack
    canary = f"canary{uuid.uuid4().hex}"
    agent = f"agent-{uuid.uuid4()}"
    keys = {"agent": bearer(make_key(store, agents=(agent,))),
            "admin": bearer(make_key(store, prefixes=("",), admin=True))}
    http = httpx.Client(base_url=f"{gateway.url}/v1/agents/{agent}", timeout=120,
                        headers=keys["agent"])

    # Flower sees the worker's events from when it connects: wait until it saw one.
    def flower_saw_a_task() -> bool:
        http.get("/sessions")
        return any(t.get("name") == "memoryd.sessions" for t in flower.tasks().values())
    _until(flower_saw_a_task, "flower to receive task events")
    memory_id, errors = _serve(http, canary)
    errors += _refuse_over_http(gateway, agent, keys, canary)
    errors += _refuse_jsonrpc(gateway, keys["agent"], canary)
    said = _refuse_over_mcp(gateway, keys["agent"], canary)
    said += _refuse_on_the_command_line(worker.env, agent, canary)
    said += _refuse_hand_crafted_tasks(worker, agent, canary)
    _store_while_busy(http, flower, busy_table, canary)
    with store.session() as session:
        rows = session.execute(text("SELECT content FROM memories WHERE agent_id = :a"),
                               {"a": agent}).scalars().all()
    assert len(rows) == 4 and all(canary in row for row in rows)

    def refused_stores() -> list[dict[str, Any]]:
        return [t for t in flower.tasks().values()
                if t.get("name") == "memoryd.store" and t.get("state") == "FAILURE"]
    _until(lambda: bool(refused_stores()), "flower to see the refused store")
    (failed,) = refused_stores()
    # PostgreSQL refused the row: the caller hears a refusal by name, not the row
    assert "ValidationError" in str(failed.get("exception"))
    pages = every_page(flower)
    assert memory_id in "".join(page.text for page in pages)  # results are summarised
    assert "LockNotAvailable" in "".join(page.text for page in pages)  # and retried

    http.close()
    for process in stack:
        process.stop()
    # The access log names each route by its template, a path no route serves alike.
    assert "POST /v1/jobs/{job}/runs 422" in gateway.log_text()
    assert "GET unmatched 404" in gateway.log_text()
    leaks = [f"flower {page.url.path}" for page in pages if canary in page.text]
    leaks += [f"error body {r.request.method} {r.url.path}" for r in errors
              if canary in r.text]
    leaks += [f"refusal {text!r}" for text in said if canary in text]
    leaks += [str(path) for path in _written_files(TEST_HOME, tmp_path)
              if canary.encode() in path.read_bytes()]
    assert leaks == []
