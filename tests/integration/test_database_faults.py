"""A PostgreSQL crash-restart (an immediate shutdown, as a power loss or an OOM kill of
the postmaster would do, 5 s down) in the middle of a stream of stores, recalls and a
maintenance run: nothing acknowledged is lost or doubled, the maintenance run resumes
from its checkpoint, and the audit records the interrupted run and the resumed one.

A server of its own (the session's is shared by every test), a real worker on it."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from celery.exceptions import Retry
from sqlalchemy import text

from memoryd.client import MemoryClient
from memoryd.embedded.postgres import EmbeddedPostgres
from memoryd.errors import ValidationError, WorkerError
from memoryd.memory.maintenance.runner import INTERRUPTED
from memoryd.memory.store import MemoryStore
from memoryd.tasks.base import MemorydTask
from memoryd.types import StoreResult
from memoryd.worker import app
from tests.support.locks import lock_waiters
from tests.support.service_user import opened_for_service_user
from tests.support.workers import redis_db_url

pytestmark = pytest.mark.slow

FAULT_DB = 8  # this file's own broker database
GROUPS = 300  # duplicate pairs for the maintenance run to merge
STORES = 60
DOWN_S = 5.0


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[tuple[EmbeddedPostgres, MemoryStore]]:
    server = EmbeddedPostgres(opened_for_service_user(tmp_path) / "postgres")
    store = MemoryStore(server.ensure_running())
    store.migrate()
    try:
        yield server, store
    finally:
        store.close()
        server.stop()


def _crash(server: EmbeddedPostgres) -> None:
    """SIGQUIT to the postmaster: PostgreSQL's immediate shutdown, no checkpoint."""
    pid = int((server.pgdata / "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGQUIT)
    deadline = time.monotonic() + 30
    while _alive(pid):
        assert time.monotonic() < deadline, "postmaster did not stop"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s: {what}"
        time.sleep(0.02)


def _scalar(store: MemoryStore, sql: str, **params: Any) -> Any:
    with store.session() as session:
        return session.execute(text(sql), params).scalar()


def test_a_database_crash_restart_loses_and_doubles_nothing_and_maintenance_resumes(
        own_server: tuple[EmbeddedPostgres, MemoryStore], spawn_worker: Callable[..., Any],
        redis_url: str) -> None:
    server, store = own_server
    worker = spawn_worker(FAULT_DB, concurrency=2, MEMORYD_DATABASE_URL=server.url(),
                          MEMORYD_MAINTENANCE_BATCH_SIZE="4", MEMORYD_PRELOAD_MODELS="false")
    worker.wait_ready()
    dup_agent, agent = f"dups-{uuid.uuid4()}", f"stream-{uuid.uuid4()}"
    # Pairs that differ only in case and punctuation: stored apart, merged by deduplicate.
    store.store_many(dup_agent, [{"content": c} for i in range(GROUPS)
                                 for c in (f"Heron note {i}: seen at dawn.",
                                           f"heron note {i} -- seen at dawn")])
    contents = [f"stream fact {i:02d}: {uuid.uuid4()}" for i in range(STORES)]

    with MemoryClient(broker_url=redis_db_url(redis_url, FAULT_DB), timeout=180) as client:
        job = client.run_job("deduplicate", wait=False)
        _wait(lambda: _scalar(store, "SELECT count(*) FROM maintenance_runs WHERE job = "
                                     "'deduplicate' AND stats ? 'checkpoint'") > 0,
              60, "the maintenance run's first checkpoint")
        # Hold everything mid-flight: the run blocks in its next merge batch, the stores
        # in their inserts, the recalls in their access bumps; then the server dies.
        blocker = store.engine.connect()
        blocker.execute(text("LOCK TABLE memories IN SHARE MODE"))
        _wait(lambda: lock_waiters(store) >= 1, 60, "the run to block")
        handles = [client.store(agent, c, wait=False) for c in contents]
        recalls: list[Any] = []
        reader = threading.Thread(target=lambda: recalls.extend(
            client.recall(agent, "stream fact", limit=3) for _ in range(10)))
        reader.start()
        _wait(lambda: lock_waiters(store) >= 2, 60, "the stores to block")
        _crash(server)
        blocker.invalidate()
        time.sleep(DOWN_S)
        server.ensure_running()

        results = [h.get(timeout=180) for h in handles]
        reader.join(180)
        hits = client.recall(agent, "stream fact 07", limit=3)
        record = job.get(timeout=180)
    assert len(recalls) == 10  # each recall caught by the crash was retried, none failed
    # Stores: every one landed exactly once, each result the row it wrote.
    with store.session() as session:
        rows = {str(r.id): r.content for r in session.execute(text(
            "SELECT id, content FROM memories WHERE agent_id = :a"), {"a": agent})}
    assert sorted(rows.values()) == sorted(contents)
    assert all(isinstance(r, StoreResult) for r in results)
    assert {str(r.id) for r in results} == set(rows)
    assert hits and hits[0].memory.agent_id == agent

    # Maintenance: finished the sweep; every pair merged once, nothing else touched.
    assert _scalar(store, "SELECT count(*) FROM memories WHERE agent_id = :a",
                   a=dup_agent) == GROUPS
    with store.session() as session:
        runs = session.execute(text(
            "SELECT id, status, error, stats FROM maintenance_runs "
            "WHERE job = 'deduplicate' ORDER BY id")).all()
    interrupted = [r for r in runs if r.status == "failed"]
    assert interrupted, [(r.status, r.error) for r in runs]
    assert all(r.error in (INTERRUPTED, "transient database error; retried")
               for r in interrupted)
    finished = [r for r in runs if r.status == "ok"]
    assert finished[0].stats["resumed"] is True, runs  # from the interrupted run's checkpoint
    assert finished[-1].stats["checkpoint"]["sweep"]["done"] is True
    assert record["status"] == "ok"



# --- which database errors are retried ---------------------------------------------------

_FAULTS_ENGINE: list[Any] = []
_ATTEMPTS: list[str] = []


@app.task(name="tests.database_faults.execute", base=MemorydTask, bind=True)
def _execute(self: Any, statement: str, values: dict[str, Any]) -> None:
    """One statement on the test database, counting attempts (retries run eagerly)."""
    _ATTEMPTS.append(statement)
    with _FAULTS_ENGINE[0].begin() as conn:
        conn.execute(text(statement), values)


@pytest.fixture
def faults_engine(store: MemoryStore) -> Iterator[None]:
    _FAULTS_ENGINE[:] = [store.engine]
    _ATTEMPTS.clear()
    yield
    _FAULTS_ENGINE.clear()


def _incompressible(chars: int) -> str:
    """Four-byte characters PostgreSQL cannot compress away in an index entry."""
    rng = random.Random(23)
    return "".join(chr(rng.randint(0x10000, 0x10FFFF)) for _ in range(chars))


def test_an_index_row_too_large_fails_at_once_naming_the_field(
        faults_engine: None, store: MemoryStore) -> None:
    agent, key = _incompressible(255), _incompressible(512)  # what the columns allow
    with pytest.raises(ValidationError) as caught:
        _execute.apply(kwargs={"statement": """
            INSERT INTO memories (agent_id, content, content_hash, category, importance,
                                  embedding, embedding_model, key)
            VALUES (:a, 'x', 'h', 'fact', 0.5, CAST(array_fill(0.1, ARRAY[384]) AS vector),
                    'm', :k)""", "values": {"a": agent, "k": key}}, throw=True)
    assert caught.value.field == "key"
    assert len(_ATTEMPTS) == 1  # not retried
    assert agent not in str(caught.value) and key not in str(caught.value)
    with store.session() as session:
        assert session.execute(text("SELECT count(*) FROM memories")).scalar() == 0


def test_a_value_out_of_range_fails_at_once_without_the_databases_text(
        faults_engine: None) -> None:
    with pytest.raises(ValidationError) as caught:
        _execute.apply(kwargs={"statement": "SELECT 1 OFFSET CAST(:o AS numeric)",
                               "values": {"o": 10**20}}, throw=True)
    assert len(_ATTEMPTS) == 1
    assert "OFFSET" not in str(caught.value) and "bigint" not in str(caught.value)


def test_a_connection_the_server_closes_is_retried(faults_engine: None) -> None:
    with pytest.raises(Retry) as caught:  # eagerly run, a retry is raised, not run
        _execute.apply(kwargs={"statement": "SELECT pg_terminate_backend(pg_backend_pid())",
                               "values": {}}, throw=True)
    # retried, its cause described without the server's text
    assert isinstance(caught.value.exc, WorkerError)
    assert "OperationalError: AdminShutdown" in str(caught.value.exc)
