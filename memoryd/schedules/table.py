"""The one table of maintenance jobs: what each does and when it runs.

Each entry takes the job function itself (as arq's ``cron(func)`` does), from the jobs
of ``memoryd.memory.maintenance.jobs``: the job's name is the function's name, its
description the first paragraph of its docstring.
The job registry (``JOBS``), the Celery tasks (``memoryd.tasks.maintenance``), Celery
beat (``beat.py``) and the in-process APScheduler mode (``aps.py``) are all derived
from it, so they cannot drift apart: change a time here (or with
``MEMORYD_SCHEDULE_<JOB>``) and both deployment modes follow.

Thin clients cannot import this module (the job functions need SQLAlchemy); they
check job names against ``memoryd.schedules.names``, which a test keeps equal to it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import TYPE_CHECKING

from memoryd.celery_config import MAINTENANCE_TASK_PREFIX
from memoryd.errors import ConfigError
from memoryd.memory.maintenance.context import JobFn
from memoryd.memory.maintenance.jobs import JOBS as JOB_FUNCTIONS
from memoryd.schedules.cron import Cron, parse_cron

if TYPE_CHECKING:
    from memoryd.config import Settings

OFF = "off"
ENV_PREFIX = "MEMORYD_SCHEDULE_"

_MINUTES_PER_DAY = 24 * 60
_MAX_SLACK_S = 3600


@dataclass(frozen=True)
class ScheduleEntry:
    """One periodic job: what runs, when (five-field cron), and how long a tick may wait.

    ``expires_s`` bounds how late a tick may still start. A tick that could not be
    delivered in time (broker down, workers busy, laptop asleep) is dropped, so a
    backlog never turns into a burst of identical maintenance runs; the next tick
    does the work anyway.
    """

    job: str
    fn: JobFn
    cron: str
    expires_s: int
    description: str

    @property
    def task_name(self) -> str:
        """The Celery task this entry sends (and the name workers register)."""
        return f"{MAINTENANCE_TASK_PREFIX}{self.job}"

    def parsed(self) -> Cron:
        """The cron string, parsed (it was validated when the entry was built)."""
        return parse_cron(self.cron, self.job)


def scheduled(fn: JobFn, cron: str) -> ScheduleEntry:
    """The entry running job function ``fn`` at ``cron``; its expiry follows the cadence."""
    parsed = parse_cron(cron, fn.__name__)
    return ScheduleEntry(job=fn.__name__, fn=fn, cron=str(parsed),
                         expires_s=expires_for(parsed), description=_summary(fn))


def _summary(fn: JobFn) -> str:
    """The first paragraph of ``fn``'s docstring, on one line."""
    doc = inspect.getdoc(fn)
    if not doc:
        raise ValueError(f"job {fn.__name__} needs a docstring: it is its description")
    return " ".join(doc.split("\n\n", 1)[0].split())


def expires_for(cron: Cron) -> int:
    """How long a tick of ``cron`` may be late: its shortest gap minus some slack.

    The slack is a sixth of the gap, at most an hour, so a late tick is always
    dropped before the next one is due: hourly jobs get 50 min, 6-hourly 5 h, daily
    23 h. It assumes consecutive days may fire, which errs towards the shorter
    (safer) expiry for weekday-only schedules.
    """
    sets = cron.expand()
    times = sorted(hour * 60 + minute for hour in sets.hour for minute in sets.minute)
    gaps = [later - earlier for earlier, later in pairwise(times)]
    gaps.append(times[0] + _MINUTES_PER_DAY - times[-1])
    gap_s = min(gaps) * 60
    return gap_s - min(gap_s // 6, _MAX_SLACK_S)


# Daily jobs are staggered (03:00, 03:30, 03:40, 04:00, 05:00) so they do not compete
# for the database at the same minute; the hourly and 6-hourly ones avoid each other's
# minutes (expire :00, compact_sessions :15, cortex :30 past consolidate's hour,
# index_agents :45, reembed :50; with nothing to re-embed it ends after a few index
# probes). reconcile runs before summarize, which would otherwise fold a replaced fact
# that is still current into a summary.
DEFAULT_SCHEDULE: tuple[ScheduleEntry, ...] = tuple(
    scheduled(JOB_FUNCTIONS[job], cron) for job, cron in (
        ("consolidate", "0 */6 * * *"),
        ("evict", "0 3 * * *"),
        ("expire", "0 * * * *"),
        ("deduplicate", "30 3 * * *"),
        ("summarize", "0 4 * * *"),
        ("cortex", "30 */6 * * *"),
        ("compact_sessions", "15 * * * *"),
        ("repair_sessions", "0 5 * * *"),
        ("index_agents", "45 * * * *"),
        ("reembed", "50 * * * *"),
        ("reconcile", "40 3 * * *"),
    ))

# Every job's entry by name, in table order.
JOBS: dict[str, ScheduleEntry] = {entry.job: entry for entry in DEFAULT_SCHEDULE}


def effective_schedule(settings: Settings) -> list[ScheduleEntry]:
    """The table after ``MEMORYD_SCHEDULE_<JOB>`` overrides, in table order.

    An override of ``off`` (any case) removes the job; any other value replaces
    the cron string, and the expiry is re-derived from it so that, say, moving a
    daily job to every 15 minutes does not leave it with a 23-hour expiry.
    Times are wall-clock times in ``settings.timezone``. An override naming no job
    is a ConfigError: a misspelt variable would otherwise be ignored.
    """
    unknown = sorted(set(settings.schedule) - set(JOBS))
    if unknown:
        names = ", ".join(f"{ENV_PREFIX}{job.upper()}" for job in unknown)
        raise ConfigError(f"{names}: no such maintenance job; one of {list(JOBS)}")
    entries = []
    for entry in DEFAULT_SCHEDULE:
        override = settings.schedule.get(entry.job)
        if override is None:
            entries.append(entry)
        elif override.lower() != OFF:
            cron = parse_cron(override, f"{ENV_PREFIX}{entry.job.upper()}")
            entries.append(replace(entry, cron=str(cron), expires_s=expires_for(cron)))
    return entries
