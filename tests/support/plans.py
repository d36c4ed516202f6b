"""Plans PostgreSQL makes for recall's statements, read with EXPLAIN."""

from __future__ import annotations

import re
from collections.abc import Mapping

from sqlalchemy.orm import Session

from memoryd.db.pipeline import driver_text
from memoryd.memory.recall_sql import Sql, settings_statement

# In the driver's text: a doubled percent sign (a literal one) or a named parameter.
_DRIVER_TOKEN = re.compile(r"%%|%\((\w+)\)s")


def generic_plan(session: Session, sql: Sql, settings: Mapping[str, str]) -> str:
    """The generic plan of ``sql`` (planned without its parameters' values, as a
    prepared statement's generic plan is) under the transaction ``settings``, as text."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) is None:
            return "%"
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    setup = settings_statement(settings)
    if setup is not None:
        setup.run(session)
    connection = session.connection()
    # The text as the driver gets it (literals quoted in), its parameters numbered.
    numbered = _DRIVER_TOKEN.sub(number, driver_text(connection, sql.text, sql.literals))
    lines = connection.exec_driver_sql("EXPLAIN (GENERIC_PLAN) " + numbered,
                                       execution_options={"no_parameters": True})
    return "\n".join(lines.scalars().all())
