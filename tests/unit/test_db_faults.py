"""Which database errors are retried, judged by SQLSTATE (``memoryd.db.faults``), with
psycopg's own error classes wrapped as SQLAlchemy wraps them."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors as pg
from sqlalchemy.exc import DataError, IntegrityError, InterfaceError, OperationalError

from memoryd.db import faults
from memoryd.errors import ValidationError, WorkerError


def _wrapped(wrapper: type[Exception], orig: Exception) -> Exception:
    return wrapper("SELECT secret FROM memories", {"content": "a secret"}, orig)  # type: ignore[call-arg]


@pytest.mark.parametrize("orig", [pg.AdminShutdown(), pg.SerializationFailure(),
                                  pg.DeadlockDetected(), pg.QueryCanceled(),
                                  pg.TooManyConnections(), pg.LockNotAvailable(),
                                  psycopg.OperationalError("connection failed")])
def test_connection_conflict_and_shutdown_errors_are_transient(orig: Exception) -> None:
    assert faults.transient(_wrapped(OperationalError, orig))


def test_an_interface_error_without_an_answer_is_transient() -> None:
    assert faults.transient(_wrapped(InterfaceError, psycopg.InterfaceError("closed")))


@pytest.mark.parametrize(("wrapper", "orig"), [
    (OperationalError, pg.ProgramLimitExceeded()),
    (DataError, pg.NumericValueOutOfRange()),
    (DataError, pg.DatetimeFieldOverflow()),
    (IntegrityError, pg.UniqueViolation()),
])
def test_errors_no_retry_can_fix_are_refused_without_the_databases_text(
        wrapper: type[Exception], orig: Exception) -> None:
    error = _wrapped(wrapper, orig)
    assert not faults.transient(error)
    refused = faults.refusal(error)
    assert isinstance(refused, ValidationError)
    assert "secret" not in str(refused) and "SELECT" not in str(refused)


def test_other_database_errors_are_internal_without_the_databases_text() -> None:
    refused = faults.refusal(_wrapped(OperationalError, pg.UndefinedTable()))
    assert isinstance(refused, WorkerError) and "42P01" in str(refused)
    assert "secret" not in str(refused)


def test_errors_that_are_not_the_databases_are_not_judged_transient() -> None:
    assert not faults.transient(ConnectionError("broker"))
