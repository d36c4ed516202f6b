"""An AutoGen memory kept in memoryd.

Give it to an agent as ``AssistantAgent(..., memory=[memory])``: before each model call
the agent runs ``update_context``, as done here by hand, so no model is called. Run it
with memoryd up: ``python examples/autogen_memory.py [agent-id]``.
"""

import asyncio
import sys

from autogen_core.memory import MemoryContent, MemoryMimeType
from autogen_core.model_context import BufferedChatCompletionContext
from autogen_core.models import UserMessage

from memoryd.client import MemoryClient
from memoryd.integrations.autogen import MemorydMemory

AGENT = sys.argv[1] if len(sys.argv) > 1 else "planner"


async def main() -> None:
    with MemoryClient() as client:
        memory = MemorydMemory(client, agent_id=AGENT, limit=3)
        await memory.add(MemoryContent(content="The user prefers metric units.",
                                       mime_type=MemoryMimeType.TEXT))
        context = BufferedChatCompletionContext(buffer_size=10)
        await context.add_message(UserMessage(content="Which units should I use?",
                                              source="user"))
        await memory.update_context(context)
        print((await context.get_messages())[-1].content)


asyncio.run(main())
