"""Memory that stays true, on every surface: ``supersedes`` and ``valid_from`` on store,
``include_superseded`` and ``as_of`` on reads, ``history``, supersession after the fact
and its undo, and the review queue, through the thin client and a real worker, the HTTP
gateway, MCP and the ``memoryd`` command. Who made a change is the caller's key, never a
value of the request; bad input is refused naming the field, with nothing written."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import redis
from mcp import Client
from sqlalchemy import text

from memoryd.client import MemoryClient, Pending
from memoryd.errors import NotFound, ValidationError
from memoryd.memory import supersession
from memoryd.memory.store import MemoryStore
from memoryd.types import StoreResult
from tests.support.cli import as_json, memoryd
from tests.support.gateway import GatewayProcess, bearer
from tests.support.mcp_clients import run_http, structured

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("worker")]

BATCH_DB = 6  # the batching worker's own broker database
MONTH_AGO = datetime.now(UTC) - timedelta(days=30)


def _key(store: MemoryStore, *, agents: tuple[str, ...] = (), admin: bool = False,
         read_only: bool = False) -> tuple[dict[str, str], str]:
    """A new key's Authorization header and the actor its changes are recorded as."""
    from memoryd.auth import keys, scope

    with store.session() as session:
        made = keys.create(session, name="test", agents=agents,
                           prefixes=("",) if admin else (),
                           permissions=scope.permissions(read_only=read_only, admin=admin))
    return bearer(made.key), f"key:{made.scope.id}"


def _error(response: httpx.Response, status: int, kind: str, field: str | None = None
           ) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["type"], error.get("field")) == (kind, field), error
    return str(error["message"])


def _count(store: MemoryStore, table: str, agent: str) -> int:
    with store.session() as session:
        return int(session.execute(text(f"SELECT count(*) FROM {table} WHERE agent_id = :a"),
                                   {"a": agent}).scalar_one())


def _old_and_new(client: MemoryClient, agent: str) -> tuple[StoreResult, StoreResult]:
    old = client.store(agent, "The team's office is in Lyon.", valid_from=MONTH_AGO)
    new = client.store(agent, "The team's office moved to Paris.", supersedes=[old.id])
    assert isinstance(old, StoreResult) and isinstance(new, StoreResult)
    return old, new


# --- the thin client, through a real worker -------------------------------------------------
def test_a_replaced_fact_is_left_out_of_reads_until_asked_for_and_history_tells_it(
        client: MemoryClient, agent_id: str) -> None:
    old, new = _old_and_new(client, agent_id)
    assert new.superseded == (old.id,) and old.superseded == ()

    hits = client.recall(agent_id, "where is the office?")
    assert [h.memory.id for h in hits] == [new.id]
    marked = {h.memory.id: h.memory for h in client.recall(
        agent_id, "where is the office?", include_superseded=True)}
    assert marked[new.id].current and not marked[old.id].current
    assert marked[old.id].superseded_by == new.id and marked[old.id].valid_to is not None
    then = MONTH_AGO + timedelta(days=20)
    assert [h.memory.id for h in client.recall(agent_id, "office", as_of=then)] == [old.id]
    assert "Lyon" in client.context(agent_id, "office", as_of=then.isoformat())
    assert "Lyon" not in client.context(agent_id, "office")

    assert client.list(agent_id).total == 1
    assert client.list(agent_id, include_superseded=True).total == 2
    assert [m.id for m in client.list(agent_id, as_of=then).items] == [old.id]

    history = client.history(agent_id, old.id)
    assert history.memory.id == old.id and not history.memory.current
    assert [v.cause for v in history.versions] == ["superseded"]
    assert history.versions[0].actor is None  # the thin client sends no actor
    assert [(s.old_id, s.new_id, s.cause, s.status) for s in history.supersessions] == [
        (old.id, new.id, "explicit", "applied")]


