"""The worker's Celery application: the shared configuration (``memoryd.celery_config``)
plus what only workers and beat need: acks late, time limits, events, the schedule."""

from __future__ import annotations

from typing import Any

from celery import Celery

from memoryd.broker import broker_for
from memoryd.celery_config import celery_config
from memoryd.config import Settings, get_settings

TASK_MODULES = ("memoryd.tasks.memory", "memoryd.tasks.maintenance", "memoryd.tasks.admin")


def worker_config(settings: Settings) -> dict[str, Any]:
    from memoryd.schedules.beat import beat_schedule

    config = celery_config(settings)
    return {
        **config,
        **broker_for(config["broker_url"]).worker_options(settings),
        # A task is acknowledged only after it ran; if the worker dies, it is redelivered.
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_soft_time_limit": settings.task_soft_time_limit_s,
        "task_time_limit": settings.task_time_limit_s,
        # No STARTED state for store and recall: it costs each call a result write and a
        # wake-up of the waiting client; maintenance tasks, which run for minutes, turn it
        # on for themselves.
        "task_track_started": False,
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        "worker_hijack_root_logger": False,
        "worker_redirect_stdouts": False,
        "beat_schedule": beat_schedule(settings),
    }


def create_app(settings: Settings | None = None) -> Celery:
    settings = settings or get_settings()
    app = Celery("memoryd", include=list(TASK_MODULES), set_as_current=True)
    app.conf.update(worker_config(settings))
    return app
