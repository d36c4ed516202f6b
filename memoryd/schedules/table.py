"""The one table of maintenance jobs, and the settings overrides applied to it.

Celery beat (``beat.py``) and the in-process APScheduler mode (``aps.py``) are
both rendered from ``effective_schedule``, so the two deployment modes cannot
drift apart: change a time here (or with ``MEMORYD_SCHEDULE_<JOB>``) and both follow.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import pairwise
from typing import TYPE_CHECKING

from memoryd.config import JOBS
from memoryd.schedules.cron import Cron, parse_cron

if TYPE_CHECKING:
    from memoryd.config import Settings

TASK_PREFIX = "memoryd.maintenance."
QUEUE = "maintenance"
OFF = "off"

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
    cron: str
    expires_s: int
    description: str

    @property
    def task_name(self) -> str:
        """The Celery task this entry sends (and the name workers register)."""
        return f"{TASK_PREFIX}{self.job}"

    def parsed(self) -> Cron:
        """The cron string, parsed (it was validated when the entry was built)."""
        return parse_cron(self.cron, self.job)


# Daily jobs are staggered (03:00, 03:30, 04:00, 05:00) so they do not compete for
# the database at the same minute; the hourly and 6-hourly ones avoid each other's
# minutes (expire :00, compact_sessions :15, cortex :30 past consolidate's hour,
# index_agents :45).
DEFAULT_SCHEDULE: tuple[ScheduleEntry, ...] = (
    ScheduleEntry("consolidate", "0 */6 * * *", 5 * 3600,
                  "Consolidate recent memories and sessions."),
    ScheduleEntry("evict", "0 3 * * *", 23 * 3600,
                  "Evict memories beyond the retention limits."),
    ScheduleEntry("expire", "0 * * * *", 50 * 60,
                  "Remove memories whose expiry time has passed."),
    ScheduleEntry("deduplicate", "30 3 * * *", 23 * 3600,
                  "Merge near-duplicate memories."),
    ScheduleEntry("summarize", "0 4 * * *", 23 * 3600,
                  "Summarize sessions and memories."),
    ScheduleEntry("cortex", "30 */6 * * *", 5 * 3600,
                  "Run the cortex pass."),
    ScheduleEntry("compact_sessions", "15 * * * *", 50 * 60,
                  "Compact long sessions."),
    ScheduleEntry("repair_sessions", "0 5 * * *", 23 * 3600,
                  "Repair inconsistent session records."),
    ScheduleEntry("index_agents", "45 * * * *", 50 * 60,
                  "Give each large agent an HNSW index of its own."),
)

if tuple(entry.job for entry in DEFAULT_SCHEDULE) != JOBS:  # pragma: no cover
    raise RuntimeError("DEFAULT_SCHEDULE must list exactly memoryd.config.JOBS, in order")


def expires_for(cron: Cron) -> int:
    """How long a tick of ``cron`` may be late: its shortest gap minus some slack.

    The slack is a sixth of the gap, at most an hour, so a late tick is always
    dropped before the next one is due. This yields the table's values: hourly
    50 min, 6-hourly 5 h, daily 23 h. It assumes consecutive days may fire,
    which errs towards the shorter (safer) expiry for weekday-only schedules.
    """
    sets = cron.expand()
    times = sorted(hour * 60 + minute for hour in sets.hour for minute in sets.minute)
    gaps = [later - earlier for earlier, later in pairwise(times)]
    gaps.append(times[0] + _MINUTES_PER_DAY - times[-1])
    gap_s = min(gaps) * 60
    return gap_s - min(gap_s // 6, _MAX_SLACK_S)


def effective_schedule(settings: Settings) -> list[ScheduleEntry]:
    """The table after ``MEMORYD_SCHEDULE_<JOB>`` overrides, in ``JOBS`` order.

    An override of ``off`` (any case) removes the job; any other value replaces
    the cron string, and the expiry is re-derived from it so that, say, moving a
    daily job to every 15 minutes does not leave it with a 23-hour expiry.
    Times are wall-clock times in ``settings.timezone``.
    """
    entries = []
    for entry in DEFAULT_SCHEDULE:
        override = _override(settings, entry.job)
        if override is None:
            entries.append(entry)
        elif override.lower() != OFF:
            cron = parse_cron(override, f"MEMORYD_SCHEDULE_{entry.job.upper()}")
            entries.append(replace(entry, cron=str(cron), expires_s=expires_for(cron)))
    return entries


def _override(settings: Settings, job: str) -> str | None:
    value: str | None = getattr(settings, f"schedule_{job}")
    if value is None or not value.strip():
        return None
    return value.strip()
