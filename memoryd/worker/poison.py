"""Poison messages: a task message delivered more than ``MEMORYD_DEAD_LETTER_AFTER``
times without finishing is set aside as a dead letter instead of running again.

With acks late and ``reject_on_worker_lost``, a message whose task kills its pool
process (a native crash, an out-of-memory kill, a pathological input) goes back to the
queue and kills the next process too, forever. The worker's main process counts each
delivery as the request becomes ready to run (``DeliveryGuard``, in front of the pool
and of store batching); past the limit it records the message in ``dead_letters``,
stores a ``DeadLettered`` failure for a waiting caller, acknowledges the message and
logs a warning naming the task and agent (never the content). ``memoryd dlq`` lists,
re-sends or drops dead letters.

Counting is the broker's business where it can: RabbitMQ's quorum queues count
redeliveries themselves (``x-delivery-count``); on Redis a counter per task id and
retry number lives beside the queues for a day."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import structlog
from celery.worker import state as worker_state

from memoryd.config import is_rabbitmq
from memoryd.errors import DeadLettered

log = structlog.get_logger(__name__)

COUNTER_TTL_S = 86_400
# While dead letters cannot be recorded (the database is down), a poison message is put
# back after this pause, so the worker does not spin on it.
RECORD_RETRY_PAUSE_S = 1.0


class DeliveryCounter(Protocol):
    def delivery(self, request: Any) -> int:
        """This delivery's number for the request: 1 the first time."""


class RedisDeliveries:
    """A counter per task id and retry number (a retry is a new message of the same id)."""

    def __init__(self, broker_url: str) -> None:
        import redis

        self._client = redis.Redis.from_url(broker_url)

    def delivery(self, request: Any) -> int:
        key = f"memoryd:deliveries:{request.id}:{request.request_dict.get('retries', 0)}"
        pipe = self._client.pipeline()
        pipe.incr(key)
        pipe.expire(key, COUNTER_TTL_S)
        number, _ = pipe.execute()
        return int(number)


class QuorumQueueDeliveries:
    """RabbitMQ quorum queues put the number of earlier deliveries in a header."""

    def delivery(self, request: Any) -> int:
        headers = getattr(request.message, "headers", None) or {}
        return int(headers.get("x-delivery-count") or 0) + 1


def counter_for(broker_url: str) -> DeliveryCounter:
    if is_rabbitmq(broker_url):
        return QuorumQueueDeliveries()
    return RedisDeliveries(broker_url)


class DeliveryGuard:
    """Wraps where ready requests go (the pool, or the store batcher)."""

    def __init__(self, counter: DeliveryCounter, limit: int,
                 record: Callable[..., None]) -> None:
        self.counter = counter
        self.limit = limit
        self.record = record

    def wrap(self, run: Callable[[Any], None]) -> Callable[[Any], None]:
        def guarded(request: Any) -> None:
            number = self._count(request)
            if number > self.limit:
                self.set_aside(request, number)
            else:
                run(request)
        return guarded

    def _count(self, request: Any) -> int:
        try:
            return self.counter.delivery(request)
        except Exception as exc:  # cannot count: run it, as without a guard
            log.warning("task.delivery_not_counted", task=request.name,
                        error=type(exc).__name__)
            return 0

    def set_aside(self, request: Any, number: int) -> None:
        kwargs = dict(request.kwargs or {})
        agent = kwargs.get("agent_id")
        queue = (request.delivery_info or {}).get("routing_key") or ""
        try:
            self.record(task_id=request.id, task_name=request.name, queue=queue,
                        agent_id=agent if isinstance(agent, str) else None,
                        deliveries=number, args=list(request.args or ()), kwargs=kwargs)
        except Exception as exc:
            log.error("task.dead_letter_not_recorded", task=request.name,
                      task_id=request.id, error=type(exc).__name__)
            time.sleep(RECORD_RETRY_PAUSE_S)
            request.reject(requeue=True)
            worker_state.task_ready(request)
            return
        failure = DeadLettered(f"{request.name} was delivered {number} times without "
                               f"finishing; set aside as a dead letter (memoryd dlq list)")
        request.task.backend.mark_as_failure(request.id, failure)
        request.acknowledge()
        worker_state.task_ready(request)
        request.send_event("task-failed", exception=repr(failure))
        log.warning("task.dead_lettered", task=request.name, task_id=request.id,
                    agent_id=agent, deliveries=number)
