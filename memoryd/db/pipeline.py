"""Statements sent ahead of their results (psycopg's pipeline mode), for a caller with
work of its own to do while PostgreSQL runs them: recall sends its keyword statement,
embeds the query meanwhile on its own thread, then reads the hits. Through SQLAlchemy
each statement waits for its result before the next line of Python runs, and handing
the embedding to another thread costs two thread wake-ups a recall. A block of
statements costs one round trip, at its end, if their rows are read after it.

Statements go out on the session's own connection and transaction, so what they set
with ``set_config(..., true)`` holds for the session's later statements. On a session
of explicit transactions (``memoryd.db.engine.explicit_transactions``) with none open,
the pipeline sends the BEGIN ahead of its statements, and ``Pipe.commit`` sends the
COMMIT behind them: neither costs a round trip of its own. Errors come
back as SQLAlchemy's (``DBAPIError`` and its subclasses, parameters hidden), and a
connection that broke is invalidated, as SQLAlchemy does for its own statements.

Where a statement must name a value as a literal (a plan that matches a partial index;
DDL, which takes no parameters), the value goes into the driver's text after SQLAlchemy
parsed it, quoted by psycopg (``driver_text``, ``run_composed``): no layer reads any of
its characters as a parameter.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, cast

import psycopg
from psycopg import sql as psql
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from sqlalchemy import Connection, text
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

__all__ = ["Pipe", "Sent", "driver_text", "pipeline", "run_composed"]


@lru_cache(maxsize=256)
def _driver_sql(sql: str, dialect: Dialect) -> str:
    """``sql``, with SQLAlchemy's ``:name`` parameters, in the driver's own style."""
    return str(text(sql).compile(dialect=dialect))


def _driver(connection: Connection) -> psycopg.Connection[Any]:
    driver = connection.connection.driver_connection
    if not isinstance(driver, psycopg.Connection):
        raise TypeError("memoryd runs its statements through psycopg only")
    return driver


@lru_cache(maxsize=8)
def _marks(marks: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(mark) for mark in marks))


def driver_text(connection: Connection, sql: str,
                literals: Mapping[str, str] | None = None) -> str:
    """``sql`` (SQLAlchemy's ``:name`` parameters) in the driver's own style, each mark
    of ``literals`` replaced by its value as a SQL string literal, for a statement run
    with parameters. The values go in after SQLAlchemy parsed the text (it reads
    ``:name`` inside quotes too), quoted by libpq for this connection, with each ``%``
    doubled (psycopg reads ``%`` as a placeholder anywhere in a statement sent with
    parameters): they read back exactly, whatever they hold."""
    driver_sql = _driver_sql(sql, connection.dialect)
    if not literals:
        return driver_sql
    driver = _driver(connection)
    quoted = {mark: psql.Literal(value).as_string(driver).replace("%", "%%")
              for mark, value in literals.items()}
    return _marks(tuple(quoted)).sub(lambda found: quoted[found.group(0)], driver_sql)


def run_composed(connection: Connection, statement: psql.Composable) -> None:
    """Run a statement without parameters (DDL takes none) whose values psycopg composed
    in (``psycopg.sql.Literal``, ``Identifier``): sent as it is, so neither SQLAlchemy
    nor psycopg reads its text for placeholders. Errors come back as SQLAlchemy's."""
    connection.exec_driver_sql(statement.as_string(_driver(connection)),
                               execution_options={"no_parameters": True})


class Sent:
    """A statement on its way: its rows, once read."""

    def __init__(self, pipe: Pipe, cursor: psycopg.Cursor[dict[str, Any]]) -> None:
        self._pipe = pipe
        self._cursor = cursor

    def rows(self) -> list[dict[str, Any]]:
        """Its rows. Read after the pipeline's block, they came back with every other
        result in the one round trip that ends the block (psycopg ends a pipeline with a
        Sync and waits for the server's answer to it, whatever was read before); read
        inside it, they cost a round trip of their own."""
        with self._pipe.translated(), self._cursor:
            return self._cursor.fetchall()


class Pipe:
    """Sends statements on a session's connection without waiting for their results."""

    def __init__(self, connection: Connection, driver: psycopg.Connection[Any]) -> None:
        self._connection = connection
        self._driver = driver

    def send(self, sql: str, params: Mapping[str, Any],
             literals: Mapping[str, str] | None = None) -> Sent:
        """Send one statement (``:name`` parameters; ``literals``: see ``driver_text``);
        PostgreSQL starts on it at once."""
        cursor = self._driver.cursor(row_factory=dict_row)
        with self.translated():
            cursor.execute(driver_text(self._connection, sql, literals), params)
        return Sent(self, cursor)

    def commit(self) -> None:
        """On a session of explicit transactions, send the COMMIT of the transaction after
        the statements sent (their rows stay readable); otherwise nothing: the session's
        own commit ends its transaction."""
        if self._driver.autocommit:
            with self.translated():
                self._driver.execute(b"COMMIT")

    @contextmanager
    def translated(self) -> Iterator[None]:
        """The driver's errors as SQLAlchemy's, the connection invalidated if it broke."""
        try:
            yield
        except psycopg.Error as exc:
            raise _translated(self._connection, exc) from exc


def _translated(connection: Connection, exc: psycopg.Error) -> Exception:
    dialect = connection.dialect
    broken = dialect.is_disconnect(cast(Any, exc), connection.connection.dbapi_connection,
                                   None)
    if broken:
        connection.invalidate(exc)
    return DBAPIError.instance(None, None, exc, psycopg.Error, hide_parameters=True,
                               connection_invalidated=broken, dialect=dialect)


@contextmanager
def pipeline(session: Session, *, begin: bool = True) -> Iterator[Pipe]:
    """A ``Pipe`` on the session's connection, in its transaction; leaving the block
    waits for every statement sent. ``begin=False``: on a session of explicit
    transactions with none open, the statements run as transactions of their own."""
    connection = session.connection()
    driver = _driver(connection)
    pipe = Pipe(connection, driver)
    with pipe.translated(), driver.pipeline():
        if (begin and driver.autocommit
                and driver.info.transaction_status == TransactionStatus.IDLE):
            driver.execute(b"BEGIN")
        yield pipe
