"""The LangGraph, OpenAI Agents SDK and AutoGen adapters with identities full of
separators (``/``, ``:``, the escape character ``%`` and its escapes, quotes and
backslashes) in every part, through a real worker: an agent per user of an app named by
``identity.agent_id``, and, within an agent, namespaces, keys and session ids that differ
only in where their separators stand. Different identities never share memories. (The
ADK adapter's cases are in test_adk_memory.py.)"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from agents.memory.session import Session
from autogen_core.memory import MemoryContent, MemoryMimeType
from langgraph.store.memory import InMemoryStore

from memoryd.client import MemoryClient
from memoryd.integrations.autogen import MemorydMemory
from memoryd.integrations.identity import agent_id
from memoryd.integrations.langgraph import MemorydStore
from memoryd.integrations.openai_agents import MemorydSession

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("worker")]


@pytest.fixture
def app() -> str:
    return f"app-{uuid.uuid4()}"


def _pairs(app: str) -> list[tuple[str, str]]:
    """(app, user) pairs that the older ``"{app}/{user}"`` naming, or an encoding leaving
    ``%`` unescaped, would have given one agent."""
    return [(f"{app}/x", "y"), (app, "x/y"), (f"{app}%2Fx", "y"), (f"{app}%x", "y"),
            (f"{app}%25x", "y"), (f"{app}:x", "y"), (app, "x:y")]


def test_langgraph_stores_of_different_users_never_share_items(
        client: MemoryClient, app: str) -> None:
    stores = [MemorydStore(client, agent_id=agent_id(*pair)) for pair in _pairs(app)]
    for n, store in enumerate(stores):
        store.put(("notes", "a/b"), "k:1", {"owner": n})
    for n, store in enumerate(stores):
        item = store.get(("notes", "a/b"), "k:1")
        assert item is not None and item.value == {"owner": n}
        assert [i.value for i in store.search(("notes",))] == [{"owner": n}]


def test_langgraph_namespaces_and_keys_differing_in_their_separators_stay_apart(
        client: MemoryClient, app: str) -> None:
    mine, ref = MemorydStore(client, agent_id=agent_id(app, "u/1")), InMemoryStore()
    namespaces = [("a/b", "c"), ("a", "b/c"), ("a", "b", "c"), ("a:b", "c"), ("a", "b:c"),
                  ('a"b', "c"), ("a\\", "b"), ("a", "\\b"), ("a%2Fb", "c"), ("a%", "b")]
    keys = ["", "k", "k/1", "k:1", 'k"1', "k\\1", "%", "%2F"]
    for n, (namespace, key) in enumerate((ns, k) for ns in namespaces for k in keys):
        for store in (mine, ref):
            store.put(namespace, key, {"n": n})
    for namespace in namespaces:
        for key in keys:
            got, want = mine.get(namespace, key), ref.get(namespace, key)
            assert got is not None and want is not None and got.value == want.value
    for prefix in [("a",), ("a", "b"), ("a/b",), ("a:b",), ("a%",)]:
        assert _shape(mine.search(prefix, limit=100)) == _shape(ref.search(prefix, limit=100))
    assert mine.list_namespaces(limit=100) == ref.list_namespaces(limit=100)


def _shape(items: list[Any]) -> list[tuple[tuple[str, ...], str, Any]]:
    return sorted((i.namespace, i.key, i.value["n"]) for i in items)


def test_openai_sessions_of_different_users_or_ids_never_share_items(
        client: MemoryClient, app: str) -> None:
    sessions: list[Session] = [MemorydSession("chat/1", client=client, agent_id=agent_id(*p))
                               for p in _pairs(app)]
    ids = ["s/1", "s", "1", "s%2F1", "s%", "s:1", "s\\1", 's"1']
    one = agent_id(app, "u")
    sessions += [MemorydSession(sid, client=client, agent_id=one) for sid in ids]

    async def run() -> None:
        for n, session in enumerate(sessions):
            await session.add_items([{"role": "user", "content": f"Message {n}."}])
        for n, session in enumerate(sessions):
            assert await session.get_items() == [{"role": "user", "content": f"Message {n}."}]
        await sessions[0].clear_session()
        assert [len(await s.get_items()) for s in sessions] == [0] + [1] * (len(sessions) - 1)

    asyncio.run(run())


def test_autogen_memories_of_different_users_never_share_contents(
        client: MemoryClient, app: str) -> None:
    memories = [MemorydMemory(client, agent_id=agent_id(*pair)) for pair in _pairs(app)]

    async def run() -> None:
        for n, memory in enumerate(memories):
            await memory.add(MemoryContent(content=f"The user's locker is number {n}.",
                                           mime_type=MemoryMimeType.TEXT))
        for n, memory in enumerate(memories):
            found = await memory.query("which locker number does the user have?")
            assert [r.content for r in found.results] == [f"The user's locker is number {n}."]
        await memories[0].clear()
        assert (await memories[0].query("locker")).results == []
        assert len((await memories[1].query("locker")).results) == 1

    asyncio.run(run())
