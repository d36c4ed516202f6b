"""Google ADK's memory service kept in memoryd.

Give it to a runner as ``Runner(..., memory_service=service)``; here a session is built
by hand, so no model is called. Run: ``python examples/adk_memory.py [user-id]``.
"""

import asyncio
import sys

from google.adk.events.event import Event
from google.adk.sessions import InMemorySessionService
from google.genai import types

from memoryd.client import MemoryClient
from memoryd.integrations.adk import MemorydMemoryService

USER = sys.argv[1] if len(sys.argv) > 1 else "ana"


def said(author: str, text: str) -> Event:
    role = "user" if author == "user" else "model"
    return Event(author=author, content=types.Content(role=role, parts=[types.Part(text=text)]))


async def main() -> None:
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name="shop", user_id=USER)
    for event in (said("user", "Please ship my parcels to the office in Porto."),
                  said("shop_agent", "Done, the office in Porto it is.")):
        await sessions.append_event(session, event)
    with MemoryClient() as client:
        service = MemorydMemoryService(client)
        await service.add_session_to_memory(session)
        found = await service.search_memory(app_name="shop", user_id=USER,
                                            query="where should parcels go?")
        for entry in found.memories:
            print(f"{entry.author}: {entry.content.parts[0].text}")


asyncio.run(main())
