"""Plans PostgreSQL makes for recall's statements, read with EXPLAIN."""

from __future__ import annotations

import re
from collections.abc import Mapping

from sqlalchemy.orm import Session

from memoryd.memory.recall_sql import Sql, settings_statement

_BIND = re.compile(r"(?<![:\w]):(\w+)")


def generic_plan(session: Session, sql: Sql, settings: Mapping[str, str]) -> str:
    """The generic plan of ``sql`` (planned without its parameters' values, as a
    prepared statement's generic plan is) under the transaction ``settings``, as text."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    setup = settings_statement(settings)
    if setup is not None:
        setup.run(session)
    numbered = _BIND.sub(number, sql.text)
    lines = session.connection().exec_driver_sql(
        "EXPLAIN (GENERIC_PLAN) " + numbered.replace("%", "%%")).scalars().all()
    return "\n".join(lines)