def test_a_supersession_after_the_fact_is_undone_in_one_call(
        client: MemoryClient, agent_id: str) -> None:
    # (unrelated texts: no judge links them at store time; the caller does, later)
    old = client.store(agent_id, "standups are at nine.")
    later = client.store(agent_id, "the release checklist lives in the wiki.")
    assert isinstance(old, StoreResult) and isinstance(later, StoreResult)
    assert client.supersede(agent_id, later.id, [old.id]) == [old.id]
    assert not client.get(agent_id, old.id).current

    assert client.unsupersede(agent_id, old.id) is True
    assert client.get(agent_id, old.id).current
    assert client.unsupersede(agent_id, old.id) is False  # current already
    assert [v.cause for v in client.history(agent_id, old.id).versions] == [
        "superseded", "restored"]


def test_store_many_and_astore_take_supersedes_and_valid_from(
        client: MemoryClient, agent_id: str) -> None:
    import asyncio

    stored = client.store_many(agent_id, [
        {"content": "The car is a red Fiat.", "valid_from": MONTH_AGO},
        {"content": "The bike is a blue Brompton."}])
    assert isinstance(stored, list)
    first, second = stored
    replaced = client.store_many(agent_id, [
        {"content": "The car is now a green Volvo.", "supersedes": [first.id]}])
    assert isinstance(replaced, list) and replaced[0].superseded == (first.id,)
    assert client.get(agent_id, first.id).valid_from == MONTH_AGO
    bike = asyncio.run(client.astore(agent_id, "The bike is now a yellow Brompton.",
                                     supersedes=[second.id]))
    assert bike.superseded == (second.id,)
    assert client.list(agent_id).total == 2


def test_the_client_refuses_bad_supersedes_and_as_of_naming_the_field(
        client: MemoryClient, agent_id: str, store: MemoryStore) -> None:
    other = client.store(f"other-{uuid.uuid4()}", "Another agent's memory.")
    assert isinstance(other, StoreResult)
    with pytest.raises(NotFound, match=r"^supersedes\[0\]: "):
        client.store(agent_id, "Replaces someone else's.", supersedes=[other.id])
    with pytest.raises(NotFound, match=r"^supersedes\[0\]: "):
        client.store(agent_id, "Replaces nothing.", supersedes=[uuid.uuid4()])
    assert _count(store, "memories", agent_id) == 0  # nothing written
    old, _ = _old_and_new(client, agent_id)
    with pytest.raises(ValidationError) as caught:
        client.store(agent_id, "Replaces a replaced one.", supersedes=[old.id])
    assert caught.value.field == "supersedes[0]"
    for bad in ("yesterday", "0001-01-01T00:00:00+00:00",
                (datetime.now(UTC) + timedelta(days=3)).isoformat()):
        with pytest.raises(ValidationError) as caught:
            client.recall(agent_id, "office", as_of=bad)
        assert caught.value.field == "as_of"
    with pytest.raises(NotFound):
        client.history(agent_id, other.id)  # another agent's memory
    assert _count(store, "memories", agent_id) == 2


def test_the_knowledge_graph_answers_as_of_a_time(
        client: MemoryClient, agent_id: str) -> None:
    client.kg_add(agent_id, {"id": "Alice", "type": "person",
                             "relations": [{"target": "Acme", "type": "works_at"}]})
    now = datetime.now(UTC) + timedelta(seconds=1)
    assert {e.id for e in client.kg_query(agent_id, "Alice", as_of=now)} == {"Alice", "Acme"}
    with pytest.raises(ValidationError) as caught:
        client.kg_query(agent_id, "Alice", as_of="soon")
    assert caught.value.field == "as_of"


