"""The schedule table rendered as Celery's ``beat_schedule``.

Celery interprets ``crontab`` in the *app's* timezone: the Celery app must set
``timezone=settings.timezone`` (and ``enable_utc=True``, Celery's default) for
these entries to fire at the same wall-clock times as the APScheduler mode.
This module only builds the mapping; it does not configure the app.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from celery.schedules import crontab

from memoryd.celery_config import MAINTENANCE_QUEUE
from memoryd.schedules.table import ScheduleEntry, effective_schedule

if TYPE_CHECKING:
    from memoryd.config import Settings


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    """``{job: {"task", "schedule", "options"}}`` for every enabled job.

    ``options["expires"]`` makes a tick that is still undelivered after
    ``expires_s`` seconds be discarded by the worker instead of run late.
    """
    return {entry.job: _beat_entry(entry) for entry in effective_schedule(settings)}


def to_crontab(entry: ScheduleEntry) -> crontab:
    """The entry's cron as a Celery ``crontab``.

    Restricted fields are passed as explicit value lists from ``Cron.expand``:
    Celery rejects ``7`` for Sunday and ``N/step``, which cron (and memoryd)
    accept. Celery's weekday numbering (0 = Sunday) matches cron's.
    """
    return crontab(**entry.parsed().spelled_out())


def _beat_entry(entry: ScheduleEntry) -> dict[str, Any]:
    return {
        "task": entry.task_name,
        "schedule": to_crontab(entry),
        "options": {"queue": MAINTENANCE_QUEUE, "expires": entry.expires_s},
    }
