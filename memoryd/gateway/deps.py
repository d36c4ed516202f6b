"""What every route depends on: the app's client and key verifier, and the caller's key."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import Depends, Request

from memoryd.auth.scope import KeyScope
from memoryd.client import MemoryClient
from memoryd.config import Settings
from memoryd.errors import ValidationError
from memoryd.gateway import access


def client(request: Request) -> MemoryClient:
    found: MemoryClient = request.app.state.client
    return found


def settings(request: Request) -> Settings:
    found: Settings = request.app.state.settings
    return found


def key_scope(request: Request) -> KeyScope:
    """The caller's key, verified (401 without a usable one). A plain function: FastAPI
    runs it in a worker thread, as it may read the database."""
    return access.authenticate(request.app.state.verifier, request.headers)


async def json_body(request: Request) -> Any:
    """The request's JSON body (None if empty), read here rather than by FastAPI so that
    ``memoryd.validation`` judges it and the OpenAPI schema names the pydantic type."""
    raw = await request.body()
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise ValidationError("body", "is not valid JSON") from None


Client = Annotated[MemoryClient, Depends(client)]
Key = Annotated[KeyScope, Depends(key_scope)]
Config = Annotated[Settings, Depends(settings)]
JsonBody = Annotated[Any, Depends(json_body)]