def test_a_batching_worker_records_each_stores_actor_and_refuses_only_the_bad_one(
        spawn_worker: Callable[..., Any], store: MemoryStore, redis_url: str) -> None:
    broker = redis_url.rsplit("/", 1)[0] + f"/{BATCH_DB}"
    raw = redis.Redis.from_url(broker)
    raw.flushdb()
    spawn_worker(BATCH_DB, concurrency=1, queues="memory",
                 MEMORYD_STORE_BATCH_SIZE="8").wait_ready()
    agent = f"batch-{uuid.uuid4()}"
    with MemoryClient(broker_url=broker, timeout=120.0) as batching:
        olds = batching.store_many(agent, [{"content": f"Room {i} is painted grey."}
                                           for i in range(12)])
        assert isinstance(olds, list)
        handles = [batching.store(agent, f"Room {i} is now painted yellow.", wait=False,
                                  supersedes=[old.id], actor=f"key:{'ab'[i % 2]}")
                   for i, old in enumerate(olds)]
        bad = batching.store(agent, "Replaces nothing at all.", wait=False,
                             supersedes=[uuid.uuid4()], actor="key:a")
        results = [h.get() for h in handles if isinstance(h, Pending)]
        assert isinstance(bad, Pending)
        with pytest.raises(NotFound):
            bad.get()
    raw.flushdb()
    raw.close()
    assert [r.superseded for r in results] == [(old.id,) for old in olds]
    with store.session() as session:
        actors: dict[uuid.UUID, str] = dict(session.execute(text(
            "SELECT new_id, actor FROM memory_supersessions WHERE agent_id = :a"),
            {"a": agent}).all())
    assert actors == {r.id: f"key:{'ab'[i % 2]}" for i, r in enumerate(results)}
    assert _count(store, "memories", agent) == 24


# --- HTTP -------------------------------------------------------------------------------
def test_http_stores_with_supersedes_and_reads_with_validity_records_the_key(
        http: httpx.Client, store: MemoryStore, agent_id: str) -> None:
    auth, actor = _key(store, agents=(agent_id,))
    base = f"/v1/agents/{agent_id}"
    old = http.post(f"{base}/memories", headers=auth, json={
        "content": "The team's office is in Lyon.", "valid_from": MONTH_AGO.isoformat()})
    assert old.status_code == 201, old.text
    old_id = old.json()["id"]
    new = http.post(f"{base}/memories", headers=auth, json={
        "content": "The team's office moved to Paris.", "supersedes": [old_id]})
    assert new.status_code == 201 and new.json()["superseded"] == [old_id], new.text
    new_id = new.json()["id"]

    recalled = http.post(f"{base}/recall", headers=auth, json={"query": "office"}).json()
    assert [h["memory"]["id"] for h in recalled] == [new_id]
    assert recalled[0]["memory"]["current"] is True
    marked = {h["memory"]["id"]: h["memory"] for h in http.post(
        f"{base}/recall", headers=auth,
        json={"query": "office", "include_superseded": True}).json()}
    assert marked[old_id]["current"] is False and marked[old_id]["superseded_by"] == new_id
    then = (MONTH_AGO + timedelta(days=20)).isoformat()
    as_of = http.post(f"{base}/recall", headers=auth, json={"query": "office", "as_of": then})
    assert [h["memory"]["id"] for h in as_of.json()] == [old_id], as_of.text
    context = http.post(f"{base}/context", headers=auth, json={"query": "office",
                                                               "as_of": then})
    assert "Lyon" in context.json()["context"], context.text
    page = http.get(f"{base}/memories", headers=auth, params={"include_superseded": "true"})
    assert page.json()["total"] == 2
    assert [m["id"] for m in http.get(f"{base}/memories", headers=auth,
                                      params={"as_of": then}).json()["items"]] == [old_id]

    history = http.get(f"{base}/memories/{old_id}/history", headers=auth)
    assert history.status_code == 200, history.text
    assert [(v["cause"], v["actor"]) for v in history.json()["versions"]] == [
        ("superseded", actor)]
    assert history.json()["supersessions"][0]["actor"] == actor


def test_http_supersedes_after_the_fact_and_puts_a_memory_back(
        http: httpx.Client, store: MemoryStore, agent_id: str) -> None:
    auth, actor = _key(store, agents=(agent_id,))
    base = f"/v1/agents/{agent_id}/memories"
    batch = http.post(base, headers=auth, json={"items": [
        {"content": "lunch is at noon."}, {"content": "the printer is on floor two."}]})
    old_id, new_id = (r["id"] for r in batch.json())
    done = http.post(f"{base}/{new_id}/supersedes", headers=auth,
                     json={"supersedes": [old_id]})
    assert done.status_code == 200 and done.json() == {"id": new_id, "superseded": [old_id]}

    back = http.post(f"{base}/{old_id}/current", headers=auth)
    assert back.json() == {"id": old_id, "restored": True}, back.text
    assert http.post(f"{base}/{old_id}/current", headers=auth).json()["restored"] is False
    versions = http.get(f"{base}/{old_id}/history", headers=auth).json()["versions"]
    assert [(v["cause"], v["actor"]) for v in versions] == [("superseded", actor),
                                                            ("restored", actor)]
    # The old one replaced the new one before: it cannot now be replaced by it.
    _error(http.post(f"{base}/{old_id}/supersedes", headers=auth,
                     json={"supersedes": [new_id]}), 422, "validation_error", "supersedes")


