"""Where a job's sweep stands, kept in its run's audit row.

A job's progress lives in its run's ``maintenance_runs.stats -> 'checkpoint'``,
written in the same transaction as the batch it describes. The latest checkpoint of
the same job and scope is where the next run starts: it survives crashes (the row
stays 'running'), failures and time-outs, and needs no schema of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd.memory.maintenance.context import JobContext


def load_checkpoint(ctx: JobContext, job_name: str) -> dict[str, Any]:
    """The latest checkpoint a non-dry run of ``job_name`` in this scope left, or {}."""
    with ctx.store.session() as session:
        value = session.execute(text("""
            SELECT stats -> 'checkpoint' FROM maintenance_runs
            WHERE job = :job AND NOT dry_run AND stats -> 'checkpoint' IS NOT NULL
              AND agent_id IS NOT DISTINCT FROM :agent_id AND id IS DISTINCT FROM :run_id
            ORDER BY id DESC LIMIT 1
        """), {"job": job_name, "agent_id": ctx.agent_id, "run_id": ctx.run_id}).scalar()
    return dict(value) if isinstance(value, dict) else {}


def valid_state(value: object, keys: Sequence[str]) -> dict[str, Any] | None:
    """A copy of a checkpointed state with all of ``keys``; None (start afresh) if it has
    not, e.g. one written by an older version of the job."""
    if isinstance(value, dict) and all(key in value for key in keys):
        return dict(value)
    return None


def save_checkpoint(session: Session, ctx: JobContext, checkpoint: Mapping[str, Any]) -> None:
    """Record progress in this run's audit row, inside the caller's transaction."""
    if ctx.dry_run or ctx.run_id is None:
        return
    session.execute(text("""
        UPDATE maintenance_runs
        SET stats = stats || jsonb_build_object('checkpoint', CAST(:cp AS jsonb))
        WHERE id = :id
    """), {"cp": json.dumps(checkpoint), "id": ctx.run_id})
