"""Engines and sessions. One engine per process (``get_engine``), forgotten by
``memoryd.process.reset``."""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker

from memoryd.config import get_settings
from memoryd.process import Slot

# A pooled connection idle for longer than this is pinged before use (see make_engine).
PING_AFTER_IDLE_S = 5.0


def normalize_url(url: str) -> str:
    """Use the psycopg 3 driver whatever spelling of postgres URL was given."""
    for prefix in ("postgresql+psycopg2://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def make_engine(url: str, *, pool_size: int | None = None,
                statement_timeout_ms: int | None = None) -> Engine:
    settings = get_settings()
    timeout = statement_timeout_ms or settings.statement_timeout_ms
    engine = create_engine(
        normalize_url(url),
        pool_size=pool_size or settings.db_pool_size,
        max_overflow=pool_size or settings.db_pool_size,
        pool_recycle=1800,
        # A failed statement's error never lists its parameters (memory contents).
        hide_parameters=True,
        connect_args={"options": f"-c statement_timeout={timeout}",
                      "application_name": "memoryd"},
    )
    _ping_idle_connections(engine)
    return engine


def _ping_idle_connections(engine: Engine) -> None:
    """Check a pooled connection with a round trip before use, if it sat idle in the pool
    for more than ``PING_AFTER_IDLE_S``: a connection the server dropped (a restart, an
    idle timeout, a failover) is replaced before anyone sees an error. SQLAlchemy's
    ``pool_pre_ping`` pings at every checkout, a round trip on every
    recall and store; a connection in steady use is not pinged. One that breaks between
    two close uses fails that one call with ``OperationalError`` (tasks retry it), and
    SQLAlchemy then replaces every connection of the pool."""
    @event.listens_for(engine, "connect")
    def _fresh(dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkin")
    def _idle(dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        if time.monotonic() - record.info.get("idle_since", 0.0) <= PING_AFTER_IDLE_S:
            return
        try:
            alive = engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as exc:
            raise DisconnectionError(str(exc)) from exc
        if not alive:
            raise DisconnectionError("the connection failed its ping")


def database_url() -> str:
    """The configured database, or the embedded PostgreSQL: started if needed and used
    by this process until ``memoryd.embedded.postgres.release_used()`` (the ``memoryd``
    command calls it as it exits; the last user stops the server)."""
    url = get_settings().database_url
    if url:
        return url
    from memoryd.embedded.postgres import use_default

    return use_default()


def _dispose(engine: Engine, after_fork: bool) -> None:
    """A forked child drops its parent's pooled connections without closing them."""
    engine.dispose(close=not after_fork)


_ENGINE: Slot[Engine] = Slot("engine", forget=_dispose)


def get_engine() -> Engine:
    """The process-wide engine, created on first use (kept in ``memoryd.process``)."""
    return _ENGINE.get(lambda: make_engine(database_url()))


_factories: weakref.WeakKeyDictionary[Engine, sessionmaker[Session]] = weakref.WeakKeyDictionary()


@contextmanager
def session_scope(engine: Engine, *, explicit: bool = False) -> Iterator[Session]:
    """A session in one transaction: committed on success, rolled back on error. With
    ``explicit``, its statements run in a transaction only once it sends BEGIN itself
    (``explicit_transactions``)."""
    # One factory per engine: building a sessionmaker per session is measurable on recall.
    factory = _factories.get(engine)
    if factory is None:
        factory = _factories[engine] = sessionmaker(engine, expire_on_commit=False)
    with factory() as session, session.begin():
        if explicit:
            explicit_transactions(session)
        yield session


def explicit_transactions(session: Session) -> None:
    """Give ``session`` (which has not run a statement yet) a connection in the driver's
    autocommit mode: each statement is a transaction of its own until the session sends
    BEGIN itself, and its COMMIT or ROLLBACK ends that transaction as usual.

    Psycopg otherwise sends a transaction's BEGIN on its own and waits for the answer, a
    round trip; a pipeline (``memoryd.db.pipeline``) sends it together with its
    statements instead, and can send the COMMIT with its last one: two round trips
    fewer for a recall, and a single-statement read is one round trip in all. The pool
    returns the connection to its default mode when it is checked in."""
    session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
