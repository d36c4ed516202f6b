"""Engines and sessions. One engine per process, behind a getter tests can override."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker

from memoryd.config import get_settings


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
    return create_engine(
        normalize_url(url),
        pool_size=pool_size or settings.db_pool_size,
        max_overflow=pool_size or settings.db_pool_size,
        pool_pre_ping=True,
        pool_recycle=1800,
        connect_args={"options": f"-c statement_timeout={timeout}",
                      "application_name": "memoryd"},
    )


_engine: Engine | None = None


def database_url() -> str:
    """The configured database, or the embedded PostgreSQL (started if needed)."""
    url = get_settings().database_url
    if url:
        return url
    from memoryd.embedded.postgres import EmbeddedPostgres

    return EmbeddedPostgres.from_settings().ensure_running()


def get_engine() -> Engine:
    """The process-wide engine, created on first use."""
    global _engine  # noqa: PLW0603 - the one named, resettable global
    if _engine is None:
        _engine = make_engine(database_url())
    return _engine


def set_engine(engine: Engine | None) -> None:
    """Install ``engine`` as the process engine (tests), or clear it with None."""
    global _engine  # noqa: PLW0603
    _engine = engine


def reset_engine() -> None:
    """Dispose the process engine; the next ``get_engine`` builds a new one.

    Called after fork in worker children: pooled connections must not cross a fork.
    """
    global _engine  # noqa: PLW0603
    if _engine is not None:
        _engine.dispose(close=False)
    _engine = None


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """A session in one transaction: committed on success, rolled back on error."""
    factory = sessionmaker(engine, expire_on_commit=False)
    with factory() as session, session.begin():
        yield session
