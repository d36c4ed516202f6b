"""Moving an agent's rows to a new agent id (``memoryd.memory.renaming``), and
``memoryd rename-adk-agents`` moving the agents older memoryd's ADK adapter named
``"{app_name}/{user_id}"`` to their names now, where the ADK adapter finds them: on the
real PostgreSQL, a real worker and the ``memoryd`` command."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from google.adk.events.event import Event
from google.genai import types
from sqlalchemy import text

from memoryd.client import MemoryClient
from memoryd.errors import NotFound, ValidationError
from memoryd.integrations import adk
from memoryd.memory import renaming
from memoryd.memory.maintenance.restoring import restore
from memoryd.memory.store import MemoryStore
from tests.support.cli import as_json, memoryd

pytestmark = pytest.mark.slow

# Every table with an agent id column, and the rows the seed gives the agent in each.
SEEDED = {"memories": 3, "evicted_memories": 1, "sessions": 1, "kg_entities": 2,
          "kg_relations": 2, "memory_links": 1, "maintenance_runs": 1, "dead_letters": 1,
          "agent_term_stats": 1, "agent_terms": 2}


def _seed(store: MemoryStore, agent: str) -> int:
    """Rows of ``agent`` in every table that holds agent ids; its eviction number."""
    stored = store.store_many(agent, [
        {"content": "Ana keeps her bicycle in the garage.", "session_id": "s1",
         "role": "user"},
        {"content": "Ana's favourite colour is teal.", "session_id": "s1", "role": "user"},
        {"content": "Ana moved to Porto.", "role": "user"},
        {"content": "Ana once owned a red scooter."}])
    first, second, _, gone = (r.id for r in stored)
    store.kg_add(agent, {"id": "ana", "type": "person",
                         "relations": [{"target": "porto", "type": "lives_in"}]})
    with store.session() as session:
        for statement, params in [
            ("INSERT INTO memory_links (agent_id, source_id, target_id, kind) "
             "VALUES (:a, :s, :t, 'related')", {"s": first, "t": second}),
            ("INSERT INTO evicted_memories (memory_id, agent_id, reason, data, embedding) "
             "SELECT id, agent_id, 'test', to_jsonb(m) - 'embedding' - 'tsv', embedding "
             "FROM memories m WHERE id = :m", {"m": gone}),
            ("DELETE FROM memories WHERE id = :m", {"m": gone}),
            ("INSERT INTO maintenance_runs (job, agent_id, status) VALUES ('decay', :a, 'ok')",
             {}),
            ("INSERT INTO dead_letters (task_id, task_name, queue, agent_id, deliveries, "
             "args, kwargs) VALUES (:t, 'memoryd.store', 'memory', :a, 5, "
             "jsonb_build_array(CAST(:arg AS text), CAST('x' AS text)), '{}')",
             {"t": str(uuid.uuid4()), "arg": agent}),
            ("INSERT INTO api_keys (name, secret_hash, hint, agents, permissions) VALUES "
             "('k', :h, 'mdk_', ARRAY[CAST(:a AS text), 'other'], ARRAY['read'])",
             {"h": uuid.uuid4().hex * 2}),
            ("INSERT INTO agent_term_stats (agent_id, memories) VALUES (:a, 3)", {}),
            ("INSERT INTO agent_terms (agent_id, lexeme, df) VALUES (:a, 'ana', 3), "
             "(:a, 'porto', 1)", {})]:
            session.execute(text(statement), {"a": agent, **params})
        return int(session.execute(text("SELECT eviction_id FROM evicted_memories "
                                        "WHERE agent_id = :a"), {"a": agent}).scalar_one())


def _rows(store: MemoryStore, agent: str) -> dict[str, int]:
    with store.session() as session:
        return {table: int(session.execute(text(
            f"SELECT count(*) FROM {table} WHERE agent_id = :a"), {"a": agent}).scalar_one())
            for table in SEEDED}


def test_a_rename_moves_every_row_of_the_agent_in_one_go(store: MemoryStore) -> None:
    old, new = f"a%b/{uuid.uuid4()}", f"a%25b/{uuid.uuid4()}"
    eviction = _seed(store, old)
    assert _rows(store, old) == SEEDED

    done = renaming.rename_agent(store, old, new)

    assert done.done and done.moved["memories"] == 3 and done.moved["api_keys"] == 1
    assert _rows(store, new) == {**SEEDED, "maintenance_runs": 2}  # and the rename's own
    assert set(_rows(store, old).values()) == {0}
    with store.session() as session:
        moved = session.execute(text("""
            SELECT (SELECT data ->> 'agent_id' FROM evicted_memories) AS evicted,
                   (SELECT args ->> 0 FROM dead_letters) AS letter,
                   (SELECT agents FROM api_keys) AS keys,
                   (SELECT params FROM maintenance_runs WHERE job = 'rename_agent') AS audit
        """)).one()
    assert (moved.evicted, moved.letter, moved.keys) == (new, new, [new, "other"])
    assert moved.audit == {"from": old, "to": new}
    assert [m.content for m in store.session_messages(new, "s1")] == [
        "Ana keeps her bicycle in the garage.", "Ana's favourite colour is teal."]
    assert [e.id for e in store.kg_query(new, "ana")] == ["ana", "porto"]
    assert "Ana moved to Porto." in {r.memory.content for r in store.recall(new, "Porto")}
    restored = restore(store, eviction)
    assert store.get(new, restored).content == "Ana once owned a red scooter."


def test_a_rename_onto_an_agent_holding_data_or_from_an_empty_one_moves_nothing(
        store: MemoryStore) -> None:
    old, new = f"old-{uuid.uuid4()}", f"new-{uuid.uuid4()}"
    _seed(store, old)
    store.store(new, "Something of the new agent's own.")
    before = _rows(store, old), _rows(store, new)
    with pytest.raises(ValidationError) as refused:
        renaming.rename_agent(store, old, new)
    assert refused.value.field == "new_agent" and new not in refused.value.message
    with pytest.raises(ValidationError):
        renaming.preview(store, old, new)
    assert (_rows(store, old), _rows(store, new)) == before
    with pytest.raises(NotFound):
        renaming.rename_agent(store, f"nobody-{uuid.uuid4()}", f"other-{uuid.uuid4()}")
    with pytest.raises(ValidationError) as refused:
        renaming.rename_agent(store, old, old)
    assert refused.value.field == "new_agent"


def _said(text_: str, at: float) -> Event:
    return Event(author="user", invocation_id="inv-1", timestamp=at,
                 content=types.Content(role="user", parts=[types.Part(text=text_)]))


def _as_older_memoryd(client: MemoryClient, app: str, user: str, said: str) -> str:
    """Store an event as older memoryd's adapter did: under ``"{app}/{user}"``, without
    the pair in the metadata; that agent."""
    older = f"{app}/{user}"
    at = datetime(2026, 3, 4, tzinfo=UTC).timestamp()
    row = adk.event_row(_said(said, at), "s1", {})
    assert row is not None
    client.store_many(older, [row])
    return older


def _listed(env: dict[str, str], *args: str) -> tuple[int, dict[str, Any]]:
    done = memoryd(env, "rename-adk-agents", "--json", *args, check=False)
    return done.returncode, {entry["agent_id"]: entry for entry in as_json(done)}


def _found(service: adk.MemorydMemoryService, app: str, user: str) -> list[str]:
    found = asyncio.run(service.search_memory(app_name=app, user_id=user,
                                              query="where is the bicycle?"))
    return [m.content.parts[0].text for m in found.memories if m.content and m.content.parts]


def test_older_adk_names_move_to_their_names_now_and_ambiguous_ones_wait_for_the_operator(
        worker: object, store: MemoryStore, client: MemoryClient,
        service_env: dict[str, str]) -> None:
    app = f"shop-{uuid.uuid4()}"
    plain = _as_older_memoryd(client, app, "bea", "Bea keeps her bicycle in the shed.")
    percent = _as_older_memoryd(client, f"{app}%", "ana",
                                "Ana keeps her bicycle in the garage.")
    shared = _as_older_memoryd(client, app, "x/ana", "Someone keeps a bicycle at work.")
    service = adk.MemorydMemoryService(client)
    assert _found(service, f"{app}%", "ana") == []  # named otherwise now

    code, listed = _listed(service_env)
    assert code == 2 and plain not in listed
    assert (listed[percent]["status"], listed[percent]["target"]) == (
        "move", adk.agent_of(f"{app}%", "ana"))
    assert listed[shared]["status"] == "ambiguous"
    assert [(p["app_name"], p["user_id"]) for p in listed[shared]["pairs"]] == [
        (app, "x/ana"), (f"{app}/x", "ana")]
    assert client.list(percent).items  # nothing moved without --yes

    code, listed = _listed(service_env, "--yes")
    assert code == 0 and listed[percent]["status"] == "moved"
    assert listed[shared]["status"] == "ambiguous"
    assert _found(service, f"{app}%", "ana") == ["Ana keeps her bicycle in the garage."]
    assert client.list(percent).items == []
    assert [m.content for m in client.session_messages(adk.agent_of(f"{app}%", "ana"),
                                                       "s1")] == [
        "Ana keeps her bicycle in the garage."]
    assert _found(service, app, "bea") == ["Bea keeps her bicycle in the shed."]
    assert _found(service, app, "x/ana") == [] and _found(service, f"{app}/x", "ana") == []

    code, listed = _listed(service_env)  # moved once: never escaped again
    assert code == 0 and set(listed) == {shared}
    code, listed = _listed(service_env, "--resolve", shared, f"{app}/x", "ana", "--yes")
    assert code == 0 and listed[shared]["status"] == "moved"
    assert _found(service, f"{app}/x", "ana") == ["Someone keeps a bicycle at work."]
    assert _found(service, app, "x/ana") == []
    assert _listed(service_env) == (0, {})
    with store.session() as session:
        audit = session.execute(text("SELECT params FROM maintenance_runs "
                                     "WHERE job = 'rename_agent' ORDER BY id")).scalars().all()
    assert [json.dumps(a, sort_keys=True) for a in audit] == [
        json.dumps({"from": old, "to": new}, sort_keys=True) for old, new in [
            (percent, adk.agent_of(f"{app}%", "ana")),
            (shared, adk.agent_of(f"{app}/x", "ana"))]]
