"""Working memory: a live thread's state beside long-term memory, the turn's context from
both, and the thread's end, which promotes its messages. Run it with memoryd up (the
client finds the broker as ``memoryd`` does): ``python examples/working_memory.py [agent-id]``"""

import sys

from memoryd.client import MemoryClient

agent = sys.argv[1] if len(sys.argv) > 1 else "agent-1"
with MemoryClient() as client:
    client.store(agent, "Ana is vegetarian and loves Sichuan food.", category="preference")
    client.update_working(agent, "chat-42", topic="dinner", entities=["Ana"],
                          messages=[{"role": "user", "content": "Book dinner for Ana on Friday."}],
                          variables={"party_size": 2}, increment={"turns": 1})
    state = client.working(agent, "chat-42")
    print("working:", state.version, state.topic, state.counters, len(state.messages))
    turn = client.context(agent, "Where should Ana and I eat?", thread_id="chat-42",
                          budget=600, structured=True)
    print("context:", turn.used, "chars;", [m.strategies for m in turn.memories])
    print(turn.context)
    done = client.end_thread(agent, "chat-42")
    print("promoted:", done.promoted)
    print("session:", [m.content for m in client.session_messages(agent, "chat-42")])
