"""The official MCP SDK's own client, over streamable HTTP (with memoryd's headers) and
over stdio (``memoryd mcp --agent``), for the integration tests."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

T = TypeVar("T")
# The tools memoryd serves, by name.
TOOLS = {"remember", "remember_status", "recall", "forget", "context", "list_memories",
         "kg_add", "kg_query", "history", "working", "update_working", "clear_working",
         "end_thread", "threads"}


def run_http(url: str, headers: dict[str, str],
             session: Callable[[Client], Awaitable[T]]) -> T:
    """``session(client)`` on a connection to ``url``/mcp with ``headers``."""

    async def main() -> T:
        async with httpx2.AsyncClient(headers=headers, timeout=120.0) as http, \
                Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
            return await session(client)

    return anyio.run(main)


def run_stdio(agent: str, env: dict[str, str],
              session: Callable[[Client], Awaitable[T]]) -> T:
    """``session(client)`` on ``python -m memoryd mcp --agent agent``."""
    server = StdioServerParameters(command=sys.executable,
                                   args=["-m", "memoryd", "mcp", "--agent", agent], env=env)

    async def main() -> T:
        async with Client(server) as client:
            return await session(client)

    return anyio.run(main)


def structured(result: Any) -> Any:
    """A tool result's structured content, after checking it is not an error."""
    assert not result.is_error, result.content
    return result.structured_content
