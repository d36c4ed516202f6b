"""Input that used to pass the front door and break below it: texts too long for their
index in bytes, JSON nested too deep, numbers and timestamps outside what PostgreSQL
stores, digits of other scripts, bodies that are not JSON. Through a real gateway (HTTP
and MCP) on a real worker: each is a 4xx naming the field, never a retried task (504)
or a 500, and nothing changes in the database."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp import Client
from sqlalchemy import text

from memoryd.memory.store import MemoryStore
from tests.support.gateway import GatewayProcess, bearer, make_key
from tests.support.mcp_clients import run_http
from tests.support.snapshots import agent_snapshot

pytestmark = pytest.mark.slow
FOUR_BYTES = "\U0001F600"  # one character, four bytes of UTF-8
# 512 characters fit the columns; 2048 bytes PostgreSQL cannot compress broke their index.
_RNG = random.Random(23)
LONG = "".join(chr(_RNG.randint(0x10000, 0x10FFFF)) for _ in range(512))
DATABASE_WORDS = ("sqlalchemy", "psycopg", "SELECT", "OFFSET", "[SQL", "parameters")


def _deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.fixture
def seeded(store: MemoryStore, agent_id: str) -> Iterator[dict[str, Any]]:
    """An agent with a memory, a session and an entity; afterwards, the database must
    hold exactly that and no maintenance run."""
    store.store(agent_id, "The deploy window is Friday.", key="deploy", session_id="s1")
    store.kg_add(agent_id, {"id": "alice", "relations": [{"target": "acme", "type": "at"}]})
    before = agent_snapshot(store, agent_id)
    yield {"agent": agent_id, "key": bearer(make_key(store, agents=(agent_id,)))}
    assert agent_snapshot(store, agent_id) == before
    with store.session() as session:
        assert session.execute(text("SELECT count(*) FROM maintenance_runs")).scalar() == 0


def _refused(answer: httpx.Response, status: int, field: str) -> None:
    """A 4xx (the task was not retried into a 504) naming ``field``, without database text."""
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["field"] == field, answer.text
    for word in DATABASE_WORDS:
        assert word not in answer.text


@pytest.mark.parametrize(("path", "body", "field"), [
    ("memories", {"content": "A note.", "key": LONG}, "key"),
    ("memories", {"content": "A note.", "session_id": LONG}, "session_id"),
    ("memories", {"items": [{"content": "A note.", "key": LONG}]}, "items[0].key"),
    ("kg/entities", {"id": "bob", "relations": [{"target": LONG, "type": "knows"}]},
     "entity.relations[0].target"),
    ("kg/entities", {"id": "bob", "relations": [{"target": "x", "type": FOUR_BYTES * 240}]},
     "entity.relations[0].type"),
    ("kg/entities", {"id": LONG}, "entity.id"),
    ("memories", {"content": "A note.", "metadata": _deep(400)}, "body"),
    ("kg/entities", {"id": "bob", "attributes": _deep(400)}, "body"),
    ("memories", {"content": "A note.", "expires_at": "0001-01-01T00:00:00+14:00"},
     "expires_at"),
    ("memories", {"content": "A note.", "created_at": "9999-12-31T23:59:59.999999+00:00"},
     "created_at"),
    ("recall", {"query": "deploy", "since": "0001-01-01T00:00:00+14:00"}, "since"),
    ("recall", {"query": "deploy", "until": "9999-12-31T23:59:59.999999+00:00"}, "until"),
    ("recall", {"query": "deploy", "session_id": LONG}, "session_id"),
])
def test_a_body_that_would_break_below_the_gateway_is_refused_by_name(
        http: httpx.Client, seeded: dict[str, Any], path: str, body: dict[str, Any],
        field: str) -> None:
    answer = http.post(f"/v1/agents/{seeded['agent']}/{path}", headers=seeded["key"],
                       json=body)
    _refused(answer, 422, field)


def test_an_agent_id_and_key_too_long_together_for_their_index_are_refused_not_retried(
        http: httpx.Client, store: MemoryStore) -> None:
    # 255 and 512 four-byte characters fit their columns; together, 3 KB broke the
    # unique index on (agent_id, key), and the worker retried that for minutes (504).
    agent = "".join(chr(_RNG.randint(0x10000, 0x10FFFF)) for _ in range(255))
    auth = bearer(make_key(store, prefixes=("",)))
    answer = http.post(f"/v1/agents/{agent}/memories", headers=auth,
                       json={"content": "A note.", "key": LONG})
    _refused(answer, 422, "agent_id")
    with store.session() as session:
        assert session.execute(text("SELECT count(*) FROM memories")).scalar() == 0


@pytest.mark.parametrize(("params", "field"), [
    ({"offset": "99999999999999999999"}, "offset"),
    ({"offset": str(2**63)}, "offset"),
    ({"since": "0001-01-01T00:00:00+14:00"}, "since"),
    ({"until": "9999-12-31T23:59:59.999999+00:00"}, "until"),
])
def test_a_listing_outside_what_the_database_stores_is_refused_by_name(
        http: httpx.Client, seeded: dict[str, Any], params: dict[str, str],
        field: str) -> None:
    answer = http.get(f"/v1/agents/{seeded['agent']}/memories", headers=seeded["key"],
                      params=params)
    _refused(answer, 422, field)


def test_a_graph_query_from_an_id_too_long_for_its_index_is_refused(
        http: httpx.Client, seeded: dict[str, Any]) -> None:
    answer = http.get(f"/v1/agents/{seeded['agent']}/kg/entities/{LONG}",
                      headers=seeded["key"])
    _refused(answer, 422, "start_id")


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x"])
def test_a_body_that_is_not_said_to_be_json_is_415(
        http: httpx.Client, seeded: dict[str, Any], content_type: str) -> None:
    answer = http.post(f"/v1/agents/{seeded['agent']}/memories", headers={
        **seeded["key"], "Content-Type": content_type},
        content=json.dumps({"content": "Looks like JSON, is not said to be."}))
    _refused(answer, 415, "content-type")
    assert answer.json()["error"]["type"] == "unsupported_media_type"


def test_a_body_of_a_million_brackets_is_refused_before_it_is_parsed(
        http: httpx.Client, seeded: dict[str, Any]) -> None:
    answer = http.post(f"/v1/agents/{seeded['agent']}/memories", headers={
        **seeded["key"], "Content-Type": "application/json"}, content=b"[" * 900_000)
    _refused(answer, 422, "body")


# U+2200 is 00 22 in UTF-16: a '"' byte that hid the brackets after it from a count of
# the raw bytes, and the parser then recursed 100 000 deep (a 500).
HIDDEN_BRACKETS = ('["\u2200", ' + "[" * 100_000 + "]" * 100_000 + ', "x"]').encode("utf-16")
JSON = "application/json"


@pytest.mark.parametrize(("body", "content_type", "field"), [
    (HIDDEN_BRACKETS, JSON, "body"),
    ('{"content": "A note."}'.encode("utf-16"), JSON, "body"),
    ('{"content": "A note."}'.encode("utf-16-le"), JSON, "body"),
    ('{"content": "A note."}'.encode("utf-32"), JSON, "body"),
    ('{"content": "Caf\u00e9 note."}'.encode("latin-1"), JSON, "body"),
    (b'{"content": "\xed\xa0\x80"}', JSON, "body"),
    (b'{"content": "A note."}', "application/json; charset=utf-16", "content-type"),
])
def test_a_body_that_is_not_utf8_is_415_whatever_it_holds(
        http: httpx.Client, seeded: dict[str, Any], body: bytes, content_type: str,
        field: str) -> None:
    for path in ("memories", "recall", "kg/entities"):
        answer = http.post(f"/v1/agents/{seeded['agent']}/{path}", content=body,
                           headers={**seeded["key"], "Content-Type": content_type})
        _refused(answer, 415, field)
        assert answer.json()["error"]["type"] == "unsupported_media_type"


@pytest.mark.parametrize(("path", "body", "field"), [
    ("memories", b'{"content": "A note.", "importance": NaN}', "body"),
    ("memories", b'{"content": "A note.", "metadata": {"a": -Infinity}}', "body"),
    ("memories", b'{"content": "A note.", "importance": 1e999}', "body"),
    ("memories", b'{"content": "A note.", "content": "Another."}', "body"),
    ("recall", b'{"query": "deploy", "limit": ' + b"9" * 5000 + b"}", "body"),
    ("memories", b"\xef\xbb\xbf" + b"[" * 40 + b"]" * 40, "body"),
    ("context", b'["deploy"]', "body"),
    ("recall", b'"deploy"', "body"),
    ("kg/entities", b"null", "entity"),
    ("memories", b'{"content": "A note \\ud800."}', "content"),
    ("memories", b'{"content": "A note.", "\\ud800": 1}', "body"),
    ("recall", b'{"query": "deploy", "\\udfff": 1}', "body"),
    ("memories", b'{"content": "A note.", "category": "\\ud800"}', "category"),
    ("memories", b'{"content": "A note.", "created_at": "\\ud800"}', "created_at"),
    ("memories", b'{"items": [{"content": "A note.", "role": "\\ud800"}]}', "items[0].role"),
    ("recall", b'{"query": "deploy", "metadata": {"\\ud800": [1]}}', "metadata"),
    ("recall", b'{"query": "deploy", "since": "\\ud800"}', "since"),
    ("kg/entities", b'{"id": "bob", "attributes": {"\\ud800": 1}}', "entity.attributes"),
])
def test_a_hostile_body_is_a_4xx_naming_the_field(
        http: httpx.Client, seeded: dict[str, Any], path: str, body: bytes,
        field: str) -> None:
    answer = http.post(f"/v1/agents/{seeded['agent']}/{path}", content=body,
                       headers={**seeded["key"], "Content-Type": JSON})
    _refused(answer, 422, field)
    assert "ud800" not in answer.text and "udfff" not in answer.text


@pytest.mark.parametrize(("method", "path", "field"), [
    ("POST", "/v1/agents/%ED%A0%80/memories", "agent_id"),
    ("GET", "/v1/agents/team%FF/memories", "agent_id"),
    ("DELETE", "/v1/agents/%ED%A0%80", "agent_id"),
    ("GET", "/v1/agents/{agent}/memories/%ED%A0%80", "memory_id"),
    ("GET", "/v1/agents/{agent}/kg/entities/alice%FF", "start_id"),
    ("GET", "/v1/agents/{agent}/memories?since=%ED%A0%80", "since"),
    ("GET", "/v1/agents/{agent}/memories?category=%FF", "category"),
    ("GET", "/v1/agents/{agent}/memories?%FF=1", "query"),
    ("GET", "/v1/jobs/runs?job=%ED%A0%80", "job"),
    ("POST", "/v1/evicted/%ED%A0%80/restore", "eviction_id"),
])
def test_a_path_or_query_that_is_not_utf8_is_refused_naming_the_parameter(
        http: httpx.Client, store: MemoryStore, seeded: dict[str, Any], method: str,
        path: str, field: str) -> None:
    # Before: the server's replacement characters made '\ufffd\ufffd\ufffd' a new agent.
    admin = bearer(make_key(store, prefixes=("",), admin=True))
    answer = http.request(method, path.replace("{agent}", seeded["agent"]), headers=admin,
                          json={"content": "A note."} if method == "POST" else None)
    _refused(answer, 422, field)


@pytest.mark.parametrize("path", ["/v1/jobs/%FF/runs/", "/v1/agents/%ED%A0%80/memories/",
                                  "/mcp/%FF", "/%FF"])
def test_a_path_that_is_not_utf8_and_no_route_takes_is_no_500(
        http: httpx.Client, store: MemoryStore, path: str) -> None:
    admin = bearer(make_key(store, prefixes=("",), admin=True))
    answer = http.get(path, headers=admin)
    assert 300 <= answer.status_code < 500, answer.text


@pytest.mark.parametrize("number", ["%C2%B2", "%D9%A3", "%EF%BC%91", "0",
                                    "99999999999999999999", "9" * 5000])
def test_an_eviction_number_is_ascii_digits_within_range(
        http: httpx.Client, store: MemoryStore, seeded: dict[str, Any], number: str) -> None:
    admin = bearer(make_key(store, prefixes=("",), admin=True))
    answer = http.post(f"/v1/evicted/{number}/restore", headers=admin)
    _refused(answer, 422, "eviction_id")


@pytest.mark.parametrize(("params", "field"), [
    ({"batch_size": -1}, "params.batch_size"),
    ({"batch_size": 10**20}, "params.batch_size"),
    ({"max_age_days": -1}, "max_age_days"),
    ({"max_age_days": 10**9}, "max_age_days"),
    ({"cap": 10**20}, "cap"),
    (_deep(400), "body"),
])
def test_a_refused_job_request_writes_no_audit_row(
        http: httpx.Client, store: MemoryStore, seeded: dict[str, Any],
        params: dict[str, Any], field: str) -> None:
    admin = bearer(make_key(store, prefixes=("",), admin=True))
    answer = http.post("/v1/jobs/evict/runs", headers=admin,
                       json={"dry_run": True, "params": params})
    _refused(answer, 422, field)


def test_a_job_request_that_is_not_json_is_415(
        http: httpx.Client, store: MemoryStore, seeded: dict[str, Any]) -> None:
    admin = bearer(make_key(store, prefixes=("",), admin=True))
    answer = http.post("/v1/jobs/expire/runs", headers={
        **admin, "Content-Type": "text/plain"}, content='{"dry_run": false}')
    _refused(answer, 415, "content-type")


# --- MCP ---------------------------------------------------------------------------------

MCP_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("remember", {"content": "A note.", "session_id": LONG}, "session_id"),
    ("kg_add", {"id": "bob", "relations": [{"target": LONG, "type": "knows"}]},
     "entity.relations[0].target"),
    ("kg_add", {"id": "bob", "attributes": _deep(60)}, "entity.attributes"),
    ("kg_query", {"start_id": LONG}, "start_id"),
    ("recall", {"query": "deploy", "since": "0001-01-01T00:00:00+14:00"}, "since"),
    ("recall", {"query": "deploy", "until": "9999-12-31T23:59:59.999999+00:00"}, "until"),
    ("list_memories", {"offset": 99999999999999999999}, "offset"),
    ("forget", {"memory_id": "\u0660" * 32}, "memory_id"),
]


def test_mcp_tools_refuse_the_same_inputs_by_name_without_database_text(
        gateway: GatewayProcess, seeded: dict[str, Any]) -> None:
    async def session(client: Client) -> list[Any]:
        return [await client.call_tool(name, args) for name, args, _ in MCP_CALLS]

    results = run_http(gateway.url, seeded["key"], session)
    for (name, _args, field), result in zip(MCP_CALLS, results, strict=True):
        said = " ".join(getattr(part, "text", "") for part in result.content)
        assert result.is_error, (name, said)
        assert field in said, (name, said)
        for word in DATABASE_WORDS:
            assert word not in said, (name, said)


@pytest.mark.parametrize("content_type", ["text/plain", None])
def test_mcp_answers_a_body_that_is_not_json_with_a_json_rpc_error(
        gateway: GatewayProcess, seeded: dict[str, Any], content_type: str | None) -> None:
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "list_memories", "arguments": {}}}
    headers = {**seeded["key"], "Accept": "application/json, text/event-stream"}
    if content_type is not None:
        headers["Content-Type"] = content_type
    answer = httpx.post(f"{gateway.url}/mcp", content=json.dumps(call), headers=headers)
    assert answer.status_code == 415, answer.text
    body = answer.json()
    assert body["jsonrpc"] == "2.0" and body["error"]["code"] == -32600
    assert body["error"]["data"]["field"] == "content-type"
