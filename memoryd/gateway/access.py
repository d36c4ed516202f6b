"""Who is calling: the API key of a request, and the agent an MCP connection is bound to.

Only the key decides. A path names the agent an HTTP request is about, and the key's
scope must cover it; an MCP connection is bound to the key's one agent, or to the agent
named by the ``X-Memoryd-Agent`` header when the key's scope covers it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from memoryd import validation as check
from memoryd.auth.scope import KeyScope, Permission
from memoryd.errors import Forbidden, Unauthorized

AGENT_HEADER = "x-memoryd-agent"


class Verifier(Protocol):
    def verify(self, key: str) -> KeyScope | None: ...


def bearer_key(headers: Mapping[str, str]) -> str:
    """The key of an ``Authorization: Bearer <key>`` header."""
    scheme, _, key = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise Unauthorized("send an API key as 'Authorization: Bearer mdk_...'")
    return key.strip()


def authenticate(verifier: Verifier, headers: Mapping[str, str]) -> KeyScope:
    return usable(verifier.verify(bearer_key(headers)))


def usable(found: KeyScope | None) -> KeyScope:
    """The verifier's answer, or 401 when it found no usable key."""
    if found is None:
        raise Unauthorized("unknown, revoked or expired API key")
    return found


def authorize(scope: KeyScope, agent: str, permission: Permission) -> str:
    """``agent`` validated, if the key may do ``permission`` on it."""
    agent_id = check.agent_id(agent)
    scope.require(agent_id, permission)
    return agent_id


def actor(scope: KeyScope) -> str:
    """Who a change is recorded as made by (versions, supersessions, reviews): the key's
    id, never a value the request carries."""
    return f"key:{scope.id}"


def bound_agent(scope: KeyScope, headers: Mapping[str, str]) -> str:
    """The agent of an MCP connection: the header's, else the key's only agent."""
    named = headers.get(AGENT_HEADER)
    if named:
        agent = check.agent_id(named)
        if not scope.covers(agent):
            raise Forbidden(f"this key does not cover agent {agent!r}")
        return agent
    only = scope.single_agent()
    if only is None:
        raise Forbidden("this key covers several agents: name one in the "
                        "X-Memoryd-Agent header")
    return only
