"""The Celery application: JSON only, acks late, two queues, beat from the schedule table."""

from __future__ import annotations

from typing import Any

from celery import Celery
from kombu.entity import Queue

from memoryd.config import Settings, get_settings

MEMORY_QUEUE = "memory"
MAINTENANCE_QUEUE = "maintenance"
TASK_MODULES = ("memoryd.tasks.memory", "memoryd.tasks.maintenance")


def celery_config(settings: Settings) -> dict[str, Any]:
    """Settings shared by the worker app and the thin client's app."""
    transport = {"visibility_timeout": settings.visibility_timeout_s}
    return {
        "broker_url": settings.resolved_broker_url(),
        "result_backend": settings.resolved_result_backend(),
        # No pickle anywhere near the broker.
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "task_queues": (Queue(MEMORY_QUEUE), Queue(MAINTENANCE_QUEUE)),
        "task_default_queue": MEMORY_QUEUE,
        "task_routes": {"memoryd.maintenance.*": {"queue": MAINTENANCE_QUEUE},
                        "memoryd.*": {"queue": MEMORY_QUEUE}},
        "broker_transport_options": transport,
        "result_backend_transport_options": transport,
        "broker_connection_retry_on_startup": True,
        "result_expires": settings.result_expires_s,
        "timezone": settings.timezone,
        "enable_utc": True,
    }


def worker_config(settings: Settings) -> dict[str, Any]:
    from memoryd.schedules.beat import beat_schedule

    return {
        **celery_config(settings),
        # A task is acknowledged only after it ran; if the worker dies, it is redelivered.
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_soft_time_limit": settings.task_soft_time_limit_s,
        "task_time_limit": settings.task_time_limit_s,
        "task_track_started": True,
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
