"""What every route depends on: the app's client and key verifier, and the caller's key."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from memoryd import validation as check
from memoryd.auth.scope import KeyScope
from memoryd.client import MemoryClient
from memoryd.config import Settings
from memoryd.gateway import access
from memoryd.gateway.accepted import AcceptedTasks

# The dependencies are coroutines, so FastAPI runs them on the event loop: a plain
# function would cost each request a hop to a worker thread and back.

async def client(request: Request) -> MemoryClient:
    found: MemoryClient = request.app.state.client
    return found


async def accepted(request: Request) -> AcceptedTasks:
    found: AcceptedTasks = request.app.state.accepted
    return found


async def settings(request: Request) -> Settings:
    found: Settings = request.app.state.settings
    return found


async def key_scope(request: Request) -> KeyScope:
    """The caller's key, verified (401 without a usable one): from the verifier's
    cache on the event loop, or from the database in a worker thread."""
    verifier = request.app.state.verifier
    key = access.bearer_key(request.headers)
    known, found = verifier.cached(key)
    if not known:
        found = await run_in_threadpool(verifier.verify, key)
    return access.usable(found)


async def json_body(request: Request) -> Any:
    """The request's JSON body (None if empty), read here rather than by FastAPI so that
    ``memoryd.validation`` judges it and the OpenAPI schema names the pydantic type."""
    raw = await request.body()
    if not raw.strip():
        return None
    return check.json_body(raw, request.headers.get("content-type"))


Client = Annotated[MemoryClient, Depends(client)]
Accepted = Annotated[AcceptedTasks, Depends(accepted)]
Key = Annotated[KeyScope, Depends(key_scope)]
Config = Annotated[Settings, Depends(settings)]
JsonBody = Annotated[Any, Depends(json_body)]
