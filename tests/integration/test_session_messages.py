"""Reading a session's messages back in order (``session_messages``), through the store
and through a real worker, as the framework sessions do."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

from memoryd.client import MemoryClient
from memoryd.errors import ValidationError
from memoryd.memory.store import MemoryStore

AGENT = "agent-sessions"


def _contents(memories: list) -> list[str]:
    return [memory.content for memory in memories]


def test_a_sessions_messages_come_back_in_the_order_they_were_appended(
        store: MemoryStore) -> None:
    store.store_many(AGENT, [{"content": f"Message number {n}.", "session_id": "s1",
                              "role": "user"} for n in range(5)])
    store.store(AGENT, "A message of another session.", session_id="s2")
    store.store(AGENT, "Message number 5.", session_id="s1", role="assistant")
    everything = store.session_messages(AGENT, "s1")
    assert _contents(everything) == [f"Message number {n}." for n in range(6)]
    assert everything[-1].role == "assistant"


def test_a_limit_keeps_the_newest_messages_oldest_first(store: MemoryStore) -> None:
    for n in range(4):
        store.store(AGENT, f"Turn {n} of the chat.", session_id="s1")
    assert _contents(store.session_messages(AGENT, "s1", limit=2)) == [
        "Turn 2 of the chat.", "Turn 3 of the chat."]
    assert _contents(store.session_messages(AGENT, "s1", limit=10)) == [
        f"Turn {n} of the chat." for n in range(4)]


def test_forgotten_and_dangling_messages_are_skipped_before_the_limit_counts(
        store: MemoryStore) -> None:
    ids = [store.store(AGENT, f"Line {n} said.", session_id="s1").id for n in range(3)]
    store.forget(AGENT, ids[2])
    with store.session() as session:  # a reference to nothing, as a broken list may hold
        session.execute(text(
            "UPDATE sessions SET messages = messages || CAST(:ref AS jsonb) "
            "WHERE agent_id = :a"), {"a": AGENT, "ref": json.dumps(
                [{"id": "not-a-uuid"}, {"id": "6f0f5c8e-58a5-4b8a-9c55-6a1f0f2f7c11"}])})
    assert _contents(store.session_messages(AGENT, "s1", limit=2)) == [
        "Line 0 said.", "Line 1 said."]


def test_a_session_of_another_agent_or_none_at_all_reads_as_empty(
        store: MemoryStore) -> None:
    store.store(AGENT, "Only mine.", session_id="s1")
    assert store.session_messages("someone-else", "s1") == []
    assert store.session_messages(AGENT, "no-such-session") == []


@pytest.mark.parametrize(("arguments", "field"), [
    ({"session_id": ""}, "session_id"), ({"session_id": None}, "session_id"),
    ({"session_id": "s1", "limit": 0}, "limit"),
    ({"session_id": "s1", "limit": True}, "limit"),
    ({"session_id": "s1", "limit": 100_001}, "limit")])
def test_a_bad_session_or_limit_is_refused_by_name(store: MemoryStore,
                                                   arguments: dict, field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        store.session_messages(AGENT, **arguments)
    assert refused.value.field == field


@pytest.mark.slow
def test_the_client_reads_a_session_through_a_worker(worker: object, client: MemoryClient,
                                                    agent_id: str) -> None:
    client.store_many(agent_id, [{"content": f"Step {n} done.", "session_id": "run"}
                                 for n in range(3)])
    assert _contents(client.session_messages(agent_id, "run", limit=2)) == [
        "Step 1 done.", "Step 2 done."]
    with pytest.raises(ValidationError) as refused:
        client.session_messages(agent_id, "run", limit=-1)
    assert refused.value.field == "limit"
