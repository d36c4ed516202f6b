"""Micro-batching of one task's messages inside a worker (used by ``memoryd.store``).

Embedding one text at a time wastes most of the model's work, so a worker
collects the store messages it has received and hands them to a pool process
as one batch: one embedding pass, one transaction, then each message's own
result and its acknowledgement.

How it keeps the ordinary task guarantees:

* The message handler is Celery's default strategy (revocation, expiry, events,
  ETA/countdown retries, rate limits), given a consumer whose ``on_task_request``
  is the batcher. Only ready requests are batched; messages with an ETA (retries)
  take the normal path.
* Greedy batching, no timer: a batch is dispatched whenever fewer batches are in
  flight than the pool has processes. An idle worker runs a lone message at once
  (a batch of one); under load the requests that arrive while the processes are
  busy form the next batch (at most ``max_batch``).
* While store messages are held, the worker's prefetch is raised by one per held
  message (as Celery does for ETA tasks), at most ``max_held`` in all, so it can
  read ahead without changing the prefetch of any other task.
* Acks late: a message is acknowledged only after the pool process returns,
  i.e. after its row was committed and its result stored.
* The pool function returns an outcome per request. ``DONE`` and ``FAILED``
  (a caller error, already stored as that task's failure) are acknowledged;
  anything else, and every request of a batch whose process died or timed out,
  runs again alone on the ordinary path (``Request.execute_using_pool``), with the
  task's retry policy. Store is idempotent, so a second run returns the row with
  ``duplicate=True``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import structlog
from celery.exceptions import TaskRevokedError
from celery.worker import state as worker_state

log = structlog.get_logger(__name__)

DONE = "done"  # stored; result written
FAILED = "failed"  # caller error; failure written
FALLBACK = "fallback"  # not handled by the batch: run alone on the ordinary path

# One item per request: (task id, positional args, keyword args).
BatchItem = tuple[str, Sequence[Any], dict[str, Any]]
BatchRunner = Callable[[list[BatchItem]], list[str]]


class Batcher:
    """Lives in the worker's main process (the consumer's event loop)."""

    def __init__(self, task: Any, consumer: Any, runner: BatchRunner, *,
                 max_batch: int, max_held: int) -> None:
        self.task = task
        self.consumer = consumer
        self.runner = runner
        self.max_batch = max_batch
        self.max_held = max_held
        self.buffer: list[Any] = []
        self.in_flight = 0
        self._counted: set[int] = set()  # id() of requests the prefetch was raised for

    @property
    def slots(self) -> int:
        return max(1, int(getattr(self.consumer.pool, "num_processes", 1) or 1))

    def submit(self, request: Any) -> None:
        if len(self._counted) < self.max_held:
            self.consumer.qos.increment_eventually()
            self._counted.add(id(request))
        self.buffer.append(request)
        self.flush()

    def flush(self) -> None:
        while self.buffer and self.in_flight < self.slots:
            batch, self.buffer = self.buffer[:self.max_batch], self.buffer[self.max_batch:]
            ready = []
            for request in batch:
                if request.revoked():  # acknowledged and reported by Celery
                    self._release(request)
                else:
                    ready.append(request)
            if ready:
                self._dispatch(ready)

    def _dispatch(self, batch: list[Any]) -> None:
        items: list[BatchItem] = [(r.id, list(r.args or ()), dict(r.kwargs or {}))
                                  for r in batch]
        hard, soft = batch[0].time_limits
        self.in_flight += 1
        done = False

        def on_return(outcomes: Any) -> None:
            nonlocal done
            if not done:
                done = True
                self._finish(batch, outcomes)

        def on_error(_exc_info: Any) -> None:
            nonlocal done
            if not done:
                done = True
                log.warning("batch.lost", task=self.task.name, size=len(batch))
                self._finish(batch, None)

        try:
            self.consumer.pool.apply_async(
                self.runner, args=(items,), callback=on_return, error_callback=on_error,
                soft_timeout=soft or self.task.soft_time_limit,
                timeout=hard or self.task.time_limit, correlation_id=batch[0].id)
        except Exception:
            log.exception("batch.dispatch_failed", task=self.task.name, size=len(batch))
            on_error(None)

    def _finish(self, batch: list[Any], outcomes: Any) -> None:
        self.in_flight -= 1
        if not isinstance(outcomes, list) or len(outcomes) != len(batch):
            outcomes = [FALLBACK] * len(batch)
        for request, outcome in zip(batch, outcomes, strict=True):
            if outcome in (DONE, FAILED):
                request.acknowledge()
                worker_state.task_ready(request, successful=outcome == DONE)
                request.send_event("task-succeeded" if outcome == DONE else "task-failed")
            else:
                self._run_alone(request)
            self._release(request)
        self.flush()

    def _run_alone(self, request: Any) -> None:
        with contextlib.suppress(TaskRevokedError):  # revoked() already reported it
            request.execute_using_pool(self.consumer.pool)

    def _release(self, request: Any) -> None:
        if id(request) in self._counted:
            self._counted.discard(id(request))
            self.consumer.qos.decrement_eventually()


def batching_strategy(task: Any, app: Any, consumer: Any, runner: BatchRunner, *,
                      max_batch: int, max_held: int, **kwargs: Any) -> Any:
    """Celery's default message handler for ``task`` (with the delivery guard), its
    ready requests batched."""
    from memoryd.worker.strategies import guarded

    batcher = Batcher(task, consumer, runner, max_batch=max_batch, max_held=max_held)
    return guarded(task, app, consumer, route=batcher.submit, **kwargs)
