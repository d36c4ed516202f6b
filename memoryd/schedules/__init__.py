"""When maintenance runs: one table (``table``) rendered for Celery beat (``beat``)
and for the in-process APScheduler mode (``aps``).

Only the dependency-free parts are re-exported here: ``memoryd.config`` imports
``memoryd.schedules.cron`` while validating settings, and the thin client must not
pull in APScheduler. Import ``memoryd.schedules.beat`` / ``.aps`` explicitly.
"""

from memoryd.schedules.cron import Cron, CronSets, parse_cron
from memoryd.schedules.table import (
    DEFAULT_SCHEDULE,
    QUEUE,
    ScheduleEntry,
    effective_schedule,
    expires_for,
)

__all__ = [
    "DEFAULT_SCHEDULE",
    "QUEUE",
    "Cron",
    "CronSets",
    "ScheduleEntry",
    "effective_schedule",
    "expires_for",
    "parse_cron",
]
