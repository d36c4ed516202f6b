"""Shared fixtures: a real embedded PostgreSQL (pgvector) and a real Redis,
started once per test session. Nothing here mocks the database or broker."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# Keep the developer's ~/.local/share/memoryd untouched by tests.
_TEST_HOME = Path(tempfile.mkdtemp(prefix="memoryd-tests-"))
# Removed when the test process exits (after the servers were stopped by the fixtures).
atexit.register(shutil.rmtree, _TEST_HOME, ignore_errors=True)
os.environ["MEMORYD_DATA_DIR"] = str(_TEST_HOME / "data")
for _name in list(os.environ):
    if _name.startswith("MEMORYD_") and _name != "MEMORYD_DATA_DIR":
        del os.environ[_name]

from memoryd.config import reset_settings  # noqa: E402
from memoryd.embedded.postgres import EmbeddedPostgres  # noqa: E402
from memoryd.embedded.redis import EmbeddedRedis  # noqa: E402

TABLES = ("memories", "sessions", "kg_entities", "kg_relations", "memory_links",
          "maintenance_runs", "evicted_memories", "agent_terms", "agent_term_stats")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[EmbeddedPostgres]:
    server = EmbeddedPostgres(_TEST_HOME / "postgres")
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
    """The migrated store with every table emptied before the test."""
    from sqlalchemy import text

    from memoryd.memory.store import MemoryStore

    assert isinstance(_session_store, MemoryStore)
    with _session_store.session() as session:
        session.execute(text(f"TRUNCATE {', '.join(TABLES)}"))
    _session_store.agent_sizes.clear()
    return _session_store


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(_TEST_HOME / "redis")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_url(redis_server: EmbeddedRedis) -> str:
    return redis_server.url


# --- Celery worker processes (end-to-end tests) -------------------------------------
# Real `python -m memoryd worker` subprocesses on the session's PostgreSQL and Redis.
# Each worker gets its own Redis database number so tests cannot see each other's
# queues; agents are uuid-named so worker tests never depend on truncation.

import contextlib as _contextlib  # noqa: E402
import signal as _signal  # noqa: E402
import subprocess as _subprocess  # noqa: E402
import sys as _sys  # noqa: E402
import time as _time  # noqa: E402
import uuid as _uuid  # noqa: E402
from collections.abc import Callable as _Callable  # noqa: E402

WORKER_START_TIMEOUT_S = 120.0
SESSION_WORKER_DB = 1


def redis_db_url(redis_url: str, db: int) -> str:
    """``redis_url`` pointed at database number ``db``."""
    return redis_url.rsplit("/", 1)[0] + f"/{db}"


def memoryd_env(pg_url: str, broker_url: str, **extra: str) -> dict[str, str]:
    """The environment of a memoryd subprocess: the test database and broker only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
    env.update({
        "MEMORYD_DATABASE_URL": pg_url,
        "MEMORYD_BROKER_URL": broker_url,
        "MEMORYD_DATA_DIR": os.environ["MEMORYD_DATA_DIR"],
    })
    env.update(extra)
    return env


class WorkerProcess:
    """One `python -m memoryd worker` in its own process group (so a kill reaches the
    prefork children too), logging to a file."""

    def __init__(self, env: dict[str, str], log_path: Path, *,
                 queues: str = "memory,maintenance", concurrency: int = 2) -> None:
        self.env = env
        self.broker_url = env["MEMORYD_BROKER_URL"]
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.proc = _subprocess.Popen(
            [_sys.executable, "-m", "memoryd", "--log-level", "INFO", "worker",
             "--queues", queues, "--concurrency", str(concurrency)],
            env=env, stdin=_subprocess.DEVNULL, stdout=self._log, stderr=_subprocess.STDOUT,
            start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def wait_ready(self, timeout: float = WORKER_START_TIMEOUT_S) -> None:
        """Until the worker answers a control ping (then it consumes its queues)."""
        from celery import Celery

        app = Celery("memoryd-test-ping", broker=self.broker_url, set_as_current=False)
        app.conf.update(broker_connection_retry_on_startup=True, accept_content=["json"])
        deadline = _time.monotonic() + timeout
        try:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"worker exited with {self.proc.returncode}:\n"
                                       f"{self.log_tail()}")
                if app.control.ping(timeout=0.5):
                    return
                if _time.monotonic() > deadline:
                    raise RuntimeError(f"worker did not answer within {timeout:g} s:\n"
                                       f"{self.log_tail()}")
        finally:
            app.close()

    def kill(self) -> None:
        """SIGKILL the whole process group: the worker and its pool children die at once."""
        with _contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, _signal.SIGKILL)
        self.proc.wait(10)
        self._log.close()

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM (Celery's warm shutdown), wait, then SIGKILL the group."""
        if self.proc.poll() is None:
            self.proc.send_signal(_signal.SIGTERM)
            with _contextlib.suppress(_subprocess.TimeoutExpired):
                self.proc.wait(grace)
        self.kill()


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
                            _TEST_HOME / "worker-session.log")
    try:
        process.wait_ready()
        # One round trip: the pool children have loaded the embedder and reached the database.
        agent = f"warmup-{_uuid.uuid4()}"
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
    return f"agent-{_uuid.uuid4()}"


@pytest.fixture
def spawn_worker(pg_url: str, redis_url: str, tmp_path: Path
                 ) -> Iterator[_Callable[..., WorkerProcess]]:
    """Start extra workers (``spawn_worker(db=..., **env)``); all are killed afterwards."""
    started: list[WorkerProcess] = []

    def spawn(db: int, *, concurrency: int = 1, queues: str = "memory,maintenance",
              **extra_env: str) -> WorkerProcess:
        env = memoryd_env(pg_url, redis_db_url(redis_url, db), **extra_env)
        process = WorkerProcess(env, tmp_path / f"worker-{len(started)}.log", queues=queues,
                                concurrency=concurrency)
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
