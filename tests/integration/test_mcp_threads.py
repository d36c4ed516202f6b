"""Working memory as MCP tools, with the SDK's own client: over streamable HTTP on a real
gateway (the agent bound by the key) and over stdio (``memoryd mcp --agent``). The tools
take no agent, update_working takes exactly the fields of one update, refusals name the
argument and change nothing, and end_thread puts the messages in long-term memory."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from mcp import Client

from memoryd.client import MemoryClient
from memoryd.memory.store import MemoryStore
from memoryd.working.model import WorkingUpdate
from tests.support.gateway import GatewayProcess, bearer, make_key
from tests.support.mcp_clients import run_http, run_stdio, structured

pytestmark = pytest.mark.slow

CANARY = "canary-51d2-do-not-echo"
THREAD_TOOLS = {"working", "update_working", "clear_working", "end_thread", "threads"}


def _say(*contents: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": content} for content in contents]


def test_the_thread_tools_are_listed_and_update_working_takes_an_updates_fields(
        gateway: GatewayProcess, store: MemoryStore, agent_id: str) -> None:
    async def session(client: Client) -> Any:
        return (await client.list_tools()).tools

    tools = {t.name: t for t in run_http(gateway.url, bearer(make_key(
        store, agents=(agent_id,))), session)}
    assert set(tools) >= THREAD_TOOLS
    for name in THREAD_TOOLS:
        properties = set(tools[name].input_schema["properties"])
        assert not properties & {"agent", "agent_id"}, name
        assert len(tools[name].description or "") > 40, name
    assert set(tools["update_working"].input_schema["properties"]) == {
        "thread_id", *WorkingUpdate.model_fields}
    assert tools["working"].annotations.read_only_hint is True
    assert tools["threads"].annotations.read_only_hint is True
    assert tools["update_working"].annotations.idempotent_hint is False
    assert tools["end_thread"].annotations.destructive_hint is True
    assert tools["clear_working"].annotations.destructive_hint is True


def test_a_thread_round_trips_through_the_tools_and_ends_in_long_term_memory(
        gateway: GatewayProcess, store: MemoryStore, client: MemoryClient,
        agent_id: str) -> None:
    async def session(client: Client) -> list[Any]:
        return [
            structured(await client.call_tool("update_working", {
                "thread_id": "chat-1", "messages": _say("I live in Porto."),
                "variables": {"city": "Porto"}, "set_flags": ["located"],
                "increment": {"turns": 1}, "topic": "travel",
                "tools": {"pending": [{"op": "book"}]}})),
            structured(await client.call_tool("update_working", {
                "thread_id": "chat-1", "expected_version": 1,
                "messages": [{"role": "assistant", "content": "Porto it is."}]})),
            await client.call_tool("working", {"thread_id": "chat-1"}),
            structured(await client.call_tool("threads", {})),
            structured(await client.call_tool("end_thread", {"thread_id": "chat-1"})),
            structured(await client.call_tool("working", {"thread_id": "chat-1"})),
        ]

    first, second, read, listed, ended, after = run_http(
        gateway.url, bearer(make_key(store, agents=(agent_id,))), session)
    assert (first["agent_id"], first["version"], second["version"]) == (agent_id, 1, 2)
    state = structured(read)
    assert [(m["role"], m["content"]) for m in state["messages"]] == [
        ("user", "I live in Porto."), ("assistant", "Porto it is.")]
    assert (state["variables"], state["flags"], state["counters"], state["topic"]) == (
        {"city": "Porto"}, ["located"], {"turns": 1}, "travel")
    assert state["tools"]["pending"] == [{"op": "book"}]
    text = read.content[0].text
    assert "Topic: travel" in text and "2. assistant: Porto it is." in text
    assert [t["thread_id"] for t in listed["threads"]] == ["chat-1"]
    assert (ended["ended"], ended["promoted"]) == (True, 2)
    assert after["version"] == 0
    assert [m.content for m in client.session_messages(agent_id, "chat-1")] == [
        "I live in Porto.", "Porto it is."]


def test_a_stale_expected_version_is_a_conflict_and_changes_nothing(
        gateway: GatewayProcess, store: MemoryStore, client: MemoryClient,
        agent_id: str) -> None:
    client.update_working(agent_id, "cas", topic="one")
    client.update_working(agent_id, "cas", topic="two")

    async def session(client: Client) -> Any:
        return await client.call_tool("update_working", {
            "thread_id": "cas", "expected_version": 1, "topic": CANARY})

    result = run_http(gateway.url, bearer(make_key(store, agents=(agent_id,))), session)
    said = result.content[0].text
    assert result.is_error and ": conflict: the thread is at version 2" in said, said
    assert CANARY not in said
    state = client.working(agent_id, "cas")
    assert (state.version, state.topic) == (2, "two")


def _nested(depth: int) -> Any:
    value: Any = CANARY
    for _ in range(depth):
        value = [value]
    return value


def test_a_refused_update_names_the_argument_and_changes_nothing(
        gateway: GatewayProcess, store: MemoryStore, client: MemoryClient,
        agent_id: str) -> None:
    before = client.update_working(agent_id, "guarded", messages=_say("kept"))
    calls: list[tuple[dict[str, Any], str]] = [
        ({"agent_id": CANARY}, "validation_error: agent_id: "),
        ({"bogus": CANARY}, "validation_error: bogus: "),
        ({"messages": [{"role": CANARY, "content": "x"}]},
         "validation_error: messages[0].role: "),
        ({"messages": _say(CANARY + "x" * 600_000)}, "too_large: messages[0].content: "),
        ({"variables": {"deep": _nested(40)}}, "validation_error: variables.deep: "),
        ({"increment": {"n": 2**60}}, "validation_error: increment.n: "),
        ({"messages": [{"role": "user", "content": "x", "extra": CANARY}]},
         "validation_error: messages[0].extra: "),
    ]

    async def session(client: Client) -> list[Any]:
        return [await client.call_tool("update_working", {"thread_id": "guarded", **args})
                for args, _ in calls]

    results = run_http(gateway.url, bearer(make_key(store, agents=(agent_id,))), session)
    for (args, expected), result in zip(calls, results, strict=True):
        said = result.content[0].text
        assert result.is_error and expected in said, (args.keys(), said)
        assert CANARY not in said and "input_value" not in said
    after = client.working(agent_id, "guarded")
    assert (after.version, after.messages, after.variables) == (
        before.version, before.messages, before.variables)
    assert CANARY not in gateway.log_text()


def test_the_tools_act_for_the_keys_agent_whatever_the_arguments(
        gateway: GatewayProcess, store: MemoryStore, client: MemoryClient) -> None:
    team = f"team-{uuid.uuid4().hex[:8]}"
    alice, bob = f"{team}/alice", f"{team}/bob"
    before = client.update_working(alice, "secret", messages=_say(CANARY))
    bobs = bearer(make_key(store, agents=(bob,)))

    async def session(client: Client) -> list[Any]:
        return [structured(await client.call_tool("working", {"thread_id": "secret"})),
                structured(await client.call_tool("threads", {})),
                structured(await client.call_tool("end_thread", {"thread_id": "secret"})),
                structured(await client.call_tool("clear_working", {"thread_id": "secret"}))]

    read, listed, ended, cleared = run_http(gateway.url, bobs, session)
    assert (read["agent_id"], read["version"], listed["threads"]) == (bob, 0, [])
    assert (ended["ended"], cleared["version"]) == (False, 0)
    after = client.working(alice, "secret")
    assert (after.version, after.messages) == (before.version, before.messages)

    accept = {"Accept": "application/json, text/event-stream"}
    for tool in sorted(THREAD_TOOLS):
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": tool, "arguments": {"thread_id": "secret"}}}
        answer = httpx.post(f"{gateway.url}/mcp", json=call, headers={
            **accept, **bobs, "X-Memoryd-Agent": alice})
        assert answer.status_code == 403, (tool, answer.text)
        assert CANARY not in answer.text
    assert client.working(alice, "secret").version == before.version


def test_the_thread_tools_over_stdio_act_for_the_commands_agent(
        worker: object, service_env: dict[str, str], client: MemoryClient,
        agent_id: str) -> None:
    async def session(client: Client) -> Any:
        await client.call_tool("update_working", {"thread_id": "local",
                                                  "messages": _say("over stdio")})
        return structured(await client.call_tool("working", {"thread_id": "local"}))

    state = run_stdio(agent_id, service_env, session)
    assert (state["agent_id"], [m["content"] for m in state["messages"]]) == (
        agent_id, ["over stdio"])
    assert client.working(agent_id, "local").version == 1


def test_the_context_tool_brings_the_threads_working_memory_within_a_budget(
        gateway: GatewayProcess, store: MemoryStore, client: MemoryClient,
        agent_id: str) -> None:
    client.store(agent_id, "Ilvar keeps bees on the roof of the old mill.")
    client.update_working(agent_id, "chat-9", topic="visit", messages=_say("Visiting Ilvar."))

    async def session(mcp: Client) -> Any:
        return await mcp.call_tool("context", {"query": "What does Ilvar do?",
                                               "thread_id": "chat-9", "budget": 400})

    answer = run_http(gateway.url, bearer(make_key(store, agents=(agent_id,))), session)
    found = structured(answer)
    assert "Topic: visit" in found["context"] and "user: Visiting Ilvar." in found["context"]
    assert found["used"] <= 400
    assert [m["memory"]["content"] for m in found["memories"]] == [
        "Ilvar keeps bees on the roof of the old mill."]
    assert answer.content[0].text == found["context"]
