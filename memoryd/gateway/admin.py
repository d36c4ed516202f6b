"""Operator endpoints (``admin`` keys for all agents): run maintenance jobs, their
history, fleet statistics, how far a move to another embedding model is, restoring an
evicted memory, the review queue of replacements the judges were unsure of, erasing an
agent. Like the memory routes, each is one ``MemoryClient`` call served by the workers."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from memoryd import validation as check
from memoryd.client import Pending
from memoryd.errors import Forbidden, ValidationError
from memoryd.gateway import access, routes
from memoryd.gateway.deps import Client, JsonBody, Key
from memoryd.gateway.schema import request_body
from memoryd.types import (
    AgentStats,
    EmbeddingProgress,
    Erasure,
    JobQueued,
    JobRun,
    JobRunRequest,
    Restored,
    Supersession,
)

router = APIRouter(prefix="/v1", tags=["operators"])
REQUEST_MODELS: list[type[BaseModel]] = [JobRunRequest]


@router.post("/jobs/{job}/runs", openapi_extra=request_body(JobRunRequest),
             responses={202: {"model": JobQueued}},
             summary="Run a maintenance job now: 202 with its task id, or with wait, "
                     "200 and the run's record")
def run_job(job: str, key: Key, client: Client,
            payload: JsonBody) -> Any:
    key.require_admin()
    asked = check.request(JobRunRequest, {} if payload is None else payload)
    if not asked.dry_run:
        key.require_admin(changes=True)
    outcome = client.run_job(check.job_name(job), agent_id=asked.agent_id,
                             dry_run=asked.dry_run, params=asked.params, wait=asked.wait)
    if isinstance(outcome, Pending):
        queued = JobQueued(job=job, task_id=outcome.id)
        return JSONResponse(queued.model_dump(mode="json"), status_code=202)
    return outcome


@router.get("/jobs/runs", summary="Recent maintenance runs, newest first")
def job_runs(key: Key, client: Client, job: str | None = None,
             limit: Annotated[int, Query()] = 20) -> list[JobRun]:
    key.require_admin()
    return client.job_runs(job=job, limit=limit)


@router.post("/evicted/{eviction_id}/restore",
             summary="Put an evicted memory back (eviction number or memory id)")
def restore(eviction_id: str, key: Key, client: Client) -> Restored:
    key.require_admin(changes=True)
    return Restored(id=client.restore(check.restore_target(eviction_id)), restored=True)


@router.get("/stats", summary="Memories per category of the largest agents")
def stats(key: Key, client: Client, limit: Annotated[int, Query()] = 50) -> list[AgentStats]:
    key.require_admin()
    return client.stats(limit=limit)


@router.get("/embeddings", summary="Memories per embedding model, and the share on the "
                                   "configured one (the reembed job moves the rest)")
def embeddings(key: Key, client: Client) -> EmbeddingProgress:
    key.require_admin()
    return client.embeddings()


@router.get("/admin/reviews", summary="The review queue: replacements the judges were "
                                      "unsure of, oldest first (or decisions of a status)")
def reviews(key: Key, client: Client, agent_id: str | None = None, status: str = "review",
            limit: Annotated[int, Query()] = 50,
            offset: Annotated[int, Query()] = 0) -> list[Supersession]:
    key.require_admin()
    return client.reviews(agent_id=agent_id, status=status, limit=limit, offset=offset)


@router.post("/admin/reviews/{review_id}/accept",
             summary="Accept a queued replacement: the old memory is superseded")
def accept_review(review_id: str, key: Key, client: Client) -> Supersession:
    key.require_admin(changes=True)
    return client.accept_review(_review_number(review_id), actor=access.actor(key))


@router.post("/admin/reviews/{review_id}/reject",
             summary="Reject a queued replacement: both memories stay current")
def reject_review(review_id: str, key: Key, client: Client) -> Supersession:
    key.require_admin(changes=True)
    return client.reject_review(_review_number(review_id), actor=access.actor(key))


def _review_number(text: str) -> int:
    """A review's number from the path (digits only: ``int`` would take ``+1`` or
    other scripts' digits)."""
    if not (text.isascii() and text.isdigit()) or len(text) > 19:
        raise ValidationError("review_id", "must be a review number")
    return check.limit(int(text), "review_id", high=check.MAX_BIGINT)


# The first path segments after /v1/agents/{agent}/ (memories, recall, kg, ...): an agent
# path of the erasure route holding one is a mistyped request for an agent's resource.
_AGENT_RESOURCES = frozenset(
    path.split("{agent:path}/", 1)[1].split("/")[0]
    for path in (str(getattr(route, "path", "")) for route in routes.router.routes)
    if "{agent:path}/" in path)


@router.delete("/agents/{agent:path}", responses={202: {"model": JobQueued}},
               summary="Erase everything of one agent (memories, sessions, graph, evicted "
                       "copies, dead letters, its keys); admin keys with write only")
def forget_agent(agent: str, key: Key, client: Client, wait: bool = True) -> Any:
    key.require_admin()
    if not key.allows("write"):
        raise Forbidden("erasing an agent needs the 'write' permission as well as 'admin'")
    agent_id = check.agent_id(agent)
    if _AGENT_RESOURCES.intersection(agent_id.split("/")[1:]):
        raise ValidationError("agent_id", "names one of an agent's resources; DELETE "
                                          "/v1/agents/{agent} erases a whole agent")
    outcome = client.forget_agent(agent_id, wait=wait)
    if isinstance(outcome, Pending):
        queued = JobQueued(job="forget_agent", task_id=outcome.id)
        return JSONResponse(queued.model_dump(mode="json"), status_code=202)
    assert isinstance(outcome, Erasure)
    return outcome
