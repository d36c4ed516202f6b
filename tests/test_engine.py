"""The engine's pool: connections the server dropped while they sat idle are replaced."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from memoryd.db import engine as engine_mod
from memoryd.db.engine import make_engine, session_scope


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

