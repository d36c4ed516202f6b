"""Celery signal handlers: logging set-up, per-task log context, fork safety."""

from __future__ import annotations

import os
import time
from typing import Any

import structlog
from celery import signals
from celery.app import trace as celery_trace

from memoryd import logging as mlog
from memoryd import process
from memoryd.config import get_settings, reset_settings
from memoryd.process import Slot
from memoryd.redaction import summarize
from memoryd.worker.sweeper import Sweeper

log = structlog.get_logger(__name__)


@signals.setup_logging.connect
def _setup_logging(loglevel: Any = None, **_: Any) -> None:
    # Connecting this signal stops Celery from configuring logging its own way.
    level = loglevel if isinstance(loglevel, str) else "INFO"
    mlog.configure(level=level, force=True)
    # Celery logs every task's return value on success; a recall returns memory
    # content, which must never reach the logs.
    celery_trace.LOG_SUCCESS = "Task %(name)s[%(id)s] succeeded in %(runtime)ss"


@signals.worker_init.connect
def _summarize_results(**_: Any) -> None:
    # The task-succeeded event (which Flower shows) carries Celery's repr of each task's
    # return value, taken in the pool process as ``trace.saferepr(retval, maxsize)``; a
    # recall's would hold memory contents. The result backend still gets the value.
    celery_trace.saferepr = _result_summary


def _result_summary(value: Any, maxlen: int | None = None, **_: Any) -> str:
    return summarize(value)


@signals.task_received.connect
def _summarize_arguments(request: Any = None, **_: Any) -> None:
    # The task-received event (which Flower shows) carries the message's argsrepr and
    # kwargsrepr as its sender wrote them: a sender that did not summarise (``celery
    # call``, a client of an older release naming the agent by its id) would put
    # contents or the agent's id there. Replaced before the event is sent.
    if request is None:
        return
    request._argsrepr = summarize(tuple(request.args or ()))
    request._kwargsrepr = summarize(dict(request.kwargs or {}))


@signals.worker_init.connect
def _share_cores(sender: Any = None, **_: Any) -> None:
    # N prefork children each running onnxruntime on every core would thrash:
    # give each child its share of the cores unless the operator chose.
    processes = int(getattr(sender, "concurrency", 0) or 0)
    if processes > 1 and not os.environ.get("MEMORYD_EMBED_THREADS"):
        os.environ["MEMORYD_EMBED_THREADS"] = str(max(1, (os.cpu_count() or 1) // processes))
        reset_settings()


@signals.worker_init.connect
def _prepare_broker(sender: Any = None, **_: Any) -> None:
    # RabbitMQ: every memoryd queue (Celery binds them all to its delayed-delivery
    # exchanges, also those this worker does not consume) and the dead-letter queue.
    from memoryd.broker import broker_for
    from memoryd.worker import app

    broker_for(app.conf.broker_url).prepare(app)


@signals.worker_process_init.connect
def _after_fork(**_: Any) -> None:
    # Pooled database connections and ONNX sessions must never be shared across a fork.
    process.reset(after_fork=True)
    if get_settings().preload_models and _consumes_memory_queue():
        _load_models()


def _consumes_memory_queue() -> bool:
    """Whether this worker serves the memory queue (its queues were chosen in the main
    process before the pool forked)."""
    from memoryd.celery_config import MEMORY_QUEUE
    from memoryd.worker import app

    return MEMORY_QUEUE in (app.amqp.queues.consume_from or app.amqp.queues)


def _load_models() -> None:
    """Load both embedding models and run each once, so that the first store and the
    first recall a pool process serves do not pay for loading them (and, once per data
    directory, for deriving the int8 query model). Loaded after the fork: an ONNX
    session does not survive one."""
    from memoryd.memory.embeddings import get_embedder, get_query_embedder

    started = time.monotonic()
    for embedder in (get_embedder(), get_query_embedder()):
        embedder.embed(["memoryd warms up its models"])
    log.info("worker.models_loaded", duration_ms=round((time.monotonic() - started) * 1000))


@signals.task_prerun.connect
def _bind_task(task_id: str | None = None, task: Any = None, args: Any = None,
               kwargs: Any = None, **_: Any) -> None:
    agent = (kwargs or {}).get("agent_id") or (args[0] if args else None)
    mlog.clear()
    mlog.bind(task_id=task_id, task_name=getattr(task, "name", None),
              agent_id=agent if isinstance(agent, str) else None)


@signals.task_postrun.connect
def _unbind_task(**_: Any) -> None:
    mlog.clear()


# The worker's sweep for expired threads (``memoryd.worker.sweeper``), in its main process.
# A forked pool process inherits no running thread: nothing to stop there.
_SWEEPER: Slot[Sweeper] = Slot(
    "sweeper", lambda sweeper, after_fork: None if after_fork else sweeper.stop())


@signals.worker_ready.connect
def _start_sweeper(sender: Any = None, **_: Any) -> None:
    from memoryd.worker import app

    _SWEEPER.get(lambda: Sweeper(app, get_settings())).start()


@signals.worker_shutdown.connect
def _stop_sweeper(**_: Any) -> None:
    _SWEEPER.clear()
