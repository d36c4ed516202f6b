"""Celery signal handlers: logging set-up, per-task log context, fork safety."""

from __future__ import annotations

import os
from typing import Any

from celery import signals
from celery.app import trace as celery_trace

from memoryd import logging as mlog
from memoryd.config import reset_settings


@signals.setup_logging.connect
def _setup_logging(loglevel: Any = None, **_: Any) -> None:
    # Connecting this signal stops Celery from configuring logging its own way.
    level = loglevel if isinstance(loglevel, str) else "INFO"
    mlog.configure(level=level, force=True)
    # Celery logs every task's return value on success; a recall returns memory
    # content, which must never reach the logs.
    celery_trace.LOG_SUCCESS = "Task %(name)s[%(id)s] succeeded in %(runtime)ss"


@signals.worker_init.connect
def _share_cores(sender: Any = None, **_: Any) -> None:
    # N prefork children each running onnxruntime on every core would thrash:
    # give each child its share of the cores unless the operator chose.
    processes = int(getattr(sender, "concurrency", 0) or 0)
    if processes > 1 and not os.environ.get("MEMORYD_EMBED_THREADS"):
        os.environ["MEMORYD_EMBED_THREADS"] = str(max(1, (os.cpu_count() or 1) // processes))
        reset_settings()


@signals.worker_process_init.connect
def _after_fork(**_: Any) -> None:
    # Pooled database connections must never be shared across a fork.
    from memoryd.tasks.base import reset_store

    reset_store()


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
