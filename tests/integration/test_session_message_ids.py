"""A session's ``message_ids`` (migration 0014): a trigger sets them from the message
list on every write of it, so recall's session positions never go stale; an export
leaves them out, and whatever an import file says of them is replaced."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import text

from memoryd.memory import portability
from memoryd.memory.store import MemoryStore

AGENT = "agent-message-ids"


def _ids(store: MemoryStore, session_id: str = "chat-1") -> Any:
    with store.session() as session:
        return session.execute(text(
            "SELECT message_ids FROM sessions WHERE agent_id = :a AND session_id = :s"),
            {"a": AGENT, "s": session_id}).scalar_one()


def _set_messages(store: MemoryStore, messages: str) -> None:
    with store.session() as session:
        session.execute(text("UPDATE sessions SET messages = CAST(:m AS jsonb) "
                             "WHERE agent_id = :a"), {"m": messages, "a": AGENT})


def test_the_ids_follow_every_write_of_the_message_list(store: MemoryStore) -> None:
    ids = [str(store.store(AGENT, f"Turn {n} of the chat.", session_id="chat-1").id)
           for n in range(3)]
    assert _ids(store) == ids
    store.forget(AGENT, ids[1])
    assert _ids(store) == [ids[0], ids[2]]
    more = str(store.store(AGENT, "Turn 3 of the chat.", session_id="chat-1").id)
    assert _ids(store) == [ids[0], ids[2], more]


def test_entries_without_an_id_keep_their_place_and_a_list_that_is_no_list_has_none(
        store: MemoryStore) -> None:
    store.store(AGENT, "The only turn.", session_id="chat-1")
    _set_messages(store, json.dumps([{"id": "a"}, 5, {"role": "user"}, ["x"], {"id": "b"}]))
    assert _ids(store) == ["a", None, None, None, "b"]
    _set_messages(store, json.dumps({"id": "a"}))
    assert _ids(store) == []


def test_an_export_leaves_the_ids_out_and_an_import_sets_them_from_its_messages(
        store: MemoryStore) -> None:
    first = store.store(AGENT, "Caroline: what did you adopt?", session_id="chat-1").id
    store.store(AGENT, "Melanie: a greyhound named Max.", session_id="chat-1")
    lines = list(portability.export_agent(store, AGENT))
    records = [json.loads(line) for line in lines]
    sessions = [r for r in records if r["type"] == "session"]
    assert len(sessions) == 1 and "message_ids" not in sessions[0]["data"]
    sessions[0]["data"]["message_ids"] = ["forged"]  # a file's word is not taken
    lines = [json.dumps(r) for r in records]
    imported = portability.import_agent(store, "agent-copy", lines)
    assert imported.sessions == 1
    with store.session() as session:
        copied = session.execute(text(
            "SELECT message_ids, messages FROM sessions WHERE agent_id = 'agent-copy'")).one()
    assert copied.message_ids == [m["id"] for m in copied.messages]
    assert len(copied.message_ids) == 2 and str(first) not in copied.message_ids