def test_http_refuses_bad_supersedes_and_as_of_naming_the_field_and_writes_nothing(
        http: httpx.Client, store: MemoryStore, agent_id: str) -> None:
    auth, _ = _key(store, agents=(agent_id,))
    other = store.store(f"other-{uuid.uuid4()}", "Another agent's memory.")
    base = f"/v1/agents/{agent_id}"
    for supersedes in ([str(other.id)], [str(uuid.uuid4())]):
        message = _error(http.post(f"{base}/memories", headers=auth, json={
            "content": "Replaces what it may not.", "supersedes": supersedes}),
            404, "not_found")
        assert message.startswith("supersedes[0]: ") and supersedes[0] not in message
        _error(http.post(f"{base}/memories", headers=auth, json={"items": [
            {"content": "A fine one."}, {"content": "A bad one.", "supersedes": supersedes}]}),
            404, "not_found")
    _error(http.post(f"{base}/memories", headers=auth, json={
        "content": "x", "supersedes": ["not-an-id"]}), 422, "validation_error",
        "supersedes[0]")
    _error(http.post(f"{base}/memories", headers=auth, json={
        "content": "Who I say I am.", "actor": "key:someone-else"}),
        422, "validation_error", "actor")
    assert _count(store, "memories", agent_id) == 0

    future = (datetime.now(UTC) + timedelta(days=3)).isoformat()
    for as_of in ("last week", "0001-01-01T00:00:00+00:00", future, 7):
        _error(http.post(f"{base}/recall", headers=auth, json={"query": "q", "as_of": as_of}),
               422, "validation_error", "as_of")
    _error(http.post(f"{base}/context", headers=auth, json={"query": "q", "as_of": "x"}),
           422, "validation_error", "as_of")
    _error(http.get(f"{base}/memories", headers=auth, params={"as_of": future}),
           422, "validation_error", "as_of")
    _error(http.get(f"{base}/kg/entities/Alice", headers=auth, params={"as_of": "x"}),
           422, "validation_error", "as_of")
    _error(http.post(f"{base}/memories/{other.id}/supersedes", headers=auth,
                     json={"supersedes": []}), 422, "validation_error", "supersedes")
    _error(http.post(f"{base}/memories/{other.id}/supersedes", headers=auth,
                     json={"supersedes": [str(other.id)], "actor": "x"}),
           422, "validation_error", "actor")


def test_an_agents_key_reaches_no_other_agents_history_supersessions_or_reviews(
        http: httpx.Client, store: MemoryStore, agent_id: str) -> None:
    other = f"other-{uuid.uuid4()}"
    auth, _ = _key(store, agents=(agent_id,))
    theirs = store.store(other, "Their secret plan.")
    mine = store.store(agent_id, "My plan.")
    _error(http.get(f"/v1/agents/{other}/memories/{theirs.id}/history", headers=auth),
           403, "forbidden")
    _error(http.post(f"/v1/agents/{other}/memories/{theirs.id}/supersedes", headers=auth,
                     json={"supersedes": [str(theirs.id)]}), 403, "forbidden")
    _error(http.post(f"/v1/agents/{other}/memories/{theirs.id}/current", headers=auth),
           403, "forbidden")
    # Its own agent in the path, the other's memory id: not found for this agent.
    _error(http.get(f"/v1/agents/{agent_id}/memories/{theirs.id}/history", headers=auth),
           404, "not_found")
    _error(http.post(f"/v1/agents/{agent_id}/memories/{mine.id}/supersedes", headers=auth,
                     json={"supersedes": [str(theirs.id)]}), 404, "not_found")
    _error(http.get("/v1/admin/reviews", headers=auth), 403, "forbidden")
    _error(http.post("/v1/admin/reviews/1/accept", headers=auth), 403, "forbidden")
    assert store.get(other, theirs.id).current


