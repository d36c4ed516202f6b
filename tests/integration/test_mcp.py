"""MCP with the SDK's own client: over streamable HTTP on a real gateway (the agent bound
by the key, or by X-Memoryd-Agent within the key's scope) and over stdio through
``memoryd mcp --agent``; tools listed with schemas and annotations, remember, recall,
forget and the rest."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from mcp import Client

from memoryd.memory.store import MemoryStore
from tests.support.gateway import GatewayProcess, bearer, make_key
from tests.support.mcp_clients import TOOLS, run_http, run_stdio, structured

pytestmark = pytest.mark.slow


async def _remember_recall_forget(client: Client) -> dict[str, Any]:
    listed = await client.list_tools()
    stored = structured(await client.call_tool(
        "remember", {"content": "The user's favourite colour is teal.", "tags": ["taste"]}))
    found = structured(await client.call_tool("recall", {"query": "favourite colour?"}))
    text = (await client.call_tool("recall", {"query": "favourite colour?"})).content[0]
    gone = structured(await client.call_tool("forget", {"memory_id": stored["id"]}))
    after = structured(await client.call_tool("recall", {"query": "favourite colour?"}))
    return {"tools": listed.tools, "stored": stored, "found": found, "text": text.text,
            "gone": gone, "after": after}


def _check_session(outcome: dict[str, Any]) -> None:
    tools = {tool.name: tool for tool in outcome["tools"]}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description and len(tool.description) > 40
        assert tool.input_schema["type"] == "object"
        assert "agent_id" not in tool.input_schema["properties"]
        assert "agent" not in tool.input_schema["properties"]
    for name in ("recall", "context", "list_memories", "kg_query", "history"):
        assert tools[name].annotations.read_only_hint is True
    assert tools["forget"].annotations.destructive_hint is True
    assert tools["remember"].annotations.read_only_hint is False

    assert outcome["stored"]["stored"] is True
    hits = outcome["found"]["memories"]
    assert hits[0]["memory"]["id"] == outcome["stored"]["id"]
    assert "The user's favourite colour is teal." in outcome["text"]
    assert outcome["gone"] == {"id": outcome["stored"]["id"], "forgotten": True}
    assert outcome["stored"]["id"] not in {h["memory"]["id"]
                                           for h in outcome["after"]["memories"]}


def test_mcp_over_http_binds_the_keys_agent(gateway: GatewayProcess, store: MemoryStore,
                                            agent_id: str) -> None:
    key = make_key(store, agents=(agent_id,))
    outcome = run_http(gateway.url, bearer(key), _remember_recall_forget)
    _check_session(outcome)
    assert store.list(agent_id).total == 0  # remembered, then forgotten, for this agent


def test_mcp_over_http_takes_an_agent_header_within_the_keys_scope(
        gateway: GatewayProcess, store: MemoryStore) -> None:
    team = f"team-{uuid.uuid4()}/"
    key = make_key(store, prefixes=(team,))
    headers = {**bearer(key), "X-Memoryd-Agent": f"{team}scout"}

    async def session(client: Client) -> Any:
        stored = structured(await client.call_tool("remember", {"content": "Scouted hill 3."}))
        structured(await client.call_tool("kg_add", {
            "id": "hill-3", "type": "place", "relations": [{"target": "river",
                                                            "type": "near"}]}))
        graph = structured(await client.call_tool("kg_query", {"start_id": "hill-3"}))
        page = structured(await client.call_tool("list_memories", {}))
        context = structured(await client.call_tool("context", {"query": "hill"}))
        return stored, graph, page, context

    stored, graph, page, context = run_http(gateway.url, headers, session)
    assert {e["id"] for e in graph["entities"]} == {"hill-3", "river"}
    assert [m["id"] for m in page["items"]] == [stored["id"]]
    assert "Scouted hill 3." in context["context"]
    assert [m.content for m in store.list(f"{team}scout").items] == ["Scouted hill 3."]


def test_mcp_over_http_refuses_missing_keys_and_unbound_agents(
        gateway: GatewayProcess, store: MemoryStore, agent_id: str) -> None:
    several = make_key(store, agents=(agent_id, f"{agent_id}-2"))
    single = make_key(store, agents=(agent_id,))
    hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream"}
    cases = [({}, 401), (bearer("mdk_unknown"), 401), (bearer(several), 403),
             ({**bearer(single), "X-Memoryd-Agent": "someone-else"}, 403)]
    for headers, status in cases:
        answer = httpx.post(f"{gateway.url}/mcp", json=hello, headers={**accept, **headers})
        assert answer.status_code == status, answer.text
        assert answer.json()["error"]["type"] in {"unauthorized", "forbidden"}


def test_an_agent_id_argument_cannot_redirect_a_tool(
        gateway: GatewayProcess, store: MemoryStore, agent_id: str) -> None:
    victim = f"victim-{uuid.uuid4()}"
    store.store(victim, "The victim's secret plan is to launch on Tuesday.")
    key = make_key(store, agents=(agent_id,))

    async def session(client: Client) -> Any:
        return await client.call_tool("recall", {"query": "secret plan launch",
                                                 "agent_id": victim})

    result = run_http(gateway.url, bearer(key), session)
    assert "Tuesday" not in str(result.content) and "Tuesday" not in str(
        result.structured_content)
    # Refused by name, not silently dropped: the caller learns it did nothing.
    assert result.is_error and "validation_error: agent_id: " in result.content[0].text
    assert store.list(victim).total == 1


def test_a_tool_error_is_reported_to_the_model_not_raised(
        gateway: GatewayProcess, store: MemoryStore, agent_id: str) -> None:
    key = make_key(store, agents=(agent_id,))

    async def session(client: Client) -> Any:
        return await client.call_tool("forget", {"memory_id": "not-a-uuid"})

    result = run_http(gateway.url, bearer(key), session)
    assert result.is_error
    assert "memory_id" in result.content[0].text


def test_mcp_over_stdio_acts_for_the_commands_agent(
        worker: object, service_env: dict[str, str], store: MemoryStore,
        agent_id: str) -> None:
    outcome = run_stdio(agent_id, service_env, _remember_recall_forget)
    _check_session(outcome)
    assert store.list(agent_id).total == 0


def test_a_refused_tool_call_names_the_argument_and_never_repeats_the_value(
        gateway: GatewayProcess, store: MemoryStore, agent_id: str) -> None:
    key = make_key(store, agents=(agent_id,))
    secret = f"secret-{uuid.uuid4().hex}"
    calls: list[tuple[str, dict[str, Any], str]] = [
             ("recall", {"query": "x", "limit": secret}, "limit"),
             ("remember", {"content": [secret]}, "content"),
             ("kg_add", {"id": "x", "relations": [{"target": secret}]}, "relations[0].type"),
             ("list_memories", {"category": secret}, "category"),
             ("recall", {"query": "x", "mode": secret}, "mode"),
             ("recall", {"query": "x", "as_of": secret}, "as_of"),
             ("remember", {"content": "x", "supersedes": [secret]}, "supersedes[0]"),
             ("history", {"memory_id": secret}, "memory_id"),
             (secret, {}, "name")]

    async def session(client: Client) -> list[Any]:
        return [await client.call_tool(name, args) for name, args, _ in calls]

    results = run_http(gateway.url, bearer(key), session)
    for (name, _, field), result in zip(calls, results, strict=True):
        said = result.content[0].text
        assert result.is_error and f"validation_error: {field}: " in said, (name, said)
        assert secret not in said and "input_value" not in said, (name, said)
    assert secret not in gateway.log_text()  # nor in the SDK's line of the failure


@pytest.mark.parametrize("body", [
    '{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'.encode("utf-16"),
    b"[" * 100_000,
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "recall", '
    b'"arguments": {"query": "\\ud800"}}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "recall", '
    b'"arguments": {"query": "x", "limit": NaN}}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "recall", '
    b'"arguments": {"query": "x", "limit": 1e999}}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "recall", '
    b'"arguments": {"query": "x", "metadata": {"k": 1, "k": [2]}}}}',
    b'\xed\xa0\x80', b"[]", b'"tools/list"',
])
def test_a_hostile_mcp_body_is_refused_never_a_500(
        gateway: GatewayProcess, store: MemoryStore, agent_id: str, body: bytes) -> None:
    headers = {**bearer(make_key(store, agents=(agent_id,))), "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}
    answer = httpx.post(f"{gateway.url}/mcp", content=body, headers=headers, timeout=60)
    assert answer.status_code < 500, answer.text
    if answer.status_code == 200:  # a tool call: refused as the tool's error, in words
        assert answer.json()["result"]["isError"] is True, answer.text  # of memoryd's
        assert "input_value" not in answer.text  # (pydantic's would quote the value)


@pytest.mark.parametrize(("message", "field"), [
    ("SECRET", "body"), (["SECRET"], "body"), ({"jsonrpc": "2.0", "method": 5}, "method"),
    ({"jsonrpc": "SECRET", "id": 1, "method": "tools/list"}, "jsonrpc"),
    ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": "SECRET"}, "params"),
    ({"jsonrpc": "2.0", "id": 1, "result": "SECRET"}, "result"), ({"SECRET": 1}, "body"),
])
def test_a_body_that_is_no_json_rpc_message_is_refused_by_name_without_its_value(
        gateway: GatewayProcess, store: MemoryStore, agent_id: str, message: Any,
        field: str) -> None:
    secret = f"secret-{uuid.uuid4().hex}"
    body = json.dumps(message).replace("SECRET", secret)
    headers = {**bearer(make_key(store, agents=(agent_id,))), "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}
    answer = httpx.post(f"{gateway.url}/mcp", content=body, headers=headers, timeout=60)
    assert 400 <= answer.status_code < 500, answer.text
    error = answer.json()["error"]
    assert error["code"] == -32600 and error["data"] == {"type": "validation_error",
                                                         "field": field}, error
    assert secret not in answer.text and "input_value" not in answer.text
