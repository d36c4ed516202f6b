"""Shared fixtures of the integration tests: a real embedded PostgreSQL (pgvector), a
real Redis and real worker processes, started once per test session. Nothing here
mocks the database or the broker."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from memoryd.config import reset_settings
from memoryd.embedded.postgres import EmbeddedPostgres
from memoryd.embedded.redis import EmbeddedRedis
from tests.support.gateway import GatewayProcess
from tests.support.workers import (
    WORKER_START_TIMEOUT_S,
    WorkerProcess,
    memoryd_env,
    redis_db_url,
)

# The root conftest made this directory and points MEMORYD_DATA_DIR into it.
TEST_HOME = Path(os.environ["MEMORYD_DATA_DIR"]).parent
TABLES = ("memories", "sessions", "kg_entities", "kg_relations", "memory_links",
          "maintenance_runs", "evicted_memories", "agent_terms", "agent_term_stats",
          "api_keys", "dead_letters", "restored_evictions", "memory_versions",
          "memory_supersessions", "working_promotions")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[EmbeddedPostgres]:
    server = EmbeddedPostgres(TEST_HOME / "postgres")
    server.ensure_running()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pg_url(pg_server: EmbeddedPostgres) -> str:
    return pg_server.url()


@pytest.fixture(scope="session")
def _session_store(pg_url: str) -> Iterator[object]:
    from memoryd.memory.store import MemoryStore

    reset_settings()
    store = MemoryStore(pg_url)
    store.migrate()
    yield store
    store.engine.dispose()


@pytest.fixture
def store(_session_store: object) -> object:
    """The migrated store with every table emptied, and no per-agent index left, before
    the test."""
    from sqlalchemy import text

    from memoryd.memory.agent_indexes import existing_indexes
    from memoryd.memory.store import MemoryStore

    assert isinstance(_session_store, MemoryStore)
    with _session_store.session() as session:
        session.execute(text(f"TRUNCATE {', '.join(TABLES)}"))
        # A TRUNCATE leaves the per-agent indexes of agents that are gone (a worker of an
        # earlier test may have built one): the next index_agents run would drop them.
        for name in existing_indexes(session.connection()):
            session.execute(text(f'DROP INDEX "{name}"'))
    _session_store.agent_sizes.clear()
    _session_store.store_models.clear()
    _session_store.own_indexes.clear()
    return _session_store


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(TEST_HOME / "redis")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_url(redis_server: EmbeddedRedis) -> str:
    return redis_server.url


# --- Celery worker processes (end-to-end tests) -------------------------------------
# Agents are uuid-named so worker tests never depend on truncation.

SESSION_WORKER_DB = 1


@pytest.fixture(scope="session")
def worker_broker_url(redis_url: str) -> str:
    """The broker database of the session ``worker``."""
    return redis_db_url(redis_url, SESSION_WORKER_DB)


@pytest.fixture(scope="session")
def worker(pg_url: str, worker_broker_url: str, _session_store: object
           ) -> Iterator[WorkerProcess]:
    """A real Celery worker (both queues, concurrency 2) for the whole session."""
    from memoryd.client import MemoryClient

    process = WorkerProcess(memoryd_env(pg_url, worker_broker_url),
                            TEST_HOME / "worker-session.log")
    try:
        process.wait_ready()
        # One round trip: the pool children have loaded the embedder and reached the database.
        agent = f"warmup-{uuid.uuid4()}"
        with MemoryClient(broker_url=worker_broker_url, timeout=WORKER_START_TIMEOUT_S) as c:
            c.store(agent, "worker warm-up")
            c.recall(agent, "warm-up")
            c.recall(agent, "warm-up")  # both pool children, most likely
        yield process
    finally:
        process.stop()


@pytest.fixture
def client(worker_broker_url: str) -> Iterator[object]:
    """A thin client on the session worker's broker."""
    from memoryd.client import MemoryClient

    with MemoryClient(broker_url=worker_broker_url, timeout=60.0) as c:
        yield c


@pytest.fixture
def agent_id() -> str:
    """A fresh agent id, so tests on the shared worker never see each other's rows."""
    return f"agent-{uuid.uuid4()}"


@pytest.fixture
def spawn_worker(pg_url: str, redis_url: str, tmp_path: Path
                 ) -> Iterator[Callable[..., WorkerProcess]]:
    """Start extra workers (``spawn_worker(db=..., **env)``; ``module``: another entry point
    than ``python -m memoryd``; ``broker_url``: another broker than the session Redis's
    database ``db``); all are killed afterwards."""
    started: list[WorkerProcess] = []

    def spawn(db: int, *, concurrency: int = 1, queues: str = "memory,maintenance",
              module: str = "memoryd", broker_url: str | None = None,
              **extra_env: str) -> WorkerProcess:
        env = memoryd_env(pg_url, broker_url or redis_db_url(redis_url, db), **extra_env)
        process = WorkerProcess(env, tmp_path / f"worker-{len(started)}.log", queues=queues,
                                concurrency=concurrency, module=module)
        started.append(process)
        return process

    yield spawn
    for process in started:
        process.stop(grace=5.0)


@pytest.fixture(scope="session")
def service_env(pg_url: str, worker_broker_url: str) -> dict[str, str]:
    """Environment for ``python -m memoryd`` subprocesses: the test database and the
    session worker's broker."""
    return memoryd_env(pg_url, worker_broker_url)


# --- the gateway (HTTP API and MCP over HTTP) -------------------------------------------

@pytest.fixture(scope="session")
def gateway(worker: WorkerProcess, service_env: dict[str, str]) -> Iterator[GatewayProcess]:
    """A real gateway process on the session worker's broker, for the whole session."""
    process = GatewayProcess(service_env, TEST_HOME / "gateway-session.log")
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


@pytest.fixture
def http(gateway: GatewayProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=60.0) as client:
        yield client
