"""The dead-letter table: poison messages a worker set aside instead of running again.

``record`` is called by the worker's delivery guard (``memoryd.worker.poison``);
``listing``, ``take`` and ``drop`` by ``memoryd dlq``. Recording is idempotent per task
id: a dead letter redelivered before its acknowledgement reached the broker is recorded
once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session

from memoryd.errors import NotFound


@dataclass(frozen=True)
class DeadLetter:
    id: int
    task_id: str
    task_name: str
    queue: str
    agent_id: str | None
    deliveries: int
    args: list[Any]
    kwargs: dict[str, Any]
    created_at: datetime

    def summary(self) -> dict[str, Any]:
        """What listings show: never the arguments (they hold memory content)."""
        return {"id": self.id, "task_id": self.task_id, "task": self.task_name,
                "queue": self.queue, "agent_id": self.agent_id,
                "deliveries": self.deliveries, "created_at": self.created_at.isoformat()}


_COLUMNS = "id, task_id, task_name, queue, agent_id, deliveries, args, kwargs, created_at"


def record(session: Session, *, task_id: str, task_name: str, queue: str,
           agent_id: str | None, deliveries: int, args: Sequence[Any],
           kwargs: dict[str, Any]) -> None:
    session.execute(text("""
        INSERT INTO dead_letters (task_id, task_name, queue, agent_id, deliveries, args, kwargs)
        VALUES (:task_id, :task_name, :queue, :agent_id, :deliveries, :args, :kwargs)
        ON CONFLICT (task_id) DO UPDATE SET deliveries = EXCLUDED.deliveries
    """).bindparams(bindparam("args", type_=JSONB), bindparam("kwargs", type_=JSONB)),
        {"task_id": task_id, "task_name": task_name, "queue": queue, "agent_id": agent_id,
         "deliveries": deliveries, "args": list(args), "kwargs": kwargs})


def listing(session: Session, limit: int = 100) -> list[DeadLetter]:
    rows = session.execute(text(f"SELECT {_COLUMNS} FROM dead_letters ORDER BY id DESC "
                                "LIMIT :limit"), {"limit": limit})
    return [DeadLetter(**row._mapping) for row in rows]


def count(session: Session) -> int:
    return int(session.execute(text("SELECT count(*) FROM dead_letters")).scalar_one())


def take(session: Session, letter_id: int) -> DeadLetter:
    """Remove and return one dead letter (to send it again in the same transaction's
    wake: the caller commits only after sending)."""
    row = session.execute(text(f"DELETE FROM dead_letters WHERE id = :id RETURNING {_COLUMNS}"),
                          {"id": letter_id}).one_or_none()
    if row is None:
        raise NotFound(f"dead letter {letter_id} not found")
    return DeadLetter(**row._mapping)


def drop(session: Session, letter_id: int) -> None:
    take(session, letter_id)