def _queued(store: MemoryStore, agent: str, old: str, new: str) -> int:
    """A replacement the judges were unsure of, queued as the store would queue it (the
    texts are unrelated, so that no judge decides them at store time)."""
    olds = [store.store(agent, old).id]
    news = [store.store(agent, new).id]
    with store.session() as session:
        supersession.queue_review(session, agent, [supersession.Decision(
            olds[0], news[0], "judge", judge="offline", attribute="residence",
            confidence=0.55)])
    return store.reviews(agent)[-1].id


def test_operators_list_accept_and_reject_reviews_over_http(
        http: httpx.Client, store: MemoryStore, agent_id: str) -> None:
    admin, actor = _key(store, admin=True)
    reader, _ = _key(store, admin=True, read_only=True)
    first = _queued(store, agent_id, "the blue folder holds drafts.",
                    "the green folder holds invoices.")
    second = _queued(store, agent_id, "the kettle is in the kitchen.",
                     "the spare keys are in the drawer.")
    listed = http.get("/v1/admin/reviews", headers=reader, params={"agent_id": agent_id})
    assert [r["id"] for r in listed.json()] == [first, second], listed.text
    _error(http.get("/v1/admin/reviews", headers=admin, params={"status": "maybe"}),
           422, "validation_error", "status")
    _error(http.post(f"/v1/admin/reviews/{first}/accept", headers=reader), 403, "forbidden")
    _error(http.post("/v1/admin/reviews/+1/accept", headers=admin), 422, "validation_error",
           "review_id")

    accepted = http.post(f"/v1/admin/reviews/{first}/accept", headers=admin).json()
    assert (accepted["status"], accepted["reviewed_by"]) == ("applied", actor)
    assert not store.get(agent_id, accepted["old_id"]).current
    rejected = http.post(f"/v1/admin/reviews/{second}/reject", headers=admin).json()
    assert rejected["status"] == "rejected"
    assert store.get(agent_id, rejected["old_id"]).current
    _error(http.post(f"/v1/admin/reviews/{second}/accept", headers=admin), 404, "not_found")
    assert http.get("/v1/admin/reviews", headers=admin,
                    params={"agent_id": agent_id}).json() == []
    applied = http.get("/v1/admin/reviews", headers=admin,
                       params={"agent_id": agent_id, "status": "applied"}).json()
    assert [r["id"] for r in applied] == [first]


# --- MCP --------------------------------------------------------------------------------
def test_mcp_remembers_with_supersedes_and_reads_history_and_the_past(
        gateway: GatewayProcess, store: MemoryStore, agent_id: str) -> None:
    auth, actor = _key(store, agents=(agent_id,))
    other = store.store(f"other-{uuid.uuid4()}", "Another agent's memory.")
    then = (MONTH_AGO + timedelta(days=20)).isoformat()

    async def session(client: Client) -> dict[str, Any]:
        old = structured(await client.call_tool("remember", {
            "content": "The user's phone is a Pixel.", "valid_from": MONTH_AGO.isoformat()}))
        new = structured(await client.call_tool("remember", {
            "content": "The user switched to an iPhone.", "supersedes": [old["id"]]}))
        now = structured(await client.call_tool("recall", {"query": "phone"}))
        marked = await client.call_tool("recall", {"query": "phone",
                                                   "include_superseded": True})
        past = structured(await client.call_tool("recall", {"query": "phone", "as_of": then}))
        listed = structured(await client.call_tool("list_memories", {"as_of": then}))
        history = await client.call_tool("history", {"memory_id": old["id"]})
        refusals = [await client.call_tool(name, arguments) for name, arguments in (
            ("remember", {"content": "x", "supersedes": [str(other.id)]}),
            ("recall", {"query": "phone", "as_of": "yesterday"}),
            ("remember", {"content": "y", "actor": "key:someone-else"}),
            ("history", {"memory_id": str(other.id)}))]
        return {"old": old, "new": new, "now": now, "marked": marked, "past": past,
                "listed": listed, "history": history, "refusals": refusals}

    got = run_http(gateway.url, auth, session)
    old_id, new_id = got["old"]["id"], got["new"]["id"]
    assert got["new"]["superseded"] == [old_id]
    assert [h["memory"]["id"] for h in got["now"]["memories"]] == [new_id]
    assert f"replaced by {new_id}" in got["marked"].content[0].text
    assert [h["memory"]["id"] for h in got["past"]["memories"]] == [old_id]
    assert [m["id"] for m in got["listed"]["items"]] == [old_id]
    history = structured(got["history"])
    assert [(v["cause"], v["actor"]) for v in history["versions"]] == [("superseded", actor)]
    assert "The user's phone is a Pixel." in got["history"].content[0].text
    said = [r.content[0].text for r in got["refusals"]]
    assert all(r.is_error for r in got["refusals"])
    assert "not_found: supersedes[0]: " in said[0]
    assert "validation_error: as_of: " in said[1]
    assert "validation_error: actor: " in said[2]
    assert "not_found: " in said[3]
    assert str(other.id) not in said[0]
    assert _count(store, "memories", agent_id) == 2


