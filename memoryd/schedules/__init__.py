"""When maintenance runs: one table (``table``) rendered for Celery beat (``beat``)
and for the in-process APScheduler mode (``aps``).

Only the dependency-free parts are re-exported here: ``memoryd.config`` imports
``memoryd.schedules.cron`` while validating settings, and the thin client must pull
in neither the job functions (which the table imports) nor APScheduler. Import
``memoryd.schedules.table`` / ``.beat`` / ``.aps`` explicitly. So ``names`` and
``cron`` belong to the base layer (``memoryd.layers``); the table, beat and APScheduler
sit above the maintenance jobs they run, below the worker and tasks.
"""

from memoryd.schedules.cron import Cron, CronSets, parse_cron
from memoryd.schedules.names import JOB_NAMES

__all__ = ["JOB_NAMES", "Cron", "CronSets", "parse_cron"]
