"""Celery signal handlers: logging set-up, per-task log context, fork safety."""

from __future__ import annotations

from typing import Any

from celery import signals

from memoryd import logging as mlog


@signals.setup_logging.connect
def _setup_logging(loglevel: Any = None, **_: Any) -> None:
    # Connecting this signal stops Celery from configuring logging its own way.
    level = loglevel if isinstance(loglevel, str) else "INFO"
    mlog.configure(level=level, force=True)


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