# --- the memoryd command -------------------------------------------------------------------
def test_the_command_line_stores_reads_and_undoes_replacements_and_decides_reviews(
        service_env: dict[str, str], store: MemoryStore, agent_id: str) -> None:
    old = as_json(memoryd(service_env, "store", agent_id, "The cat is called Miso.",
                          "--valid-from", "30d", "--json"))
    new = memoryd(service_env, "store", agent_id, "The cat was renamed Mochi.",
                  "--supersedes", old["id"])
    assert new.stdout.splitlines()[1] == f"superseded {old['id']}"
    recalled = as_json(memoryd(service_env, "recall", agent_id, "cat name", "--json"))
    assert [h["memory"]["content"] for h in recalled] == ["The cat was renamed Mochi."]
    marked = memoryd(service_env, "recall", agent_id, "cat name", "--include-superseded")
    assert "replaced by" in marked.stdout.splitlines()[0]
    past = as_json(memoryd(service_env, "list", agent_id, "--as-of", "10d", "--json"))
    assert [m["id"] for m in past["items"]] == [old["id"]]
    assert "Miso" in memoryd(service_env, "context", agent_id, "cat", "--as-of", "10d").stdout
    history = as_json(memoryd(service_env, "history", agent_id, old["id"], "--json"))
    assert [v["cause"] for v in history["versions"]] == ["superseded"]
    assert "superseded" in memoryd(service_env, "history", agent_id, old["id"]).stdout

    assert memoryd(service_env, "unsupersede", agent_id, old["id"]).stdout == "current again\n"
    assert memoryd(service_env, "unsupersede", agent_id, old["id"], check=False).returncode == 1
    refused = memoryd(service_env, "supersede", agent_id, old["id"], str(uuid.uuid4()),
                      check=False)
    assert refused.returncode == 2 and "supersedes[0]" in refused.stderr
    bad = memoryd(service_env, "recall", agent_id, "cat", "--as-of", "never", check=False)
    assert bad.returncode == 2 and "as_of" in bad.stderr and "never" not in bad.stderr

    review = _queued(store, agent_id, "the red mug is chipped.", "the lamp needs a bulb.")
    listed = memoryd(service_env, "reviews", "list", "--agent", agent_id)
    assert str(review) in listed.stdout and "residence" in listed.stdout
    decided = as_json(memoryd(service_env, "reviews", "accept", str(review), "--json"))
    assert decided["status"] == "applied" and decided["reviewed_by"].startswith("cli")
    assert memoryd(service_env, "reviews", "reject", str(review), check=False).returncode == 2
    assert as_json(memoryd(service_env, "reviews", "list", "--agent", agent_id,
                           "--json")) == []


def test_a_retried_store_with_supersedes_answers_its_first_result(
        client: MemoryClient, agent_id: str) -> None:
    """A caller that retries a store (a timeout, a redelivered message) gets the memory it
    stored as a duplicate, not a refusal: the replacement it asked for is made."""
    old, new = _old_and_new(client, agent_id)
    again = client.store(agent_id, "The team's office moved to Paris.", supersedes=[old.id])
    assert isinstance(again, StoreResult)
    assert (again.id, again.duplicate) == (new.id, True)
    assert not client.get(agent_id, old.id).current
