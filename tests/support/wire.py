"""The protocol messages between memoryd and PostgreSQL, from libpq's own trace: how
tests count round trips on the wire rather than trusting which statements were sent."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from psycopg import pq
from sqlalchemy import Engine, event


@contextmanager
def wire(engine: Engine, folder: Path) -> Iterator[list[str]]:
    """The protocol messages of every connection checked out of ``engine`` meanwhile,
    in order: "F <message>" sent, "B <message>" received (traced into ``folder``)."""
    messages: list[str] = []
    traced: list[Path] = []

    def start(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        path = folder / f"trace-{len(traced)}"
        pgconn = dbapi_connection.pgconn
        pgconn.trace(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        traced.append(path)

    def stop(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.pgconn.untrace()  # flushes the trace

    event.listen(engine, "checkout", start)
    event.listen(engine, "checkin", stop)
    try:
        yield messages
    finally:
        event.remove(engine, "checkout", start)
        event.remove(engine, "checkin", stop)
        for path in traced:
            for line in path.read_text().splitlines():
                fields = line.split("\t")  # a statement's text may continue on more lines
                if len(fields) >= 3 and fields[0] in ("F", "B") and fields[1].isdigit():
                    messages.append(f"{fields[0]} {fields[2]}")


def round_trips(messages: list[str]) -> int:
    """How many times the client sent something and then waited for an answer."""
    return sum(1 for before, after in itertools.pairwise(messages)
               if before.startswith("F") and after.startswith("B"))
