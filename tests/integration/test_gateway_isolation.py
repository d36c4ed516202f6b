"""Isolation through the front door, exhaustively: for every HTTP endpoint and every MCP
tool, a key that does not cover agent A (another agent's key, a prefix key for another
team, a read-only key for writes, an admin key for another agent) gets 403 or a tool
error, and agent A's rows are exactly as before. A read-only admin key dry-runs jobs and
reads reports, and changes nothing."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from mcp import Client
from sqlalchemy import text

from memoryd.memory.maintenance import run_to_completion
from memoryd.memory.store import MemoryStore
from tests.support.gateway import GatewayProcess, bearer, make_key
from tests.support.mcp_clients import TOOLS, run_http
from tests.support.snapshots import agent_snapshot

pytestmark = pytest.mark.slow
SECRET = "Agent A's launch code is 0451."

# (method, path, JSON body, writes?) for every agent endpoint; {a}, {m}, {e} are agent A,
# one of A's memories and one of A's entities.
ENDPOINTS: list[tuple[str, str, dict[str, Any] | None, bool]] = [
    ("POST", "/v1/agents/{a}/memories", {"content": "planted by B"}, True),
    ("POST", "/v1/agents/{a}/memories", {"items": [{"content": "planted by B"}]}, True),
    ("GET", "/v1/agents/{a}/memories", None, False),
    ("GET", "/v1/agents/{a}/memories/{m}", None, False),
    ("GET", "/v1/agents/{a}/memories/{m}/history", None, False),
    ("POST", "/v1/agents/{a}/memories/{m}/supersedes", {"supersedes": ["{m}"]}, True),
    ("POST", "/v1/agents/{a}/memories/{m}/current", None, True),
    ("DELETE", "/v1/agents/{a}/memories/{m}", None, True),
    ("POST", "/v1/agents/{a}/recall", {"query": "launch code"}, False),
    ("POST", "/v1/agents/{a}/context", {"query": "launch code"}, False),
    ("POST", "/v1/agents/{a}/kg/entities", {"id": "{e}", "attributes": {"x": 1}}, True),
    ("GET", "/v1/agents/{a}/kg/entities/{e}", None, False),
    ("GET", "/v1/agents/{a}/sessions", None, False),
    ("GET", "/v1/agents/{a}/tasks/{m}", None, True),  # following a store needs write
]


@pytest.fixture
def agent_a(store: MemoryStore) -> dict[str, str]:
    team = f"team-{uuid.uuid4().hex[:8]}"
    agent = f"{team}/alice"
    memory = store.store(agent, SECRET, session_id="s-a")
    store.kg_add(agent, {"id": "vault", "type": "place",
                         "relations": [{"target": "key", "type": "needs"}]})
    return {"a": agent, "m": str(memory.id), "e": "vault", "team": team}


def _keys_not_covering_a(store: MemoryStore, a: dict[str, str]) -> dict[str, str]:
    team = a["team"]
    return {
        "another agent's key": make_key(store, agents=(f"{team}/bob",)),
        "another team's prefix": make_key(store, prefixes=(f"{team}x/", f"{team}/b")),
        "an admin key for another agent": make_key(store, agents=(f"{team}/bob",),
                                                   admin=True),
    }


def _fill(value: Any, a: dict[str, str]) -> Any:
    if isinstance(value, str):
        return value.format(**a)
    if isinstance(value, dict):
        return {k: _fill(v, a) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, a) for v in value]
    return value


def test_no_http_endpoint_lets_a_key_reach_an_agent_it_does_not_cover(
        http: httpx.Client, store: MemoryStore, agent_a: dict[str, str]) -> None:
    before = agent_snapshot(store, agent_a["a"])
    keys = _keys_not_covering_a(store, agent_a)
    keys["a read-only key for A (writes)"] = make_key(store, agents=(agent_a["a"],),
                                                      read_only=True)
    tried = 0
    for kind, key in keys.items():
        for method, path, body, writes in ENDPOINTS:
            if kind.startswith("a read-only") and not writes:
                continue
            answer = http.request(method, _fill(path, agent_a), headers=bearer(key),
                                  json=_fill(body, agent_a))
            assert answer.status_code == 403, (kind, method, path, answer.text)
            assert answer.json()["error"]["type"] == "forbidden"
            assert SECRET not in answer.text
            tried += 1
    assert tried == 3 * len(ENDPOINTS) + sum(1 for *_, w in ENDPOINTS if w)
    assert agent_snapshot(store, agent_a["a"]) == before


def test_no_mcp_tool_reaches_an_agent_through_the_agent_header(
        gateway: GatewayProcess, store: MemoryStore, agent_a: dict[str, str]) -> None:
    before = agent_snapshot(store, agent_a["a"])
    arguments = {"remember": {"content": "planted by B"}, "recall": {"query": "launch"},
                 "forget": {"memory_id": agent_a["m"]}, "context": {"query": "launch"},
                 "list_memories": {}, "kg_add": {"id": "vault"},
                 "kg_query": {"start_id": "vault"}, "history": {"memory_id": agent_a["m"]},
                 "remember_status": {"task_id": "00000000-0000-4000-8000-000000000000"},
                 "working": {"thread_id": "t"},
                 "update_working": {"thread_id": "t", "topic": "planted"},
                 "clear_working": {"thread_id": "t"}, "end_thread": {"thread_id": "t"},
                 "threads": {}}
    assert set(arguments) == TOOLS
    accept = {"Accept": "application/json, text/event-stream"}
    for kind, key in _keys_not_covering_a(store, agent_a).items():
        for tool, args in arguments.items():
            call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": {"name": tool, "arguments": args}}
            answer = httpx.post(f"{gateway.url}/mcp", json=call, headers={
                **accept, **bearer(key), "X-Memoryd-Agent": agent_a["a"]})
            assert answer.status_code == 403, (kind, tool, answer.text)
            assert SECRET not in answer.text
    assert agent_snapshot(store, agent_a["a"]) == before


def test_mcp_tools_bound_to_b_never_touch_as_data_whatever_the_arguments(
        gateway: GatewayProcess, store: MemoryStore, agent_a: dict[str, str]) -> None:
    before = agent_snapshot(store, agent_a["a"])
    key = make_key(store, agents=(f"{agent_a['team']}/bob",))

    async def session(client: Client) -> list[Any]:
        calls: list[tuple[str, dict[str, Any]]] = [
                 ("recall", {"query": "launch code 0451", "mode": "deep"}),
                 ("context", {"query": "launch code"}),
                 ("list_memories", {"limit": 200}),
                 ("forget", {"memory_id": agent_a["m"]}),
                 ("kg_query", {"start_id": "vault"}),
                 ("kg_add", {"id": "vault", "attributes": {"owner": "bob"}}),
                 ("remember", {"content": SECRET}),
                 ("history", {"memory_id": agent_a["m"]}),
                 ("remember", {"content": "A's memory is replaced by B's.",
                               "supersedes": [agent_a["m"]]})]
        return [await client.call_tool(name, args) for name, args in calls]

    results = run_http(gateway.url, bearer(key), session)
    seen = " ".join(str(r.content) + str(r.structured_content)
                    for r in [*results[:5], *results[7:]])
    assert SECRET not in seen and "0451" not in seen
    assert results[3].structured_content == {"id": agent_a["m"], "forgotten": False}
    assert results[7].is_error and results[8].is_error  # A's memory is not B's to see
    assert agent_snapshot(store, agent_a["a"]) == before


def test_a_read_only_admin_key_only_dry_runs_jobs_and_reads_reports(
        http: httpx.Client, store: MemoryStore, agent_a: dict[str, str]) -> None:
    past = datetime.now(UTC) - timedelta(days=1)
    evicted = str(store.store(agent_a["a"], "A's reminder of the day before.",
                              expires_at=past).id)
    run_to_completion(store, "expire", agent_id=agent_a["a"])  # evicted, to restore
    store.store(agent_a["a"], "Yesterday's reminder to A.", expires_at=past)  # to expire
    before = agent_snapshot(store, agent_a["a"])
    real_runs = "SELECT count(*) FROM maintenance_runs WHERE NOT dry_run"
    with store.session() as session:
        runs_before = session.execute(text(real_runs)).scalar()
    read_only_admin = bearer(make_key(store, prefixes=("",), read_only=True, admin=True))

    changes = [("/v1/jobs/expire/runs", {"dry_run": False}),
               ("/v1/jobs/expire/runs", {}),
               ("/v1/jobs/expire/runs", {"agent_id": agent_a["a"], "wait": False}),
               (f"/v1/evicted/{evicted}/restore", None),
               ("/v1/admin/reviews/1/accept", None), ("/v1/admin/reviews/1/reject", None)]
    for path, body in changes:
        answer = http.post(path, headers=read_only_admin, json=body)
        assert answer.status_code == 403, (path, body, answer.text)
        assert "read-only" in answer.json()["error"]["message"]
    for method, path, body, writes in ENDPOINTS:
        if writes:
            answer = http.request(method, _fill(path, agent_a), headers=read_only_admin,
                                  json=_fill(body, agent_a))
            assert answer.status_code == 403, (method, path, answer.text)

    dry = http.post("/v1/jobs/expire/runs", headers=read_only_admin,
                    json={"agent_id": agent_a["a"], "dry_run": True})
    assert dry.status_code == 200 and dry.json()["status"] == "ok", dry.text
    for report in ("/v1/jobs/runs", "/v1/stats", "/v1/embeddings", "/v1/admin/reviews"):
        assert http.get(report, headers=read_only_admin).status_code == 200, report
    assert agent_snapshot(store, agent_a["a"]) == before
    with store.session() as session:
        assert session.execute(text(real_runs)).scalar() == runs_before
        assert session.execute(text("SELECT count(*) FROM evicted_memories "
                                    "WHERE memory_id = :m"), {"m": evicted}).scalar() == 1
