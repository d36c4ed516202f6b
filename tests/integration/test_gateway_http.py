"""The HTTP API end to end: a real gateway process, a real worker, PostgreSQL and Redis.
Every endpoint, and the error bodies a caller must be able to act on."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from memoryd.memory.store import MemoryStore
from tests.support.gateway import bearer, make_key

pytestmark = pytest.mark.slow


def _error(response: httpx.Response, status: int, kind: str, field: str | None = None
           ) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == kind
    assert error.get("field") == field
    assert "Traceback" not in response.text
    return dict(error)


def _rows(store: MemoryStore, agent: str) -> list[tuple[str, str]]:
    with store.session() as session:
        return [(str(r.id), r.content) for r in session.execute(text(
            "SELECT id, content FROM memories WHERE agent_id = :a ORDER BY id"), {"a": agent})]


def test_a_memory_is_stored_read_listed_and_forgotten_over_http(
        http: httpx.Client, store: MemoryStore, agent_id: str) -> None:
    auth = bearer(make_key(store, agents=(agent_id,)))
    base = f"/v1/agents/{agent_id}/memories"
    made = http.post(base, headers=auth, json={"content": "The user's cat is called Miso.",
                                               "tags": ["pets"], "session_id": "s1"})
    assert made.status_code == 201, made.text
    assert made.json()["stored"] is True and made.json()["duplicate"] is False
    memory_id = made.json()["id"]
    again = http.post(base, headers=auth, json={"content": "The user's cat is called Miso."})
    assert again.status_code == 200, again.text  # nothing created: the memory it matched
    assert again.json() == {"id": memory_id, "stored": False, "duplicate": True,
                            "superseded": []}

    one = http.get(f"{base}/{memory_id}", headers=auth)
    assert one.status_code == 200
    assert one.json()["content"] == "The user's cat is called Miso."
    assert one.json()["tags"] == ["pets"] and one.json()["agent_id"] == agent_id
    page = http.get(base, headers=auth, params={"limit": 10, "offset": 0}).json()
    assert page["total"] == 1 and [m["id"] for m in page["items"]] == [memory_id]

    assert http.delete(f"{base}/{memory_id}", headers=auth).json() == {
        "id": memory_id, "deleted": True}
    _error(http.delete(f"{base}/{memory_id}", headers=auth), 404, "not_found")
    _error(http.get(f"{base}/{memory_id}", headers=auth), 404, "not_found")
    assert _rows(store, agent_id) == []


def test_a_batch_is_stored_and_recall_and_context_find_it(
        http: httpx.Client, store: MemoryStore, agent_id: str) -> None:
    auth = bearer(make_key(store, agents=(agent_id,)))
    items = [{"content": "We deploy on Fridays only after the load test.",
              "category": "decision"},
             {"content": "The office plants are watered on Mondays."}]
    made = http.post(f"/v1/agents/{agent_id}/memories", headers=auth, json={"items": items})
    assert made.status_code == 201, made.text
    assert [r["stored"] for r in made.json()] == [True, True]

    hits = http.post(f"/v1/agents/{agent_id}/recall", headers=auth, json={
        "query": "when do we deploy?", "limit": 1, "category": "decision"})
    assert hits.status_code == 200, hits.text
    assert [h["memory"]["content"] for h in hits.json()] == [items[0]["content"]]
    assert set(hits.json()[0]["components"]) >= {"semantic", "keyword", "recency"}

    deep = http.post(f"/v1/agents/{agent_id}/recall", headers=auth, json={
        "query": "plants", "mode": "deep", "include_archived": True, "tags": []})
    assert deep.json()[0]["memory"]["content"] == items[1]["content"]

    context = http.post(f"/v1/agents/{agent_id}/context", headers=auth,
                        json={"query": "deploy", "limit": 2})
    assert context.status_code == 200
    assert items[0]["content"] in context.json()["context"]


def test_a_batch_answers_201_when_it_creates_a_memory_and_200_when_all_were_stored(
        http: httpx.Client, store: MemoryStore, agent_id: str) -> None:
    auth = bearer(make_key(store, agents=(agent_id,)))
    path = f"/v1/agents/{agent_id}/memories"
    first = http.post(path, headers=auth, json={"items": [{"content": "Tea at four."}]})
    assert first.status_code == 201, first.text
    (tea,) = first.json()
    mixed = http.post(path, headers=auth, json={"items": [{"content": "Tea at four."},
                                                          {"content": "Cake on Sundays."}]})
    assert mixed.status_code == 201, mixed.text
    assert mixed.json()[0] == {"id": tea["id"], "stored": False, "duplicate": True,
                               "superseded": []}
    assert mixed.json()[1]["stored"] is True
    again = http.post(path, headers=auth, json={"items": [{"content": "Cake on Sundays."},
                                                          {"content": "Tea at four."}]})
    assert again.status_code == 200, again.text
    assert [r["id"] for r in again.json()] == [mixed.json()[1]["id"], tea["id"]]
    assert {r["duplicate"] for r in again.json()} == {True}
    assert len(_rows(store, agent_id)) == 2


def test_the_knowledge_graph_and_sessions_over_http(
        http: httpx.Client, store: MemoryStore, agent_id: str) -> None:
    auth = bearer(make_key(store, agents=(agent_id,)))
    added = http.post(f"/v1/agents/{agent_id}/kg/entities", headers=auth, json={
        "id": "Alice", "type": "person", "attributes": {"role": "CTO"},
        "relations": [{"target": "Acme", "type": "works_at"}]})
    assert added.status_code == 201 and added.json() == {"id": "Alice", "added": True}
    found = http.get(f"/v1/agents/{agent_id}/kg/entities/Alice", headers=auth,
                     params={"depth": 1})
    assert found.status_code == 200
    assert {e["id"] for e in found.json()} == {"Alice", "Acme"}
    _error(http.get(f"/v1/agents/{agent_id}/kg/entities/Bob", headers=auth), 404, "not_found")
    _error(http.get(f"/v1/agents/{agent_id}/kg/entities/Alice", headers=auth,
                    params={"depth": 99}), 422, "validation_error", "depth")

    http.post(f"/v1/agents/{agent_id}/memories", headers=auth,
              json={"content": "hello", "role": "user", "session_id": "chat-1"})
    listed = http.get(f"/v1/agents/{agent_id}/sessions", headers=auth)
    assert [(s["session_id"], s["message_count"]) for s in listed.json()] == [("chat-1", 1)]


def test_no_key_or_a_bad_key_is_401_with_a_json_body(
        http: httpx.Client, store: MemoryStore, agent_id: str) -> None:
    path = f"/v1/agents/{agent_id}/memories"
    missing = http.get(path)
    _error(missing, 401, "unauthorized")
    assert missing.headers["www-authenticate"] == "Bearer"
    _error(http.get(path, headers={"Authorization": "Basic abc"}), 401, "unauthorized")
    _error(http.get(path, headers=bearer("mdk_" + "x" * 43)), 401, "unauthorized")
    _error(http.post(path, headers=bearer("nope"), json={"content": "x"}), 401,
           "unauthorized")
    assert _rows(store, agent_id) == []


def test_a_revoked_key_stops_working_within_five_seconds(
        http: httpx.Client, store: MemoryStore, agent_id: str) -> None:
    import time

    from memoryd.auth import keys, scope

    key = make_key(store, agents=(agent_id,))
    path = f"/v1/agents/{agent_id}/sessions"
    assert http.get(path, headers=bearer(key)).status_code == 200  # now cached
    with store.session() as session:
        key_id = session.execute(text("SELECT id FROM api_keys WHERE secret_hash = :h"),
                                 {"h": scope.secret_hash(key)}).scalar_one()
        assert keys.revoke(session, key_id)
    revoked_at = time.monotonic()
    while http.get(path, headers=bearer(key)).status_code == 200:
        assert time.monotonic() - revoked_at < 6.0, "still accepted after the cache window"
        time.sleep(0.2)
    _error(http.get(path, headers=bearer(key)), 401, "unauthorized")


def test_an_expired_key_is_refused(http: httpx.Client, store: MemoryStore,
                                   agent_id: str) -> None:
    past = make_key(store, agents=(agent_id,),
                    expires_at=datetime.now(UTC) - timedelta(seconds=1))
    _error(http.get(f"/v1/agents/{agent_id}/sessions", headers=bearer(past)), 401,
           "unauthorized")


def test_validation_errors_are_422_naming_the_field(
        http: httpx.Client, store: MemoryStore, agent_id: str) -> None:
    auth = bearer(make_key(store, agents=(agent_id,)))
    base = f"/v1/agents/{agent_id}"
    cases = [
        (http.post(f"{base}/memories", headers=auth, json={"content": ""}), "content"),
        (http.post(f"{base}/memories", headers=auth,
                   json={"content": "x", "category": "gossip"}), "category"),
        (http.post(f"{base}/memories", headers=auth, json={"content": "x", "wait": False}),
         "wait"),
        (http.post(f"{base}/memories", headers=auth, json={"items": [{"content": ""}]}),
         "items[0].content"),
        (http.post(f"{base}/memories", headers=auth, json=["content"]), "body"),
        (http.post(f"{base}/recall", headers=auth, json={"query": "x", "limit": "ten"}),
         "limit"),
        (http.post(f"{base}/recall", headers=auth, json={"query": "x", "limit": 0}), "limit"),
        (http.post(f"{base}/recall", headers=auth, json={"query": "x", "mode": "slow"}),
         "mode"),
        (http.post(f"{base}/recall", headers=auth, json={"query": "x", "agent_id": "other"}),
         "agent_id"),
        (http.post(f"{base}/recall", headers={**auth, "Content-Type": "application/json"},
                   content=b"{not json"), "body"),
        (http.post(f"{base}/context", headers=auth, json={}), "query"),
        (http.get(f"{base}/memories", headers=auth, params={"limit": "many"}), "limit"),
        (http.get(f"{base}/memories/not-a-uuid", headers=auth), "memory_id"),
        (http.post(f"{base}/kg/entities", headers=auth, json={"type": "person"}),
         "entity.id"),
    ]
    for response, field in cases:
        error = _error(response, 422, "validation_error", field)
        assert error["message"]
    assert _rows(store, agent_id) == []
    bad_agent = http.get("/v1/agents/%20/sessions", headers=auth)
    _error(bad_agent, 422, "validation_error", "agent_id")


def test_content_over_the_limit_and_oversized_bodies_are_413(
        http: httpx.Client, store: MemoryStore, agent_id: str) -> None:
    auth = bearer(make_key(store, agents=(agent_id,)))
    path = f"/v1/agents/{agent_id}/memories"
    too_long = "x" * (512 * 1024 + 1)
    _error(http.post(path, headers=auth, json={"content": too_long}), 413, "too_large",
           "content")
    huge = b'{"content": "' + b"y" * (9 * 1024 * 1024) + b'"}'
    _error(http.post(path, headers={**auth, "Content-Type": "application/json"},
                     content=huge), 413, "too_large", "body")

    def chunks() -> Any:  # no Content-Length: the gateway counts as it reads
        yield b'{"content": "'
        for _ in range(9):
            yield b"z" * (1024 * 1024)
        yield b'"}'

    _error(http.post(path, headers={**auth, "Content-Type": "application/json"},
                     content=chunks()), 413, "too_large", "body")
    assert _rows(store, agent_id) == []


def test_unknown_routes_and_methods_answer_in_the_same_error_format(
        http: httpx.Client) -> None:
    _error(http.get("/v1/nothing-here"), 404, "not_found")
    _error(http.put("/healthz"), 405, "method_not_allowed")


def test_health_readiness_openapi_docs_and_metrics(http: httpx.Client, store: MemoryStore,
                                                   agent_id: str) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}
    ready = http.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "broker": "ok", "database": "ok"}

    document = http.get("/openapi.json").json()
    assert "/v1/agents/{agent}/recall" in document["paths"]
    assert "/v1/jobs/{job}/runs" in document["paths"]
    schemas = document["components"]["schemas"]
    assert {"RecallRequest", "StoreItem", "StoreBatch", "Entity", "Recalled",
            "SupersedeRequest", "History", "Supersession"} <= set(schemas)
    assert {"include_superseded", "as_of"} <= set(schemas["RecallRequest"]["properties"])
    assert {"supersedes", "valid_from"} <= set(schemas["StoreItem"]["properties"])
    assert {"/v1/agents/{agent}/memories/{memory_id}/history",
            "/v1/agents/{agent}/memories/{memory_id}/supersedes",
            "/v1/agents/{agent}/memories/{memory_id}/current", "/v1/admin/reviews",
            "/v1/admin/reviews/{review_id}/accept"} <= set(document["paths"])
    recall_body = document["paths"]["/v1/agents/{agent}/recall"]["post"]["requestBody"]
    assert recall_body["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/RecallRequest"}
    assert "swagger" in http.get("/docs").text.lower()

    auth = bearer(make_key(store, agents=(agent_id,)))
    http.get(f"/v1/agents/{agent_id}/sessions", headers=auth)
    metrics = http.get("/metrics")
    assert metrics.status_code == 200
    assert ('memoryd_http_requests_total{method="GET",route="/v1/agents/{agent}/sessions",'
            'status="200"}') in metrics.text
    assert "memoryd_http_request_duration_seconds_bucket" in metrics.text
    assert agent_id not in metrics.text


def _served(http: httpx.Client, method: str, route: str, status: int) -> float:
    """How many requests /metrics counts under these labels (0 before the first)."""
    line = f'memoryd_http_requests_total{{method="{method}",route="{route}",status="{status}"}} '
    found = [row for row in http.get("/metrics").text.splitlines() if row.startswith(line)]
    return float(found[0].removeprefix(line)) if found else 0.0


def test_metrics_name_mcp_the_docs_and_refused_bodies_by_the_route_they_were_sent_to(
        http: httpx.Client, store: MemoryStore, agent_id: str) -> None:
    auth = bearer(make_key(store, agents=(agent_id,)))
    huge = b'{"query": "' + b"q" * (9 * 1024 * 1024) + b'"}'
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "metrics-test", "version": "1"}}}
    mcp_headers = {**auth, "Accept": "application/json, text/event-stream"}
    requests = [
        (("GET", "/docs", 200), lambda: http.get("/docs")),
        (("GET", "/openapi.json", 200), lambda: http.get("/openapi.json")),
        (("POST", "/mcp", 401), lambda: http.post("/mcp", json=initialize)),
        (("POST", "/mcp", 200), lambda: http.post("/mcp", headers=mcp_headers,
                                                 json=initialize)),
        (("POST", "/v1/agents/{agent}/recall", 413), lambda: http.post(
            f"/v1/agents/{agent_id}/recall",
            headers={**auth, "Content-Type": "application/json"}, content=huge)),
        (("GET", "unmatched", 404), lambda: http.get("/v1/nothing-here")),
    ]
    for (method, route, status), send in requests:
        before = _served(http, method, route, status)
        assert send().status_code == status
        assert _served(http, method, route, status) == before + 1, (method, route, status)
    assert agent_id not in http.get("/metrics").text


def test_admin_endpoints_run_jobs_report_and_restore(
        http: httpx.Client, store: MemoryStore, agent_id: str) -> None:
    admin = bearer(make_key(store, prefixes=("",), admin=True))
    past = datetime.now(UTC) - timedelta(days=1)
    store.store(agent_id, "A memory that is here to stay.")
    expired = str(store.store(agent_id, "Yesterday's reminder.", expires_at=past).id)

    queued = http.post("/v1/jobs/expire/runs", headers=admin,
                       json={"agent_id": agent_id, "dry_run": True, "wait": False})
    assert queued.status_code == 202, queued.text
    assert queued.json()["job"] == "expire" and queued.json()["task_id"]
    # The queued dry run holds the job's lock while it runs: a run started meanwhile
    # would be skipped, so wait for it to be recorded.
    deadline = time.monotonic() + 60
    while not any(r["dry_run"] and r["status"] == "ok" for r in http.get(
            "/v1/jobs/runs", headers=admin, params={"job": "expire"}).json()):
        assert time.monotonic() < deadline, "the queued dry run never finished"
        time.sleep(0.1)
    ran = http.post("/v1/jobs/expire/runs", headers=admin,
                    json={"agent_id": agent_id, "wait": True})
    assert ran.status_code == 200, ran.text
    assert ran.json()["status"] == "ok" and ran.json()["stats"]["expired"] == 1
    assert expired not in {i for i, _ in _rows(store, agent_id)}

    runs = http.get("/v1/jobs/runs", headers=admin, params={"job": "expire"}).json()
    assert runs[0]["id"] == ran.json()["run_id"] and runs[0]["agent_id"] == agent_id
    stats = http.get("/v1/stats", headers=admin).json()
    assert {"agent_id": agent_id, "total": 1, "categories": {"fact": 1}} in stats
    before = http.get("/v1/embeddings", headers=admin).json()
    assert before["model"] == store.model and before["done_percent"] == 100.0
    with store.session() as session:  # the agent's memory of another model, as mid-move
        session.execute(text("UPDATE memories SET embedding_model = 'older' "
                             "WHERE agent_id = :a"), {"a": agent_id})
    after = http.get("/v1/embeddings", headers=admin).json()
    total = sum(before["memories_by_model"].values())
    assert after["memories_by_model"] == {
        "older": 1, **({store.model: total - 1} if total > 1 else {})}
    assert after["done_percent"] == round(100.0 * (total - 1) / total, 1)

    restored = http.post(f"/v1/evicted/{expired}/restore", headers=admin)
    assert restored.json() == {"id": expired, "restored": True}
    assert expired in {i for i, _ in _rows(store, agent_id)}
    _error(http.post(f"/v1/evicted/{uuid.uuid4()}/restore", headers=admin), 404, "not_found")
    _error(http.post("/v1/jobs/nonsense/runs", headers=admin, json={}), 422,
           "validation_error", "job")


def test_admin_endpoints_refuse_keys_without_admin_for_every_agent(
        http: httpx.Client, store: MemoryStore, agent_id: str) -> None:
    plain = bearer(make_key(store, prefixes=("",)))
    partial_admin = bearer(make_key(store, prefixes=("team-a/",), admin=True))
    for auth in (plain, partial_admin):
        _error(http.get("/v1/stats", headers=auth), 403, "forbidden")
        _error(http.get("/v1/embeddings", headers=auth), 403, "forbidden")
        _error(http.get("/v1/jobs/runs", headers=auth), 403, "forbidden")
        _error(http.post("/v1/jobs/expire/runs", headers=auth, json={}), 403, "forbidden")
        _error(http.post(f"/v1/evicted/{uuid.uuid4()}/restore", headers=auth), 403,
               "forbidden")
    with store.session() as session:
        assert session.execute(text("SELECT count(*) FROM maintenance_runs")).scalar() == 0


def test_a_read_only_key_reads_but_cannot_write(
        http: httpx.Client, store: MemoryStore, agent_id: str) -> None:
    store.store(agent_id, "Kept safe.")
    reader = bearer(make_key(store, agents=(agent_id,), read_only=True))
    assert http.get(f"/v1/agents/{agent_id}/memories", headers=reader).json()["total"] == 1
    memory_id = _rows(store, agent_id)[0][0]
    _error(http.post(f"/v1/agents/{agent_id}/memories", headers=reader,
                     json={"content": "sneaky"}), 403, "forbidden")
    _error(http.delete(f"/v1/agents/{agent_id}/memories/{memory_id}", headers=reader), 403,
           "forbidden")
    assert _rows(store, agent_id) == [(memory_id, "Kept safe.")]


def test_key_secrets_never_reach_the_gateway_log(
        http: httpx.Client, store: MemoryStore, agent_id: str, gateway: Any) -> None:
    key = make_key(store, agents=(agent_id,))
    http.get(f"/v1/agents/{agent_id}/sessions", headers=bearer(key))
    http.get(f"/v1/agents/{agent_id}/sessions", headers=bearer(key + "x"))
    log = gateway.log_text()
    assert "GET /v1/agents/" in log  # the access log is on (it hides the agent)
    assert key not in log and key[4:] not in log


def test_agent_ids_with_slashes_work_under_a_prefix_key(
        http: httpx.Client, store: MemoryStore) -> None:
    team = f"team-{uuid.uuid4().hex[:8]}/"
    auth = bearer(make_key(store, prefixes=(team,)))
    scout = f"{team}scouts/ana"
    made = http.post(f"/v1/agents/{scout}/memories", headers=auth,
                     json={"content": "The north pass is closed in winter."})
    assert made.status_code == 201, made.text
    http.post(f"/v1/agents/{scout}/kg/entities", headers=auth,
              json={"id": "pass/north", "type": "place"})
    assert http.get(f"/v1/agents/{scout}/kg/entities/pass/north",
                    headers=auth).json()[0]["id"] == "pass/north"
    got = http.get(f"/v1/agents/{scout}/memories/{made.json()['id']}", headers=auth)
    assert got.json()["agent_id"] == scout
    assert [c for _, c in _rows(store, scout)] == ["The north pass is closed in winter."]
    _error(http.get(f"/v1/agents/{team[:-1]}x/sessions", headers=auth), 403, "forbidden")


@pytest.fixture
def spawn_gateway(service_env: dict[str, str], tmp_path: Any) -> Any:
    """Start extra gateways with changed settings; all are stopped afterwards."""
    from tests.support.gateway import GatewayProcess

    started: list[GatewayProcess] = []

    def spawn(**env: str) -> GatewayProcess:
        process = GatewayProcess({**service_env, **env}, tmp_path / f"gw-{len(started)}.log",
                                 None, "--no-migrate")
        started.append(process)
        process.wait_ready()
        return process

    yield spawn
    for process in started:
        process.stop()


def test_an_unreachable_broker_or_database_is_503_and_not_ready(
        spawn_gateway: Any, store: MemoryStore, agent_id: str, redis_url: str) -> None:
    from memoryd.embedded._proc import free_port

    key = bearer(make_key(store, agents=(agent_id,)))
    no_broker = spawn_gateway(MEMORYD_BROKER_URL=f"redis://127.0.0.1:{free_port()}/0")
    recall = httpx.post(f"{no_broker.url}/v1/agents/{agent_id}/recall", headers=key,
                        json={"query": "anything"}, timeout=120)
    _error(recall, 503, "unavailable")
    ready = httpx.get(f"{no_broker.url}/readyz", timeout=30)
    assert ready.status_code == 503
    assert ready.json()["broker"].startswith("unreachable") and ready.json()["database"] == "ok"

    no_database = spawn_gateway(
        MEMORYD_DATABASE_URL=f"postgresql://memoryd@127.0.0.1:{free_port()}/memoryd")
    listed = httpx.get(f"{no_database.url}/v1/agents/{agent_id}/memories", headers=key,
                       timeout=120)
    _error(listed, 503, "unavailable")
    ready = httpx.get(f"{no_database.url}/readyz", timeout=30)
    assert ready.status_code == 503 and ready.json()["database"].startswith("unreachable")
    assert "Traceback" not in ready.text


def test_a_worker_that_does_not_answer_in_time_is_504(
        spawn_gateway: Any, store: MemoryStore, agent_id: str, redis_url: str) -> None:
    from tests.support.workers import redis_db_url

    key = bearer(make_key(store, agents=(agent_id,)))
    # A broker database no worker consumes: the job waits, the gateway gives up.
    idle = spawn_gateway(MEMORYD_BROKER_URL=redis_db_url(redis_url, 13),
                         MEMORYD_GATEWAY_TIMEOUT_S="1")
    assert httpx.get(f"{idle.url}/readyz", timeout=30).status_code == 200
    _error(httpx.post(f"{idle.url}/v1/agents/{agent_id}/recall", headers=key,
                      json={"query": "anything"}, timeout=60), 504, "timeout")
