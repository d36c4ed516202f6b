"""A database error that quotes memory content, as a failed INSERT raises it (the
server's DETAIL repeats the row and SQLAlchemy keeps the statement's parameters), and
the requests, tool calls and commands that carry a canary string in values memoryd
refuses."""

from __future__ import annotations

from typing import Any

import psycopg
from sqlalchemy.exc import IntegrityError


def database_error(canary: str) -> IntegrityError:
    driver = psycopg.errors.CheckViolation(
        'new row for relation "memories" violates check constraint "no_canary"\n'
        f"DETAIL:  Failing row contains (1, agent-1, {canary}).")
    return IntegrityError("INSERT INTO memories (content) VALUES (%(content)s)",
                          {"content": canary}, driver)


# (key, method, path, query parameters, JSON body): every route of the gateway with
# values it refuses, each holding the canary, in bodies, query strings and every path
# position (and paths no route serves).
Request = tuple[str, str, str, dict[str, str] | None, Any]


def _nested(value: object, depth: int) -> object:
    for _ in range(depth):
        value = [value]
    return value


def bad_http_requests(agent: str, canary: str) -> list[Request]:
    at = f"/v1/agents/{agent}"
    store = [{"content": "x", "category": canary}, {"content": "x", "role": canary},
             {"content": "x", "importance": canary}, {"content": "x", "created_at": canary},
             {"content": "x", "expires_at": canary}, {"content": "x", "tags": [[canary]]},
             {"content": "x", "metadata": canary}, {"content": [canary]},
             {"items": [{"content": "x", "category": canary}]}, {"items": canary},
             {"content": "x", "supersedes": [canary]}, {"content": "x", "valid_from": canary},
             {"content": "x", "actor": canary}]
    recall = [{"query": "x", "category": canary}, {"query": "x", "mode": canary},
              {"query": "x", "since": canary}, {"query": "x", "until": canary},
              {"query": "x", "limit": canary}, {"query": "x", "tags": [[canary]]},
              {"query": "x", "metadata": {"k": [canary]}}, {"query": [canary]},
              {"query": "x", "include_archived": canary}, {"query": "x", "session_id": [canary]},
              {"query": "x", "as_of": canary}, {"query": "x", "include_superseded": canary}]
    graph = [{"id": [canary]}, {"id": "x", "attributes": canary},
             {"id": "x", "relations": [{"target": canary}]}, {"id": "x", "type": [canary]}]
    jobs = [{"dry_run": canary}, {"dry_run": True, "params": {"batch_size": canary}},
            {"dry_run": True, "agent_id": [canary]}, {"dry_run": True, "params": canary},
            {"dry_run": True, "wait": canary}]
    return [
        *[("agent", "POST", f"{at}/memories", None, body) for body in store],
        *[("agent", "GET", f"{at}/memories", {name: canary}, None)
          for name in ("category", "since", "until", "limit", "offset")],
        ("agent", "GET", f"{at}/memories/{canary}", None, None),
        ("agent", "DELETE", f"{at}/memories/{canary}", None, None),
        ("agent", "GET", f"{at}/memories/{canary}/history", None, None),
        ("agent", "POST", f"{at}/memories/{canary}/current", None, None),
        ("agent", "POST", f"{at}/memories/{canary}/supersedes", None, {"supersedes": ["x"]}),
        *[("agent", "GET", f"{at}/memories", {name: canary}, None)
          for name in ("as_of", "include_superseded")],
        *[("agent", "POST", f"{at}/recall", None, body) for body in recall],
        ("agent", "POST", f"{at}/context", None, {"query": [canary]}),
        ("agent", "POST", f"{at}/context", None, {"query": "x", "limit": canary}),
        ("agent", "POST", f"{at}/context", None, {"query": "x", "as_of": canary}),
        ("agent", "POST", f"{at}/context", None, {"query": "x", "budget": canary}),
        ("agent", "POST", f"{at}/context", None, {"query": "x", "budget_unit": canary}),
        *[("agent", "PATCH", f"{at}/threads/t", None, body) for body in (
            {"messages": [{"role": canary, "content": "x"}]}, {"topic": [canary]},
            {"variables": {"v": _nested(canary, 40)}}, {"increment": {"c": canary}},
            {"expected_version": canary}, {"tools": {"active": canary}},
            {"delete_variables": canary})],
        ("agent", "GET", f"{at}/threads", {"limit": canary}, None),
        *[("agent", "POST", f"{at}/kg/entities", None, body) for body in graph],
        ("agent", "GET", f"{at}/kg/entities/{canary}", None, None),
        ("agent", "GET", f"{at}/kg/entities/x", {"depth": canary}, None),
        ("agent", "GET", f"{at}/tasks/{canary}", None, None),
        ("agent", "GET", f"/v1/{canary}", None, None), ("agent", "GET", f"/{canary}", None, None),
        ("agent", "PUT", f"{at}/recall/{canary}", None, None),
        *[("admin", "POST", "/v1/jobs/evict/runs", None, body) for body in jobs],
        ("admin", "POST", f"/v1/jobs/{canary}/runs", None, {"dry_run": True}),
        ("admin", "GET", "/v1/jobs/runs", {"job": canary}, None),
        ("admin", "GET", "/v1/jobs/runs", {"limit": canary}, None),
        ("admin", "POST", f"/v1/evicted/{canary}/restore", None, None),
        ("admin", "GET", "/v1/stats", {"limit": canary}, None),
        ("admin", "GET", "/v1/admin/reviews", {"status": canary}, None),
        ("admin", "POST", f"/v1/admin/reviews/{canary}/accept", None, None),
        ("agent", "GET", "/v1/admin/reviews", None, None),  # not an admin key: 403
        ("admin", "DELETE", f"/v1/agents/{agent}", {"wait": canary}, None),
        ("agent", "GET", "/v1/embeddings", None, None),  # not an admin key: 403
    ]


