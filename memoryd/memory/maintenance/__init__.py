"""Maintenance jobs: plain functions over the store, each returning typed stats.

Which jobs exist is ``jobs.JOBS``; when they run is the schedule table's business
(``memoryd.schedules.table``). ``run_job`` takes a job's fleet-wide advisory lock,
records the run in ``maintenance_runs`` and calls the job function;
``run_to_completion`` repeats it until the work is done. Jobs import the memory layer
and those below it; schedules, tasks and the CLI call them from above.
"""

from memoryd.memory.maintenance.context import JobContext, JobOutcome
from memoryd.memory.maintenance.restoring import already_restored, restore
from memoryd.memory.maintenance.runner import RunRecord, run_job, run_to_completion

__all__ = ["JobContext", "JobOutcome", "RunRecord", "already_restored", "restore",
           "run_job", "run_to_completion"]
