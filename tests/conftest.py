"""Shared fixtures: a real embedded PostgreSQL (pgvector) and a real Redis,
started once per test session. Nothing here mocks the database or broker."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# Keep the developer's ~/.local/share/memoryd untouched by tests.
_TEST_HOME = Path(tempfile.mkdtemp(prefix="memoryd-tests-"))
os.environ["MEMORYD_DATA_DIR"] = str(_TEST_HOME / "data")
for _name in list(os.environ):
    if _name.startswith("MEMORYD_") and _name != "MEMORYD_DATA_DIR":
        del os.environ[_name]

from memoryd.config import reset_settings  # noqa: E402
from memoryd.embedded.postgres import EmbeddedPostgres  # noqa: E402
from memoryd.embedded.redis import EmbeddedRedis  # noqa: E402

TABLES = ("memories", "sessions", "kg_entities", "kg_relations", "memory_links",
          "maintenance_runs", "evicted_memories")


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
    _session_store._sizes._seen.clear()
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
