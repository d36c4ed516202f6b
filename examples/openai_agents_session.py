"""An OpenAI Agents SDK session kept in memoryd.

Give it to the SDK as ``Runner.run(agent, "Hi", session=session)`` and the runner reads
and writes it each turn; here it is driven by hand, so no model is called. Run it with
memoryd up: ``python examples/openai_agents_session.py [agent-id]``.
"""

import asyncio
import sys
import uuid

from memoryd.client import MemoryClient
from memoryd.integrations.openai_agents import MemorydSession

AGENT = sys.argv[1] if len(sys.argv) > 1 else "support-bot"


async def main() -> None:
    with MemoryClient() as client:
        session = MemorydSession(f"chat-{uuid.uuid4().hex[:8]}", client=client, agent_id=AGENT)
        await session.add_items([
            {"role": "user", "content": "My order number is 4711."},
            {"role": "assistant", "content": "Thanks, I found order 4711."}])
        for item in await session.get_items():
            print(f"{item['role']}: {item['content']}")
        best = client.recall(AGENT, "what is the order number?", limit=1)[0]
        print("recalled:", best.content.splitlines()[0])
        popped = await session.pop_item()
        print("popped:", popped and popped["content"])
        await session.clear_session()
        print("left:", len(await session.get_items()))


asyncio.run(main())
