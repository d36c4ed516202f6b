"""The Celery application: JSON only, acks late, two queues, beat from the schedule table."""

from __future__ import annotations

from typing import Any

from celery import Celery
from kombu.entity import Queue

from memoryd.config import Settings, get_settings

MEMORY_QUEUE = "memory"
MAINTENANCE_QUEUE = "maintenance"
TASK_MODULES = ("memoryd.tasks.memory", "memoryd.tasks.maintenance")


def restore_interval_s(visibility_timeout_s: int) -> int:
    """Seconds between a worker's sweeps for messages of dead workers (1 to 10)."""
    return max(1, min(10, visibility_timeout_s // 5))


def broker_transport_options(settings: Settings) -> dict[str, Any]:
    """The Redis transport's redelivery settings.

    A message a worker took but never acknowledged (the worker was killed) waits in
    the ``unacked`` hash until a live worker's sweep finds it older than the
    visibility timeout and puts it back on its queue. kombu sweeps on consumer
    start and then every ``unacked_restore_interval`` seconds, but by default scans
    only every ``unacked_restore_throttle``-th (10th) time: about every 100 s. Scan
    on every sweep, so redelivery comes at most ``visibility_timeout_s`` plus one
    interval after delivery, once a worker is running. A sweep holds a Redis lock
    that outlives a worker killed mid-sweep by ``unacked_mutex_expire`` (kombu: 300 s);
    keep that within the visibility timeout too (restoring is transactional per
    message, so two overlapping sweeps cannot duplicate one).
    """
    visibility = settings.visibility_timeout_s
    return {"visibility_timeout": visibility,
            "unacked_restore_interval": restore_interval_s(visibility),
            "unacked_restore_throttle": 1,
            "unacked_mutex_expire": min(300, visibility)}


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
        "broker_transport_options": broker_transport_options(settings),
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
        # No STARTED state for store and recall: it cost each call a result write and a
        # wake-up of the waiting client (~1.5 ms of a ~20 ms recall); maintenance tasks,
        # which run for minutes, turn it on for themselves.
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
