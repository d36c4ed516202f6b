"""The schedule table rendered as APScheduler 3.x jobs, for single-node use.

Without a broker, ``memoryd`` runs maintenance in-process on an APScheduler
scheduler instead of Celery beat + workers. The jobs come from the same
``effective_schedule`` as the beat schedule, so both modes fire at the same times.

APScheduler 3.x numbers weekdays from 0 = Monday, and ``CronTrigger.from_crontab``
does *not* translate cron's 0 = Sunday (the installed 3.11 passes the field
through unchanged), so a cron ``1-5`` would run Tuesday to Saturday. We therefore
pass weekdays by name (``mon``..``sun``), computed from ``Cron.expand``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.blocking import BlockingScheduler
from apscheduler.triggers.cron import CronTrigger

from memoryd.schedules.table import ScheduleEntry, effective_schedule

if TYPE_CHECKING:
    from memoryd.config import Settings

# Indexed by cron's weekday number: 0 = Sunday .. 6 = Saturday.
_CRON_WEEKDAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# APScheduler's own order, for a readable, sorted rendering.
_APS_WEEKDAY_ORDER = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


def cron_trigger(entry: ScheduleEntry, timezone: str) -> Any:
    """The entry's cron as a ``CronTrigger`` firing at wall-clock times in ``timezone``."""
    cron = entry.parsed()
    fields = cron.spelled_out()
    return CronTrigger(
        minute=fields["minute"], hour=fields["hour"], day=fields["day_of_month"],
        month=fields["month_of_year"],
        day_of_week=_weekdays(cron.day_of_week, cron.expand().day_of_week),
        timezone=timezone,
    )


def add_jobs(scheduler: Any, settings: Settings, run_job: Callable[[str], object]) -> list[str]:
    """Add one job per enabled entry, calling ``run_job(job_name)``; return the job ids.

    ``max_instances=1`` and ``coalesce=True`` keep a slow run from overlapping the
    next one and collapse missed ticks into one; ``misfire_grace_time`` is the
    entry's ``expires_s``, the same lateness bound Celery applies with ``expires``.
    """
    ids = []
    for entry in effective_schedule(settings):
        scheduler.add_job(
            run_job,
            trigger=cron_trigger(entry, settings.timezone),
            args=[entry.job],
            id=entry.job,
            name=entry.task_name,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=entry.expires_s,
            replace_existing=True,
        )
        ids.append(entry.job)
    return ids


def build_scheduler(settings: Settings, run_job: Callable[[str], object], *,
                    blocking: bool = False) -> Any:
    """A not-yet-started scheduler with every enabled job added.

    ``BackgroundScheduler`` (default) runs jobs in a thread pool beside the caller;
    ``blocking=True`` returns a ``BlockingScheduler`` whose ``start()`` never
    returns, for a dedicated scheduler process.
    """
    factory = BlockingScheduler if blocking else BackgroundScheduler
    scheduler = factory(timezone=settings.timezone)
    add_jobs(scheduler, settings, run_job)
    return scheduler


def _weekdays(raw: str, cron_days: frozenset[int]) -> str:
    if raw == "*":
        return "*"
    names = {_CRON_WEEKDAY_NAMES[day] for day in cron_days}
    return ",".join(name for name in _APS_WEEKDAY_ORDER if name in names)
