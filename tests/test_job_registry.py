"""Every scheduled job has an implementation, a Celery task and a schedule entry."""

from __future__ import annotations

from memoryd.config import JOBS
from memoryd.memory.maintenance.base import JOBS as REGISTERED
from memoryd.memory.maintenance.base import _load_jobs
from memoryd.schedules.table import DEFAULT_SCHEDULE


def test_jobs_schedule_and_tasks_agree() -> None:
    _load_jobs()
    from memoryd.tasks.maintenance import TASKS

    assert set(REGISTERED) == set(JOBS)
    assert {entry.job for entry in DEFAULT_SCHEDULE} == set(JOBS)
    assert {task.name for task in TASKS.values()} == {f"memoryd.maintenance.{j}" for j in JOBS}
    for spec in REGISTERED.values():
        assert spec.description, spec.name
