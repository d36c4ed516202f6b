"""MCP over streamable HTTP with a key, through the MCP SDK's own client: the tools
memoryd offers, then remember and recall. Run it with memoryd up and a key for one agent
(``memoryd keys create --agent agent-1``; MEMORYD_URL for a gateway elsewhere):
``MEMORYD_KEY=mdk_... python examples/mcp_http.py``"""

import asyncio
import os

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

GATEWAY = os.environ.get("MEMORYD_URL", "http://127.0.0.1:8765")
# A key covering several agents names one with an "X-Memoryd-Agent" header as well.
HEADERS = {"Authorization": f"Bearer {os.environ['MEMORYD_KEY']}"}


def text(result: CallToolResult) -> str:
    """What a model reads of a tool's answer (``structured_content`` holds it as JSON)."""
    return "\n".join(part.text for part in result.content if isinstance(part, TextContent))


async def main() -> None:
    async with httpx2.AsyncClient(headers=HEADERS, timeout=60.0) as http, \
            Client(streamable_http_client(f"{GATEWAY}/mcp", http_client=http)) as client:
        listed = await client.list_tools()
        print("tools:", " ".join(sorted(tool.name for tool in listed.tools)))
        said = await client.call_tool("remember", {"content": "The user's cat is called Miso."})
        print(text(said))
        found = await client.call_tool("recall", {"query": "what is the cat called?", "limit": 1})
        print(text(found))


asyncio.run(main())
