"""The engine's pool: connections the server dropped while they sat idle are replaced."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from memoryd.config import override_settings
from memoryd.db import engine as engine_mod
from memoryd.db.engine import make_engine, session_scope
from tests.support.service_user import opened_for_service_user


def _backend_pid(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def _terminate(pg_url: str, pid: int) -> None:
    killer = make_engine(pg_url, pool_size=1)
    try:
        with killer.connect() as conn:
            assert conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar()
    finally:
        killer.dispose()


@pytest.fixture
def one_connection(pg_url: str) -> Iterator[Engine]:
    engine = make_engine(pg_url, pool_size=1)
    yield engine
    engine.dispose()


def test_a_connection_dropped_while_idle_is_replaced_before_use(
        one_connection: Engine, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _backend_pid(one_connection)
    _terminate(pg_url, first)
    monkeypatch.setattr(engine_mod, "PING_AFTER_IDLE_S", 0.0)  # as if idle for long
    with session_scope(one_connection) as session:
        assert session.execute(text("SELECT 1")).scalar_one() == 1
    assert _backend_pid(one_connection) != first


def test_a_connection_in_steady_use_is_not_pinged(
        one_connection: Engine, pg_url: str) -> None:
    """The trade-off: a connection dropped between two close uses fails the next call
    once (tasks retry it); the pool then hands out a new connection."""
    first = _backend_pid(one_connection)
    _terminate(pg_url, first)
    with pytest.raises(OperationalError):
        _backend_pid(one_connection)
    assert _backend_pid(one_connection) != first



def test_database_url_uses_the_embedded_postgres_until_released(tmp_path: Path) -> None:
    """Without MEMORYD_DATABASE_URL, ``database_url()`` starts the embedded server and
    counts this process among its users; ``release_used()`` stops it, unless another
    user (here a second holder of the same data directory) still needs it."""
    from memoryd.embedded import postgres

    server = postgres.EmbeddedPostgres(opened_for_service_user(tmp_path) / "postgres")
    try:
        with override_settings(data_dir=str(tmp_path), database_url=None):
            url = engine_mod.database_url()
        assert url == server.url() and server.is_running()

        other = postgres.EmbeddedPostgres(server.data_dir)
        other.use()  # a second user: `memoryd up`, `memoryd run`, another command
        postgres.release_used()
        assert server.is_running()  # not stopped from under the other user
        assert other.release()  # the last user out stops it
        assert not server.is_running()
    finally:
        server.stop()
