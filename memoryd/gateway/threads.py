"""``/v1/agents/{agent}/threads/...``: each thread's working memory (``memoryd.working``).

The gateway's client reads and changes it in Redis itself, with no worker in the way;
only ending a thread waits for a worker, which promotes its messages into long-term
memory. Each handler checks the key against the agent, parses its body with
``memoryd.validation`` and makes one ``MemoryClient`` call.

A thread id is one path segment: the last, or the one before ``/clear``, ``/pop`` or
``/end``. A
"/" in it is sent as %2F. The server decodes %2F before routing, so these routes match
the path as it was sent (``SegmentRoute``): decoded first, the thread's slashes would
move part of it into the agent id."""

from __future__ import annotations

import re
from typing import Annotated, Any
from urllib.parse import unquote_to_bytes

from fastapi import APIRouter, Header, Query
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette._utils import get_route_path
from starlette.routing import Match
from starlette.types import Scope

from memoryd import validation as check
from memoryd.errors import ValidationError
from memoryd.gateway import access
from memoryd.gateway.deps import Client, JsonBody, Key
from memoryd.gateway.schema import request_body
from memoryd.working.model import (
    Promotion,
    ThreadInfo,
    WorkingMemory,
    WorkingMessage,
    WorkingUpdate,
)

# kg_query's entity id is a path too (``/kg/entities/{entity_id:path}``): a path that
# reads both ways (an entity "x/threads/y") stays the entity's, as it was before threads.
_KG_ENTITY = re.compile(r"(^|/)kg/entities(/|$)")


class SegmentRoute(APIRoute):
    """A route matched against the path as the client sent it, each parameter then
    percent-decoded on its own: a thread id holding %2F stays one segment."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        sent = _path_as_sent(scope)
        if sent is None:
            return super().matches(scope)
        match, child = super().matches({**scope, "path": sent, "root_path": ""})
        if match is Match.NONE:
            return match, child
        params = {name: _decoded(value) if isinstance(value, str) else value
                  for name, value in child.get("path_params", {}).items()}
        if _KG_ENTITY.search(params.get("agent", "")):
            return Match.NONE, {}
        return match, {**child, "path_params": params}


def _path_as_sent(scope: Scope) -> str | None:
    """The request's path still percent-encoded, when the server kept it and it is the
    path routing would read (not another one under a mount's prefix)."""
    raw = scope.get("raw_path")
    if scope["type"] != "http" or not isinstance(raw, bytes):
        return None
    try:
        sent = raw.decode("ascii")
    except UnicodeDecodeError:
        return None
    return sent if _decoded(sent) == get_route_path(scope) else None


def _decoded(text: str) -> str:
    """Percent-decoded as the server decodes a path, bytes that are not UTF-8 kept as
    ``RawTextMiddleware`` keeps them (lone surrogates, which the checks refuse)."""
    return unquote_to_bytes(text).decode("utf-8", "surrogateescape")


router = APIRouter(prefix="/v1/agents/{agent:path}/threads", tags=["working memory"],
                   route_class=SegmentRoute)

REQUEST_MODELS: list[type[BaseModel]] = [WorkingUpdate]

CONFLICT: dict[int | str, dict[str, Any]] = {409: {
    "description": "expected_version (or If-Match) is not the thread's version: read it "
                   "again and retry"}}


@router.get("", summary="The agent's live threads, soonest to expire first")
def list_threads(agent: str, key: Key, client: Client, limit: Annotated[int, Query()] = 100,
                 offset: Annotated[int, Query()] = 0) -> list[ThreadInfo]:
    return client.threads(access.authorize(key, agent, "read"), limit=limit, offset=offset)


@router.get("/{thread}", summary="A thread's working memory (version 0: it holds none); "
                                 "reading it slides its deadline")
def get_thread(agent: str, thread: str, key: Key, client: Client) -> WorkingMemory:
    return client.working(access.authorize(key, agent, "read"), thread)


@router.patch("/{thread}", openapi_extra=request_body(WorkingUpdate), responses=CONFLICT,
              summary="Apply one update atomically; expected_version makes it "
                      "compare-and-set")
def update_thread(agent: str, thread: str, key: Key, client: Client, payload: JsonBody,
                  if_match: Annotated[str | None, Header()] = None) -> WorkingMemory:
    agent_id = access.authorize(key, agent, "write")
    update = check.request(WorkingUpdate, payload)
    return client.update_working(agent_id, thread, expected(update, if_match))


@router.post("/{thread}/clear", summary="Empty the thread; its messages go to long-term "
                                        "memory")
def clear_thread(agent: str, thread: str, key: Key, client: Client) -> WorkingMemory:
    return client.clear_working(access.authorize(key, agent, "write"), thread)


@router.post("/{thread}/pop", summary="Remove and return the thread's newest message "
                                      "(null: it holds none); two callers never get the same")
def pop_message(agent: str, thread: str, key: Key, client: Client) -> WorkingMessage | None:
    return client.pop_message(access.authorize(key, agent, "write"), thread)


@router.post("/{thread}/end", summary="End the thread: its messages become session "
                                      "{thread} in long-term memory, then it is deleted")
def end_thread(agent: str, thread: str, key: Key, client: Client) -> Promotion:
    return client.end_thread(access.authorize(key, agent, "write"), thread)


def expected(update: WorkingUpdate, if_match: str | None) -> WorkingUpdate:
    """``update`` with the version an ``If-Match`` header expects (a number, quoted as
    an entity tag or not); a body that expects another version is refused."""
    if if_match is None:
        return update
    version = if_match.strip().removeprefix('"').removesuffix('"')
    if not check.ascii_digits(version) or len(version) > 18:
        raise ValidationError("If-Match", "must be the thread's version, a number")
    if update.expected_version not in (None, int(version)):
        raise ValidationError("expected_version", "differs from the If-Match header")
    return update.model_copy(update={"expected_version": int(version)})
