"""How a worker's main process handles each task's messages: Celery's default message
handler (revocation, expiry, events, countdown retries, rate limits), with every ready
request passing the delivery guard (``memoryd.worker.poison``) before it reaches the
pool, or the store batcher."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery.worker.strategy import default as default_strategy

from memoryd.process import Slot
from memoryd.worker.poison import DeliveryGuard, counter_for


class ConsumerView:
    """The consumer as the default strategy sees it, except for where ready requests go."""

    def __init__(self, consumer: Any, on_task_request: Callable[[Any], None]) -> None:
        self._consumer = consumer
        self.on_task_request = on_task_request

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


# A worker's main process only.
_GUARD: Slot[DeliveryGuard] = Slot("delivery_guard")


def delivery_guard(app: Any) -> DeliveryGuard:
    """The process's guard (one delivery counter per worker), built on first use."""
    from memoryd.config import get_settings

    return _GUARD.get(lambda: DeliveryGuard(
        counter_for(app.conf.broker_url), get_settings().dead_letter_after,
        record_dead_letter))


def record_dead_letter(**fields: Any) -> None:
    from memoryd.db.engine import get_engine, session_scope
    from memoryd.memory import dead_letters

    with session_scope(get_engine()) as session:
        dead_letters.record(session, **fields)


def guarded(task: Any, app: Any, consumer: Any,
            route: Callable[[Any], None] | None = None, **kwargs: Any) -> Any:
    """Celery's default strategy for ``task``; ready requests go through the delivery
    guard to ``route`` (default: the pool, as Celery would send them)."""
    target = route or consumer.on_task_request
    view = ConsumerView(consumer, delivery_guard(app).wrap(target))
    return default_strategy(task, app, view, **kwargs)
