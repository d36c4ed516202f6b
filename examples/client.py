"""The Python client: store a memory, recall it, list the agent's memories. Run it with
memoryd up (the client finds the broker as ``memoryd`` does; MEMORYD_BROKER_URL for a
broker of your own): ``python examples/client.py [agent-id]``"""

import sys

from memoryd.client import MemoryClient

agent = sys.argv[1] if len(sys.argv) > 1 else "agent-1"
with MemoryClient() as client:
    client.store(agent, "User prefers dark mode", role="user", session_id="s1")
    hits = client.recall(agent, "what theme does the user like?", limit=5)
    print("recalled:", hits[0].memory.content, f"(score {hits[0].score:.2f})")
    print("components:", hits[0].components.model_dump())
    for memory in client.list(agent).items:
        print("listed:", memory.id, memory.category, memory.content)
