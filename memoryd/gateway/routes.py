"""``/v1/agents/{agent}/...``: an agent's memories, recall, context, graph and sessions.

Each handler checks the key against the agent, parses its body with
``memoryd.validation`` and makes one ``MemoryClient`` call: the workers embed, write
and read, exactly as for a Python caller. Handlers are plain functions, run in the
gateway's thread pool while they wait on a worker."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote
from uuid import UUID

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel

from memoryd import validation as check
from memoryd.client import Pending
from memoryd.errors import NotFound, ValidationError
from memoryd.gateway import access
from memoryd.gateway.accepted import TaskAccepted
from memoryd.gateway.deps import Accepted, Client, Config, JsonBody, Key
from memoryd.gateway.schema import request_body
from memoryd.types import (
    Added,
    ContextRequest,
    Deleted,
    Entity,
    History,
    Memory,
    Page,
    Recalled,
    RecallRequest,
    Restored,
    SessionInfo,
    StoreBatch,
    StoreItem,
    StoreResult,
)
from memoryd.working.model import TurnContext

# `:path`: agent ids may hold slashes ("team-a/scout", for prefix-scoped keys).
router = APIRouter(prefix="/v1/agents/{agent:path}", tags=["memories"])


class SupersedeRequest(BaseModel):
    """The memories (ids, of the same agent) that the memory named in the path replaces."""

    supersedes: list[str]


class Superseded(BaseModel):
    """The memory named in the path, and the memories it now replaces."""

    id: UUID
    superseded: list[UUID]


REQUEST_MODELS: list[type[BaseModel]] = [StoreItem, StoreBatch, RecallRequest, ContextRequest,
                                         Entity, SupersedeRequest]


# Seconds a caller following an accepted store should wait between looks.
FOLLOW_RETRY_AFTER_S = 1
ACCEPTED: dict[int | str, dict[str, Any]] = {202: {
    "model": TaskAccepted,
    "description": "Queued, and no worker has written it within MEMORYD_GATEWAY_TIMEOUT_S: "
                   "a worker will. Follow it at the Location given "
                   "(/v1/agents/{agent}/tasks/{task_id})"}}


@router.post("/memories", status_code=201, openapi_extra=request_body(StoreItem, StoreBatch),
             responses={200: {"description": "Nothing new: each item matched a memory "
                                             "already stored (its id, duplicate true)"},
                        **ACCEPTED},
             summary="Store one memory, or a batch as {\"items\": [...]}")
def store(agent: str, key: Key, client: Client, config: Config, accepted: Accepted,
          payload: JsonBody, response: Response
          ) -> StoreResult | list[StoreResult] | TaskAccepted:
    agent_id = access.authorize(key, agent, "write")
    actor = access.actor(key)
    if isinstance(payload, dict) and set(payload) == {"items"}:
        batch = client.store_many(agent_id, payload["items"], wait=False, actor=actor)
        assert isinstance(batch, Pending)
        results = accepted.wait_or_accept(batch, agent_id)
        return answered(results, agent_id, response)
    if not isinstance(payload, dict):
        raise ValidationError("body", "must be a JSON object")
    item = check.store_item(payload, config.max_content_bytes)
    one = client.store(agent_id, item.content, wait=False, actor=actor,
                       **item.model_dump(exclude_none=True, exclude={"content"}))
    assert isinstance(one, Pending)
    result = accepted.wait_or_accept(one, agent_id)
    return answered(result, agent_id, response)


@router.get("/tasks/{task_id}", responses={**ACCEPTED, 404: {
                "description": "No store of this agent was accepted under this task id, "
                               "or its outcome has expired"}},
            summary="The outcome of a store answered 202: what the store would have "
                    "answered, or 202 while it is pending")
def follow(agent: str, task_id: str, key: Key, accepted: Accepted, response: Response
           ) -> StoreResult | list[StoreResult] | TaskAccepted:
    agent_id = access.authorize(key, agent, "write")
    return answered(accepted.outcome(agent_id, task_id), agent_id, response)


def answered(outcome: StoreResult | list[StoreResult] | TaskAccepted, agent_id: str,
             response: Response) -> StoreResult | list[StoreResult] | TaskAccepted:
    """``outcome`` with its status: 201 or 200 once written, 202 and where to follow it
    while pending."""
    if isinstance(outcome, TaskAccepted):
        response.status_code = 202
        response.headers["Location"] = (f"/v1/agents/{quote(agent_id, safe='/')}"
                                        f"/tasks/{outcome.task_id}")
        response.headers["Retry-After"] = str(FOLLOW_RETRY_AFTER_S)
        return outcome
    response.status_code = created_status(*(outcome if isinstance(outcome, list)
                                            else [outcome]))
    return outcome


def created_status(*results: StoreResult) -> int:
    """201 when the request created a memory, 200 when every item was already stored
    (a retried request, or content the agent holds): the caller learns which without
    reading the items."""
    return 201 if any(r.stored for r in results) else 200


AS_OF = Query(description="ISO-8601: what was true then (valid_from <= as_of < valid_to)")


@router.get("/memories", summary="List memories, newest first, a page at a time")
def list_memories(agent: str, key: Key, client: Client, category: str | None = None,
                  limit: Annotated[int, Query()] = 50,
                  offset: Annotated[int, Query()] = 0,
                  since: Annotated[str | None, Query(description="ISO-8601, inclusive")] = None,
                  until: Annotated[str | None, Query(description="ISO-8601, exclusive")] = None,
                  include_superseded: Annotated[bool, Query(
                      description="replaced memories too, marked")] = False,
                  as_of: Annotated[str | None, AS_OF] = None) -> Page:
    agent_id = access.authorize(key, agent, "read")
    return client.list(agent_id, category=category, limit=limit, offset=offset,
                       since=since, until=until, include_superseded=include_superseded,
                       as_of=as_of)


@router.get("/memories/{memory_id}", summary="One memory")
def get_memory(agent: str, memory_id: str, key: Key, client: Client) -> Memory:
    return client.get(access.authorize(key, agent, "read"), memory_id)


@router.get("/memories/{memory_id}/history",
            summary="A memory, each earlier state of it, and what it replaced or was "
                    "replaced by")
def history(agent: str, memory_id: str, key: Key, client: Client) -> History:
    return client.history(access.authorize(key, agent, "read"), memory_id)


@router.post("/memories/{memory_id}/supersedes", openapi_extra=request_body(SupersedeRequest),
             summary="Mark memories of this agent as replaced by this one (after the fact)")
def supersede(agent: str, memory_id: str, key: Key, client: Client,
              payload: JsonBody) -> Superseded:
    agent_id = access.authorize(key, agent, "write")
    ref = check.memory_id(memory_id)
    asked = check.request(SupersedeRequest, payload)
    done = client.supersede(agent_id, ref, asked.supersedes, actor=access.actor(key))
    return Superseded(id=ref, superseded=done)


@router.post("/memories/{memory_id}/current",
             summary="Undo a supersession: the memory is current again (restored false: "
                     "it already was)")
def unsupersede(agent: str, memory_id: str, key: Key, client: Client) -> Restored:
    agent_id = access.authorize(key, agent, "write")
    ref = check.memory_id(memory_id)
    return Restored(id=ref, restored=client.unsupersede(agent_id, ref,
                                                        actor=access.actor(key)))


@router.delete("/memories/{memory_id}", summary="Forget one memory (404 if there is none)")
def forget(agent: str, memory_id: str, key: Key, client: Client) -> Deleted:
    agent_id = access.authorize(key, agent, "write")
    ref = check.memory_id(memory_id)
    if not client.forget(agent_id, ref):
        raise NotFound(f"memory {ref} not found for this agent")
    return Deleted(id=ref, deleted=True)


@router.post("/recall", openapi_extra=request_body(RecallRequest),
             summary="Hybrid recall: the memories most relevant to a query")
def recall(agent: str, key: Key, client: Client, payload: JsonBody) -> list[Recalled]:
    agent_id = access.authorize(key, agent, "read")
    asked = check.request(RecallRequest, payload)
    return client.recall(agent_id, **asked.model_dump())


@router.post("/context", openapi_extra=request_body(ContextRequest),
             summary="The turn's context: a prompt block (`context`) of the thread's "
                     "working memory and the relevant long-term memories, and what it holds")
def context(agent: str, key: Key, client: Client, payload: JsonBody) -> TurnContext:
    agent_id = access.authorize(key, agent, "read")
    asked = check.request(ContextRequest, payload)
    return client.context(agent_id, **asked.model_dump(), structured=True)


@router.post("/kg/entities", status_code=201, openapi_extra=request_body(Entity),
             summary="Add or update a knowledge-graph entity and its relations")
def kg_add(agent: str, key: Key, client: Client, payload: JsonBody) -> Added:
    agent_id = access.authorize(key, agent, "write")
    entity = check.entity(payload)
    return Added(id=entity.id, added=client.kg_add(agent_id, entity))


@router.get("/kg/entities/{entity_id:path}",
            summary="An entity and what it relates to, up to depth hops away")
def kg_query(agent: str, entity_id: str, key: Key, client: Client,
             depth: Annotated[int, Query()] = 2,
             as_of: Annotated[str | None, AS_OF] = None) -> list[Entity]:
    agent_id = access.authorize(key, agent, "read")
    found = client.kg_query(agent_id, entity_id, depth, as_of=as_of)
    if not found:
        raise NotFound("no such entity for this agent")
    return found


@router.get("/sessions", summary="The agent's sessions")
def sessions(agent: str, key: Key, client: Client) -> list[SessionInfo]:
    return client.sessions(access.authorize(key, agent, "read"))

