"""Working memory over HTTP: a real gateway process, the session worker, Redis and
PostgreSQL. Updates and reads round trip, compare-and-set answers 409, refused updates
change nothing, a key reaches only its agents' threads, a thread id holding "/" travels as
%2F, and ending a thread puts its messages in long-term memory."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from memoryd.client import MemoryClient
from memoryd.memory.store import MemoryStore
from tests.support.gateway import bearer, make_key

pytestmark = pytest.mark.slow

CANARY = "canary-7f3e-do-not-echo"


def _threads(agent: str) -> str:
    return f"/v1/agents/{agent}/threads"


def _say(*contents: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": content} for content in contents]


def _ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def _refused(response: httpx.Response, status: int, kind: str, field: str | None) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["type"], error.get("field")) == (kind, field)
    assert CANARY not in response.text


@pytest.fixture
def auth(store: MemoryStore, agent_id: str) -> dict[str, str]:
    return bearer(make_key(store, agents=(agent_id,)))


def test_an_update_comes_back_whole_from_get(http: httpx.Client, auth: dict[str, str],
                                             agent_id: str) -> None:
    thread = f"{_threads(agent_id)}/t1"
    updated = _ok(http.patch(thread, headers=auth, json={
        "messages": _say("Hello there"), "variables": {"plan": {"steps": [1, 2]}},
        "set_flags": ["greeted"], "increment": {"turns": 2}, "topic": "weather",
        "entities": ["Ana"], "tools": {"active": [{"name": "search"}]}, "importance": 0.8}))
    assert (updated["agent_id"], updated["thread_id"], updated["version"]) == (
        agent_id, "t1", 1)
    read = _ok(http.get(thread, headers=auth))
    assert [(m["seq"], m["role"], m["content"]) for m in read["messages"]] == [
        (1, "user", "Hello there")]
    assert read["variables"] == {"plan": {"steps": [1, 2]}}
    assert (read["flags"], read["counters"], read["topic"]) == (["greeted"], {"turns": 2},
                                                                "weather")
    assert (read["entities"], read["tools"]["active"], read["importance"]) == (
        ["Ana"], [{"name": "search"}], 0.8)
    assert read["version"] == 1 and read["access_count"] == updated["access_count"] + 1


def test_a_thread_never_written_reads_as_version_0(http: httpx.Client, auth: dict[str, str],
                                                    agent_id: str) -> None:
    assert _ok(http.get(f"{_threads(agent_id)}/nobody", headers=auth))["version"] == 0
    assert _ok(http.get(_threads(agent_id), headers=auth)) == []


def test_a_stale_expected_version_is_409_and_changes_nothing(
        http: httpx.Client, auth: dict[str, str], agent_id: str) -> None:
    thread = f"{_threads(agent_id)}/cas"
    http.patch(thread, headers=auth, json={"topic": "one"})
    assert _ok(http.patch(thread, headers=auth, json={"topic": "two",
                                                      "expected_version": 1}))["version"] == 2
    stale = http.patch(thread, headers=auth, json={"topic": CANARY, "expected_version": 1,
                                                   "variables": {"v": CANARY}})
    _refused(stale, 409, "conflict", None)
    assert "version" in stale.json()["error"]["message"]
    _refused(http.patch(thread, headers={**auth, "If-Match": '"1"'},
                        json={"topic": CANARY}), 409, "conflict", None)
    read = _ok(http.get(thread, headers=auth))
    assert (read["version"], read["topic"], read["variables"]) == (2, "two", {})

    assert _ok(http.patch(thread, headers={**auth, "If-Match": "2"},
                          json={"topic": "three"}))["version"] == 3
    _refused(http.patch(thread, headers={**auth, "If-Match": CANARY}, json={}), 422,
             "validation_error", "If-Match")
    _refused(http.patch(thread, headers={**auth, "If-Match": "3"},
                        json={"expected_version": 2}), 422, "validation_error",
             "expected_version")
    assert _ok(http.get(thread, headers=auth))["version"] == 3


def _nested(depth: int) -> Any:
    value: Any = CANARY
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(("body", "status", "kind", "field"), [
    ({"topic": "x", "bogus": CANARY}, 422, "validation_error", "bogus"),
    ({"messages": [{"role": CANARY, "content": "hi"}]}, 422, "validation_error",
     "messages[0].role"),
    ({"messages": [{"role": "user", "content": CANARY + "x" * 600_000}]}, 413, "too_large",
     "messages[0].content"),
    ({"variables": {"deep": _nested(40)}}, 422, "validation_error", "body"),
    ({"messages": _say("fine"), "increment": {"n": CANARY}}, 422, "validation_error",
     "increment.n"),
    ({"ttl_seconds": 0, "topic": CANARY}, 422, "validation_error", "ttl_seconds"),
    ([CANARY], 422, "validation_error", "body"),
    (None, 422, "validation_error", "body"),
])
def test_a_refused_update_names_its_field_and_changes_nothing(
        http: httpx.Client, auth: dict[str, str], agent_id: str, body: Any, status: int,
        kind: str, field: str) -> None:
    thread = f"{_threads(agent_id)}/guarded"
    before = _ok(http.patch(thread, headers=auth, json={"messages": _say("kept"),
                                                        "variables": {"a": 1}}))
    _refused(http.patch(thread, headers=auth, json=body), status, kind, field)
    after = _ok(http.get(thread, headers=auth))
    assert (after["version"], after["messages"], after["variables"], after["topic"]) == (
        before["version"], before["messages"], before["variables"], before["topic"])


def test_a_key_reaches_only_its_agents_threads(http: httpx.Client, store: MemoryStore) -> None:
    team = f"team-{uuid.uuid4().hex[:8]}"
    alice, bob = f"{team}/alice", f"{team}/bob"
    alices = bearer(make_key(store, agents=(alice,)))
    bobs = bearer(make_key(store, agents=(bob,)))
    reader = bearer(make_key(store, agents=(alice,), read_only=True))
    before = _ok(http.patch(f"{_threads(alice)}/secret", headers=alices,
                            json={"messages": _say(CANARY), "variables": {"k": CANARY}}))
    _ok(http.patch(f"{_threads(bob)}/own", headers=bobs, json={"topic": "bob's"}))

    attempts = [("GET", "", None), ("GET", "/secret", None),
                ("PATCH", "/secret", {"topic": "planted"}), ("POST", "/secret/clear", None),
                ("POST", "/secret/pop", None), ("POST", "/secret/end", None)]
    for key, writes_only in ((bobs, False), (reader, True)):
        for method, tail, body in attempts:
            if writes_only and method == "GET":
                continue
            answer = http.request(method, f"{_threads(alice)}{tail}", headers=key, json=body)
            _refused(answer, 403, "forbidden", None)
    assert [t["thread_id"] for t in _ok(http.get(_threads(bob), headers=bobs))] == ["own"]
    after = _ok(http.get(f"{_threads(alice)}/secret", headers=reader))
    assert (after["version"], after["messages"], after["variables"]) == (
        before["version"], before["messages"], before["variables"])


def test_a_thread_id_holding_a_slash_is_sent_as_2f(
        http: httpx.Client, auth: dict[str, str], client: MemoryClient,
        agent_id: str) -> None:
    for name, sent in (("chat/7", "chat%2F7"), ("a/threads/b", "a%2Fthreads%2Fb"),
                       ("sessions", "sessions"), ("memories", "memories"),
                       ("café au lait", "caf%C3%A9%20au%20lait")):
        made = _ok(http.patch(f"{_threads(agent_id)}/{sent}", headers=auth,
                              json={"topic": name}))
        assert (made["agent_id"], made["thread_id"]) == (agent_id, name)
        assert client.working(agent_id, name).topic == name
        assert _ok(http.get(f"{_threads(agent_id)}/{sent}", headers=auth))["topic"] == name
    listed = {t["thread_id"] for t in _ok(http.get(_threads(agent_id), headers=auth))}
    assert listed == {"chat/7", "a/threads/b", "sessions", "memories", "café au lait"}
    ended = _ok(http.post(f"{_threads(agent_id)}/chat%2F7/end", headers=auth))
    assert (ended["thread_id"], ended["ended"]) == ("chat/7", True)


@pytest.mark.parametrize(("method", "path", "field"), [
    ("GET", "/v1/agents/{agent}/threads/t%FF", "thread_id"),
    ("PATCH", "/v1/agents/{agent}/threads/%ED%A0%80", "thread_id"),
    ("POST", "/v1/agents/{agent}/threads/t%FF%2Fu/end", "thread_id"),
    ("GET", "/v1/agents/team%FF/threads/t", "agent_id"),
    ("GET", "/v1/agents/{agent}/threads/%01", "thread_id"),
])
def test_a_thread_or_agent_id_that_is_not_valid_text_is_refused_by_name(
        http: httpx.Client, store: MemoryStore, agent_id: str, method: str, path: str,
        field: str) -> None:
    admin = bearer(make_key(store, prefixes=("",), admin=True))
    answer = http.request(method, path.replace("{agent}", agent_id), headers=admin,
                          json={"topic": "x"} if method == "PATCH" else None)
    _refused(answer, 422, "validation_error", field)
    assert _ok(http.get(_threads(agent_id), headers=admin)) == []


def test_an_entity_whose_id_reads_as_a_thread_path_stays_the_entitys(
        http: httpx.Client, auth: dict[str, str], agent_id: str) -> None:
    entity = "forum/threads/general"
    made = http.post(f"/v1/agents/{agent_id}/kg/entities", headers=auth,
                     json={"id": entity, "type": "channel"})
    assert made.status_code == 201, made.text
    found = _ok(http.get(f"/v1/agents/{agent_id}/kg/entities/{entity}", headers=auth))
    assert [e["id"] for e in found] == [entity]


def test_an_agent_id_holding_slashes_has_threads_too(http: httpx.Client, store: MemoryStore
                                                     ) -> None:
    agent = f"team-{uuid.uuid4().hex[:8]}/scout"
    auth = bearer(make_key(store, agents=(agent,)))
    made = _ok(http.patch(f"/v1/agents/{agent}/threads/t", headers=auth, json={"topic": "x"}))
    assert (made["agent_id"], made["thread_id"]) == (agent, "t")


def test_ending_a_thread_puts_its_messages_in_its_session(
        http: httpx.Client, auth: dict[str, str], client: MemoryClient,
        agent_id: str) -> None:
    thread = f"{_threads(agent_id)}/conversation-1"
    http.patch(thread, headers=auth, json={"messages": _say("I live in Porto.",
                                                            "My cat is Miso.")})
    http.patch(thread, headers=auth, json={"messages": [
        {"role": "assistant", "content": "Noted: Porto, and Miso."}]})
    ended = _ok(http.post(f"{thread}/end", headers=auth))
    assert ended == {"agent_id": agent_id, "thread_id": "conversation-1", "promoted": 3,
                     "already": 0, "ended": True}
    messages = client.session_messages(agent_id, "conversation-1")
    assert [(m.role, m.content) for m in messages] == [
        ("user", "I live in Porto."), ("user", "My cat is Miso."),
        ("assistant", "Noted: Porto, and Miso.")]
    assert _ok(http.get(thread, headers=auth))["version"] == 0
    assert _ok(http.get(_threads(agent_id), headers=auth)) == []
    again = _ok(http.post(f"{thread}/end", headers=auth))
    assert (again["ended"], again["promoted"]) == (False, 0)


def test_clear_empties_a_thread_and_keeps_it_alive(http: httpx.Client, auth: dict[str, str],
                                                   agent_id: str) -> None:
    thread = f"{_threads(agent_id)}/t"
    http.patch(thread, headers=auth, json={"messages": _say("one", "two"),
                                           "variables": {"a": 1}, "set_flags": ["f"]})
    cleared = _ok(http.post(f"{thread}/clear", headers=auth))
    assert (cleared["messages"], cleared["variables"], cleared["flags"]) == ([], {}, [])
    assert (cleared["version"], cleared["promoted"]) == (2, 2)
    assert [t["thread_id"] for t in _ok(http.get(_threads(agent_id), headers=auth))] == ["t"]


def test_pop_takes_the_newest_message_and_then_null(http: httpx.Client,
                                                    auth: dict[str, str],
                                                    agent_id: str) -> None:
    thread = f"{_threads(agent_id)}/t"
    http.patch(thread, headers=auth, json={"messages": _say("one", "two")})
    assert _ok(http.post(f"{thread}/pop", headers=auth))["content"] == "two"
    assert _ok(http.post(f"{thread}/pop", headers=auth))["content"] == "one"
    assert _ok(http.post(f"{thread}/pop", headers=auth)) is None


def test_threads_are_listed_soonest_to_expire_first_a_page_at_a_time(
        http: httpx.Client, auth: dict[str, str], agent_id: str) -> None:
    for name, ttl in (("later", 900), ("sooner", 300), ("latest", 1200)):
        _ok(http.patch(f"{_threads(agent_id)}/{name}", headers=auth,
                       json={"topic": name, "ttl_seconds": ttl}))
    listed = _ok(http.get(_threads(agent_id), headers=auth))
    assert [t["thread_id"] for t in listed] == ["sooner", "later", "latest"]
    page = _ok(http.get(_threads(agent_id), headers=auth, params={"limit": 1, "offset": 1}))
    assert [t["thread_id"] for t in page] == ["later"]
    _refused(http.get(_threads(agent_id), headers=auth, params={"limit": 0}), 422,
             "validation_error", "limit")


def test_the_threads_routes_are_in_the_schema_and_the_metrics(
        http: httpx.Client, auth: dict[str, str], agent_id: str) -> None:
    document = _ok(http.get("/openapi.json"))
    paths = document["paths"]
    assert {"get", "patch"} <= set(paths["/v1/agents/{agent}/threads/{thread}"])
    assert {"/v1/agents/{agent}/threads", "/v1/agents/{agent}/threads/{thread}/clear",
            "/v1/agents/{agent}/threads/{thread}/end"} <= set(paths)
    body = paths["/v1/agents/{agent}/threads/{thread}"]["patch"]["requestBody"]
    assert body["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/WorkingUpdate"}
    assert {"messages", "expected_version"} <= set(
        document["components"]["schemas"]["WorkingUpdate"]["properties"])

    http.get(f"{_threads(agent_id)}/sessions", headers=auth)
    assert ('memoryd_http_requests_total{method="GET",'
            'route="/v1/agents/{agent}/threads/{thread}",status="200"}') in http.get(
        "/metrics").text
