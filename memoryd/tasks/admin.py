"""Operator tasks behind the gateway's admin endpoints (queue ``memory``: each is one
short statement, or short batches within a time budget): maintenance history, memories
per agent, how far a move to the configured embedding model is, restore an evicted
memory, the review queue of unsure replacements, erase an agent, and have the broker's
Redis forget what an erasure deleted."""

from __future__ import annotations

from typing import Any

from celery import Task

from memoryd import validation as check
from memoryd.broker import persistence
from memoryd.broker.redis_results import ResultBackend
from memoryd.errors import NotFound
from memoryd.memory import erasure, reports
from memoryd.memory.maintenance import already_restored
from memoryd.memory.maintenance import restore as restore_evicted
from memoryd.redaction import agent_digest
from memoryd.tasks.base import MemorydTask, dump, get_store
from memoryd.tasks.maintenance import MAX_FOLLOW_UPS
from memoryd.tasks.working import get_working
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


@app.task(name="memoryd.admin.reviews", base=MemorydTask)
def reviews(agent_id: str | None = None, status: str = "review", limit: int = 50,
            offset: int = 0) -> Any:
    """The review queue (or the decisions of another status), of one agent or all.
    Read-only."""
    return dump(get_store().reviews(agent_id, status=status, limit=limit, offset=offset))


@app.task(name="memoryd.admin.decide_review", base=MemorydTask)
def decide_review(review_id: int, accept: bool, agent_id: str | None = None,
                  actor: str | None = None) -> Any:
    """Accept or reject one queued replacement. Not repeatable: a redelivered message
    finds it decided and answers ``NotFound`` (the decision stands)."""
    return dump(get_store().decide_review(review_id, accept=accept, agent_id=agent_id,
                                          actor=check.short_text("actor", actor)))


# A compaction waits this long, a second at a time, for the erasure's message to be
# acknowledged and for a rewrite already running to end.
COMPACT_RETRIES = 120


@app.task(name="memoryd.admin.forget_agent", base=MemorydTask, bind=True)
def forget_agent(self: Task, agent_id: str, follow_up: int = 0) -> Any:
    """Erase everything memoryd holds of one agent (``memoryd.memory.erasure``) within
    the maintenance time budget; if that runs out, a follow-up task goes on where it
    stopped. Idempotent: a redelivered message finds less (at the end, nothing) to do.
    Once complete, the agent's stored results go, and ``compact_broker`` follows. The
    result names the agent by its hash (it is stored in Redis too); the client puts
    back the id it asked about."""
    store = get_store()
    done = erasure.forget_agent(store, check.agent_id(agent_id),
                                time_budget_s=store.settings.maintenance_time_budget_s)
    store.mark_written([agent_id])
    if not done.complete and follow_up < MAX_FOLLOW_UPS:
        self.apply_async(kwargs={"agent_id": agent_id, "follow_up": follow_up + 1},
                         countdown=1)
    if done.complete:
        _forget_copies(self, agent_id)
    return {**dump(done), "agent_id": agent_digest(agent_id)}


def _forget_copies(task: Task, agent_id: str) -> None:
    """The agent's results no caller fetched and its threads' working memory are
    deleted, then the Redis servers'
    append-only files rewritten once this task's message (which names the agent) is
    acknowledged."""
    if isinstance(task.backend, ResultBackend):
        task.backend.forget_agent(agent_id)
    get_working().erase(agent_id)
    compact_broker.apply_async(kwargs={"after": task.request.id}, countdown=1)


@app.task(name="memoryd.admin.compact_broker", base=MemorydTask, bind=True,
          max_retries=COMPACT_RETRIES)
def compact_broker(self: Task, after: str | None = None) -> dict[str, str]:
    """Rewrite the append-only files of the broker's and the result backend's Redis
    (``memoryd.broker.persistence``), once no worker holds the message of task
    ``after`` any more; what each server answered, by role."""
    with app.connection_for_write() as connection:
        if after and persistence.held(connection, after):
            raise self.retry(countdown=1)
        with persistence.redis_clients(connection, self.backend,
                                       get_working().redis) as clients:
            answers = {role: persistence.rewrite(client) for role, client in clients.items()}
    if persistence.BUSY in answers.values():
        raise self.retry(countdown=1)
    return answers
