"""A LangGraph graph whose node remembers across runs, through memoryd's store. Run it
against a running memoryd (``memoryd up``; MEMORYD_BROKER_URL as for the client):
``pip install 'memoryd[langgraph]'; python examples/langgraph_store.py [agent-id]``"""

import sys
from typing import Any, TypedDict

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime

from memoryd.client import MemoryClient
from memoryd.integrations.langgraph import MemorydStore


class State(TypedDict):
    user: str
    note: str
    visits: int


def remember(state: State, runtime: Runtime[Any]) -> dict[str, int]:
    assert runtime.store is not None
    namespace = ("users", state["user"])
    profile = runtime.store.get(namespace, "profile")
    visits = (profile.value["visits"] if profile else 0) + 1
    runtime.store.put(namespace, f"note-{visits}", {"text": state["note"]})
    runtime.store.put(namespace, "profile", {"visits": visits}, index=False)
    return {"visits": visits}


agent = sys.argv[1] if len(sys.argv) > 1 else "langgraph-example"
with MemoryClient() as client:
    store = MemorydStore(client, agent_id=agent)
    graph = StateGraph(State).add_node(remember).add_edge(START, "remember").compile(store=store)
    graph.invoke({"user": "ada", "note": "Ada prefers green tea over coffee", "visits": 0})
    state = graph.invoke({"user": "ada", "note": "Ada's cat is called Turing", "visits": 0})
    print("visits:", state["visits"])
    best = store.search(("users", "ada"), query="Does Ada drink tea or coffee?", limit=1)
    print("recalled:", best[0].value["text"])
