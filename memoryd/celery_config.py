"""The one Celery configuration: the worker app and the thin client's app are both
built from ``celery_config``, so they cannot disagree on serializers, queues or the
broker's redelivery settings. No SQLAlchemy and no worker code here: the thin client
imports this module."""

from __future__ import annotations

from typing import Any

from memoryd.broker import QUEUES, broker_for
from memoryd.config import Settings

MEMORY_QUEUE, MAINTENANCE_QUEUE = QUEUES
MAINTENANCE_TASK_PREFIX = "memoryd.maintenance."
ADMIN_TASK_PREFIX = "memoryd.admin."
# How long a result that may hold memory contents waits for a caller who never fetched
# it (a caller gone after a timeout, a ``wait=False`` never collected): a caller fetches
# within its own timeout, and deletes what it fetched (``memoryd.client``).
CONTENT_RESULT_EXPIRES_S = 300


# Memory tasks whose results hold no contents: ids and flags (a store's result is
# followed after a 202 for longer: memoryd.gateway.accepted).
CONTENT_FREE_RESULTS = frozenset({"memoryd.store", "memoryd.store_many", "memoryd.forget",
                                  "memoryd.kg.add"})


def holds_contents(task_name: str) -> bool:
    """Whether the result of task ``task_name`` may hold memory contents: every task's
    but the maintenance jobs', the operators' (run records, counts) and
    ``CONTENT_FREE_RESULTS``. A task unknown here counts as holding them."""
    return not (task_name in CONTENT_FREE_RESULTS
                or task_name.startswith((MAINTENANCE_TASK_PREFIX, ADMIN_TASK_PREFIX)))


def restore_interval_s(visibility_timeout_s: int) -> int:
    """Seconds between a worker's sweeps for messages of dead workers (1 to 10)."""
    return max(1, min(10, visibility_timeout_s // 5))


def broker_transport_options(settings: Settings) -> dict[str, Any]:
    """The Redis transport's redelivery settings (RabbitMQ ignores them).

    A message a worker took but never acknowledged (the worker was killed) waits in
    the ``unacked`` hash until a live worker's sweep finds its lease older than the
    visibility timeout and puts it back on its queue; live workers renew the leases of
    what they hold (``memoryd.broker.redis_leases``). kombu sweeps on consumer start and
    then every ``unacked_restore_interval`` seconds, but by default scans only every
    ``unacked_restore_throttle``-th (10th) time. Scan on every sweep, so redelivery
    comes at most ``visibility_timeout_s`` plus one interval after the last renewal,
    once a worker is running. A sweep holds a Redis lock that outlives a worker killed
    mid-sweep by ``unacked_mutex_expire`` (kombu: 300 s); keep that within the
    visibility timeout too (restoring is transactional per message, so two overlapping
    sweeps cannot duplicate one).
    """
    visibility = settings.visibility_timeout_s
    return {"visibility_timeout": visibility,
            "unacked_restore_interval": restore_interval_s(visibility),
            "unacked_restore_throttle": 1,
            "unacked_mutex_expire": min(300, visibility)}


# A caller waiting on a result gives up on an unreachable result backend after about
# 1.5 s (and says so) instead of Celery's 20 reconnection attempts a second apart; a
# worker keeps Celery's patience, so a Redis restart does not fail the tasks it runs.
CALLER_RESULT_RETRY_POLICY = {"max_retries": 3, "interval_start": 0, "interval_step": 0.5,
                              "interval_max": 1}


def celery_config(settings: Settings, *, broker_url: str | None = None,
                  result_backend: str | None = None, caller: bool = False) -> dict[str, Any]:
    """Everything a memoryd Celery app needs to talk to the broker: JSON only (no pickle
    anywhere near the broker), two queues, redelivery, result expiry, the schedule's
    timezone. ``broker_url`` and ``result_backend`` override the settings' (a client
    pointed at another broker keeps the result backend on it unless told otherwise)."""
    broker = broker_url or settings.resolved_broker_url()
    kind = broker_for(broker)
    return {
        "broker_url": broker,
        "result_backend": result_backend or settings.result_backend or broker,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "task_queues": tuple(kind.queue(name, settings) for name in QUEUES),
        "task_default_queue": MEMORY_QUEUE,
        "task_routes": {f"{MAINTENANCE_TASK_PREFIX}*": {"queue": MAINTENANCE_QUEUE},
                        "memoryd.*": {"queue": MEMORY_QUEUE}},
        "broker_transport_options": broker_transport_options(settings),
        "result_backend_transport_options": {
            "visibility_timeout": settings.visibility_timeout_s,
            **({"retry_policy": CALLER_RESULT_RETRY_POLICY} if caller else {})},
        "broker_connection_retry_on_startup": True,
        # Results that may hold contents expire sooner (``memoryd.broker.redis_results``).
        "result_expires": settings.result_expires_s,
        "timezone": settings.timezone,
        "enable_utc": True,
    }
