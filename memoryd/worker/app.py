"""The worker's Celery application: the shared configuration (``memoryd.celery_config``)
plus what only workers and beat need: acks late, time limits, events, the schedule."""

from __future__ import annotations

from typing import Any

from celery import Celery

from memoryd.broker import broker_for
from memoryd.broker.redis_results import worker_backend
from memoryd.celery_config import celery_config
from memoryd.config import Settings, get_settings
from memoryd.errors import NoBrokerConfigured

TASK_MODULES = ("memoryd.tasks.memory", "memoryd.tasks.maintenance", "memoryd.tasks.admin",
                "memoryd.tasks.working")
# What an app built without a broker is configured with: Redis's queues (memoryd's
# default broker), and nowhere to connect (``WorkerApp`` refuses first).
_NO_BROKER_URL, _NO_RESULT_BACKEND = "redis://", "disabled://"


class WorkerApp(Celery):  # type: ignore[misc]
    """memoryd's worker app. Built without a broker when none is configured (importing
    the tasks needs none): it then refuses every connection with the reason, rather
    than trying Celery's default broker."""

    no_broker: NoBrokerConfigured | None = None

    def _connection(self, url: Any, *args: Any, **kwargs: Any) -> Any:
        if self.no_broker is not None:
            raise self.no_broker
        return super()._connection(url, *args, **kwargs)


def worker_config(settings: Settings, broker_url: str | None = None,
                  result_backend: str | None = None) -> dict[str, Any]:
    from memoryd.schedules.beat import beat_schedule

    config = celery_config(settings, broker_url=broker_url, result_backend=result_backend)
    return {
        **config,
        **broker_for(config["broker_url"]).worker_options(settings),
        # Results written in one atomic round trip (``memoryd.broker.redis_results``).
        "result_backend": worker_backend(config["result_backend"]),
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
    app = WorkerApp("memoryd", include=list(TASK_MODULES), set_as_current=True)
    try:
        app.conf.update(worker_config(settings))
    except NoBrokerConfigured as missing:
        app.no_broker = missing
        app.conf.update(worker_config(settings, _NO_BROKER_URL, _NO_RESULT_BACKEND))
    return app
