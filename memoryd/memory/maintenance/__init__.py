"""Maintenance jobs: plain functions over the store, each returning typed stats.

``run_job`` is the single entry point used by the Celery tasks, APScheduler and
the CLI: it takes the job's fleet-wide advisory lock, records the run in
``maintenance_runs`` and calls the job function.
"""

from memoryd.memory.maintenance.base import (
    JOBS,
    JobContext,
    JobOutcome,
    RunRecord,
    job,
    run_job,
    run_to_completion,
)

__all__ = ["JOBS", "JobContext", "JobOutcome", "RunRecord", "job", "run_job", "run_to_completion"]
