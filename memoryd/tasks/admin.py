"""Operator tasks behind the gateway's admin endpoints (queue ``memory``: each is one
short statement, or short batches within a time budget): maintenance history, memories
per agent, how far a move to the configured embedding model is, restore an evicted
memory, erase an agent."""

from __future__ import annotations

from typing import Any

from celery import Task

from memoryd import validation as check
from memoryd.errors import NotFound
from memoryd.memory import erasure, reports
from memoryd.memory.maintenance import already_restored
from memoryd.memory.maintenance import restore as restore_evicted
from memoryd.tasks.base import MemorydTask, dump, get_store
from memoryd.tasks.maintenance import MAX_FOLLOW_UPS
from memoryd.worker import app


@app.task(name="memoryd.admin.job_runs", base=MemorydTask)
def job_runs(job: str | None = None, limit: int = 20) -> Any:
    """The newest maintenance runs. Read-only."""
    name = check.job_name(job) if job is not None else None
    with get_store().session() as session:
        return dump(reports.job_runs(session, name, check.limit(limit)))


@app.task(name="memoryd.admin.stats", base=MemorydTask)
def stats(limit: int = 50) -> Any:
    """Memories per category of the largest agents. Read-only."""
    with get_store().session() as session:
        return dump(reports.agent_stats(session, check.limit(limit)))


@app.task(name="memoryd.admin.embeddings", base=MemorydTask)
def embeddings() -> Any:
    """Memories per embedding model and the share on the configured one. Read-only."""
    store = get_store()
    with store.session() as session:
        return dump(reports.embedding_progress(session, store.model))


@app.task(name="memoryd.admin.restore", base=MemorydTask)
def restore(target: int | str) -> str:
    """Put an evicted memory back; returns its id. Idempotent: a redelivered message
    that finds the eviction already undone, by eviction number or memory id, returns
    the restored memory's id (``maintenance.already_restored``)."""
    ref = check.restore_target(target, "target")
    store = get_store()
    try:
        return str(restore_evicted(store, ref))
    except NotFound:
        found = already_restored(store, ref)
        if found is None:
            raise
        return str(found)


@app.task(name="memoryd.admin.forget_agent", base=MemorydTask, bind=True)
def forget_agent(self: Task, agent_id: str, follow_up: int = 0) -> Any:
    """Erase everything memoryd holds of one agent (``memoryd.memory.erasure``) within
    the maintenance time budget; if that runs out, a follow-up task goes on where it
    stopped. Idempotent: a redelivered message finds less (at the end, nothing) to do."""
    store = get_store()
    done = erasure.forget_agent(store, check.agent_id(agent_id),
                                time_budget_s=store.settings.maintenance_time_budget_s)
    store.mark_written([agent_id])
    if not done.complete and follow_up < MAX_FOLLOW_UPS:
        self.apply_async(kwargs={"agent_id": agent_id, "follow_up": follow_up + 1},
                         countdown=1)
    return dump(done)
