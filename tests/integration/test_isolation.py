"""Agent isolation: whatever agent B calls, it never sees, changes or deletes
agent A's memories, sessions or graph."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from memoryd.errors import NotFound
from memoryd.memory.store import MemoryStore
from tests.support.snapshots import agent_snapshot

SHARED_SESSION = "shared-session"
SHARED_KEY = "shared-key"
SHARED_ENTITY = "shared-entity"

# Any text a user could send: every Unicode category but surrogates, and no NUL.
texts = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1, max_size=60,
).filter(lambda s: s.strip() != "")
text_lists = st.lists(texts, min_size=1, max_size=4)


def _normalized(content: str) -> str:
    return " ".join(content.split())


@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a_texts=text_lists, b_texts=text_lists)
def test_agent_b_never_sees_changes_or_deletes_agent_a(store: MemoryStore, a_texts: list[str],
                                                       b_texts: list[str]) -> None:
    example = uuid.uuid4().hex
    a, b = f"agent-a-{example}", f"agent-b-{example}"

    # --- agent A's data: memories in a session, a keyed memory, a link, a graph ------------
    a_results = store.store_many(a, [{"content": t, "session_id": SHARED_SESSION, "role": "user"}
                                     for t in a_texts])
    a_ids = {r.id for r in a_results}
    a_keyed = store.store(a, f"Agent A's secret keyed memory {example}", key=SHARED_KEY).id
    a_ids.add(a_keyed)
    first_a = a_results[0].id
    if first_a != a_keyed:
        with store.session() as session:
            session.execute(text("""INSERT INTO memory_links (agent_id, source_id, target_id, kind)
                                    VALUES (:a, :s, :t, 'related')"""),
                            {"a": a, "s": first_a, "t": a_keyed})
    assert store.kg_add(a, {"id": SHARED_ENTITY, "type": "person",
                            "attributes": {"owner": "a"},
                            "relations": [{"target": "a-only-friend", "type": "knows"}]})
    before = agent_snapshot(store, a)
    a_count = len(before["memories"])
    assert a_count == len(a_ids)

    # --- B looks up A's things by id, key and entity: nothing is there --------------------------
    for memory_id in a_ids:
        with pytest.raises(NotFound):
            store.get(b, memory_id)
    for memory_id in {first_a, a_keyed}:
        with pytest.raises(NotFound):
            store.related(b, memory_id)
    with pytest.raises(NotFound):
        store.get_by_key(b, SHARED_KEY)
    with pytest.raises(NotFound):
        store.kg_query(b, SHARED_ENTITY)
    assert store.list(b).total == 0
    assert store.sessions(b) == []
    assert store.recall(b, a_texts[0]) == []

    # --- B stores its own data, including A's exact text, key, session and entity ---------------
    b_items = [*b_texts, a_texts[0]]
    b_results = store.store_many(b, [{"content": t, "session_id": SHARED_SESSION}
                                     for t in b_items])
    assert b_results[-1].id not in a_ids
    b_ids = {r.id for r in b_results}
    assert not b_ids & a_ids
    first_of_each: dict[str, uuid.UUID] = {}
    for item, result in zip(b_items, b_results, strict=True):
        norm = _normalized(item)
        if norm in first_of_each:  # a duplicate within B's own batch
            assert result.duplicate and result.id == first_of_each[norm]
        else:  # new for B, even when A holds the same text
            assert result.stored and not result.duplicate
            first_of_each[norm] = result.id
    b_keyed = store.store(b, f"Agent B's own keyed memory {example}", key=SHARED_KEY)
    assert b_keyed.stored and b_keyed.id not in a_ids
    b_ids.add(b_keyed.id)
    assert store.kg_add(b, {"id": SHARED_ENTITY, "attributes": {"owner": "b"},
                            "relations": [{"target": "b-only-friend", "type": "knows"}]}) is True
    b_contents = {_normalized(t) for t in b_items} | {f"Agent B's own keyed memory {example}"}

    # --- every read of B returns B's data only ---------------------------------------------------
    page = store.list(b, limit=1000)
    assert page.total == len(b_ids)
    assert {m.id for m in page.items} == b_ids
    assert all(m.agent_id == b for m in page.items)
    assert store.get_by_key(b, SHARED_KEY).id == b_keyed.id
    hits = store.recall(b, f"Agent A's secret keyed memory {example}", limit=50,
                        include_archived=True)
    assert hits and {h.id for h in hits} <= b_ids
    context = store.context(b, a_texts[-1], limit=50)
    assert context.startswith("## Relevant memories\n")
    for line in context.split("\n"):
        if line.startswith("- "):
            assert line[2:].rsplit(" (", 1)[0] in b_contents, line
    for memory_id in sorted(b_ids)[:2]:
        assert {r.memory.id for r in store.related(b, memory_id, limit=1000)} <= b_ids
    [entity, friend] = store.kg_query(b, SHARED_ENTITY, depth=3)
    assert entity.attributes == {"owner": "b"} and entity.type == "entity"
    assert friend.id == "b-only-friend"
    sessions = store.sessions(b)
    assert [(s.session_id, s.message_count) for s in sessions] == [
        (SHARED_SESSION, len(first_of_each))]

    # --- B's deletes cannot reach A --------------------------------------------------------------
    for memory_id in a_ids:
        assert store.forget(b, memory_id) is False
    assert agent_snapshot(store, a) == before
    assert store.forget_agent(b) == len(b_ids)
    assert store.list(b).total == 0

    # --- A is exactly as it was ------------------------------------------------------------------
    assert agent_snapshot(store, a) == before
    assert store.list(a, limit=1000).total == a_count
    assert store.get_by_key(a, SHARED_KEY).id == a_keyed
    assert store.kg_query(a, SHARED_ENTITY)[0].attributes == {"owner": "a"}
    assert {h.id for h in store.recall(a, a_texts[0], limit=50)} <= a_ids
    assert store.forget_agent(a) == a_count
