"""A database error that quotes memory content, as a failed INSERT raises it: the
server's DETAIL repeats the row and SQLAlchemy keeps the statement's parameters."""

from __future__ import annotations

import psycopg
from sqlalchemy.exc import IntegrityError


def database_error(canary: str) -> IntegrityError:
    driver = psycopg.errors.CheckViolation(
        'new row for relation "memories" violates check constraint "no_canary"\n'
        f"DETAIL:  Failing row contains (1, agent-1, {canary}).")
    return IntegrityError("INSERT INTO memories (content) VALUES (%(content)s)",
                          {"content": canary}, driver)