def bad_mcp_calls(canary: str) -> list[tuple[str, dict[str, Any]]]:
    """Every MCP tool, with an argument of the wrong type and one of a wrong value, each
    holding the canary (and a tool that does not exist, named by it)."""
    return [
        ("remember", {"content": [canary]}), ("remember", {"content": "x", "category": canary}),
        ("remember", {"content": "x", "tags": [[canary]]}),
        ("recall", {"query": "x", "limit": canary}), ("recall", {"query": "x", "mode": canary}),
        ("recall", {"query": "x", "since": canary}),
        ("recall", {"query": "x", "metadata": {"k": [canary]}}),
        ("recall", {"query": "x", "as_of": canary}),
        ("remember", {"content": "x", "supersedes": [canary]}),
        ("history", {"memory_id": canary}), ("history", {"memory_id": [canary]}),
        ("forget", {"memory_id": [canary]}), ("forget", {"memory_id": canary}),
        ("context", {"query": [canary]}), ("context", {"query": "x", "limit": canary}),
        ("list_memories", {"category": canary}), ("list_memories", {"offset": canary}),
        ("kg_add", {"id": [canary]}), ("kg_add", {"id": "x", "attributes": canary}),
        ("kg_add", {"id": "x", "relations": [{"target": canary}]}),
        ("kg_query", {"start_id": [canary]}), ("kg_query", {"start_id": canary}),
        ("kg_query", {"start_id": "x", "depth": canary}),
        ("remember_status", {"task_id": canary}), ("remember_status", {"task_id": [canary]}),
        ("working", {"thread_id": [canary]}), ("end_thread", {"thread_id": [canary]}),
        ("clear_working", {"thread_id": [canary]}), ("threads", {"limit": canary}),
        ("update_working", {"thread_id": "t", "messages": [{"role": canary, "content": "x"}]}),
        ("update_working", {"thread_id": "t", "increment": {"c": canary}}),
        ("context", {"query": "x", "budget": canary}),
        (canary, {"query": canary}),
    ]


def bad_jsonrpc_messages(canary: str) -> list[Any]:
    """Bodies posted to the MCP endpoint that are JSON but no JSON-RPC message, each
    holding the canary where the SDK's refusal would quote it."""
    return [canary, [canary], {"jsonrpc": canary, "id": 1, "method": "tools/list"},
            {"jsonrpc": "2.0", "id": 1, "method": [canary]},
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": canary},
            {"jsonrpc": "2.0", "method": {"name": canary}}]


def bad_cli_commands(agent: str, canary: str) -> list[list[str]]:
    """The client commands with options holding the canary that they refuse."""
    return [
        ["store", agent, "x", "--category", canary], ["store", agent, "x", "--role", canary],
        ["store", agent, "x", "--importance", canary], ["store", agent, "x", "--metadata", canary],
        ["recall", agent, "x", "--mode", canary], ["recall", agent, "x", "--limit", canary],
        ["recall", agent, "x", "--since", canary], ["recall", agent, "x", "--where", canary],
        ["list", agent, "--category", canary], ["list", agent, "--offset", canary],
        ["forget", agent, canary], ["context", agent, "x", "--limit", canary],
        ["recall", agent, "x", "--as-of", canary], ["history", agent, canary],
    ]
