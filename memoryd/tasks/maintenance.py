"""Maintenance tasks (queue ``maintenance``): one per entry of the schedule table,
named ``memoryd.maintenance.<job>``.

Each run works in bounded batches for at most its time budget; if work is
left, it enqueues a follow-up run of itself, so no single task holds a message
for long and the broker's visibility timeout can stay short.
"""

from __future__ import annotations

from typing import Any

import structlog
from celery import Task

from memoryd.errors import LLMUnavailable
from memoryd.memory.maintenance import run_job
from memoryd.schedules.table import DEFAULT_SCHEDULE, ScheduleEntry
from memoryd.tasks.base import MemorydTask, get_store
from memoryd.worker import app

log = structlog.get_logger(__name__)

MAX_FOLLOW_UPS = 1000  # a guard against a job that never reports completion
LLM_RETRY_DEFAULT_S = 60.0


def run(task: Task, job: str, agent_id: str | None, dry_run: bool,
        params: dict[str, Any] | None, follow_up: int) -> dict[str, Any]:
    try:
        record = run_job(get_store(), job, agent_id=agent_id, dry_run=dry_run, params=params)
    except LLMUnavailable as exc:
        # Rate-limited or overloaded: try again later rather than fail the job.
        raise task.retry(exc=exc, countdown=exc.retry_after or LLM_RETRY_DEFAULT_S,
                         max_retries=5) from exc
    if record.status == "ok" and not record.complete and follow_up < MAX_FOLLOW_UPS:
        task.apply_async(kwargs={"agent_id": agent_id, "dry_run": dry_run, "params": params,
                                 "follow_up": follow_up + 1}, countdown=1)
        log.info("maintenance.follow_up_enqueued", job=job, follow_up=follow_up + 1)
    return record.as_dict()


def _make_task(entry: ScheduleEntry) -> Task:
    def maintenance_task(self: Task, agent_id: str | None = None, dry_run: bool = False,
                         params: dict[str, Any] | None = None,
                         follow_up: int = 0) -> dict[str, Any]:
        return run(self, entry.job, agent_id, dry_run, params, follow_up)

    maintenance_task.__name__ = entry.job
    maintenance_task.__doc__ = (
        f"Run maintenance job {entry.job!r} under its fleet-wide lock. Idempotent: a second "
        "run in a row changes nothing; a run that finds the lock held records 'skipped'.")
    return app.task(name=entry.task_name, base=MemorydTask, bind=True,
                    track_started=True)(maintenance_task)


TASKS: dict[str, Task] = {entry.job: _make_task(entry) for entry in DEFAULT_SCHEDULE}
