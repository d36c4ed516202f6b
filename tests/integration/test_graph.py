"""The per-agent knowledge graph: upserts, inverse edges, breadth-first queries."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from memoryd.errors import NotFound, ValidationError
from memoryd.memory.graph import inverse_type
from memoryd.memory.store import MemoryStore
from memoryd.types import Entity, Relation
from memoryd.validation import MAX_KG_DEPTH as MAX_DEPTH

AGENT = "agent-graph"


def _relations(store: MemoryStore, agent: str = AGENT) -> list[tuple[str, str, str]]:
    with store.session() as session:
        rows = session.execute(text(
            "SELECT source, target, type FROM kg_relations WHERE agent_id = :a "
            "ORDER BY source, target, type"), {"a": agent}).all()
    return [(r.source, r.target, r.type) for r in rows]


def _chain(store: MemoryStore) -> None:
    """a -> b -> c -> d, all ``next``."""
    for source, target in (("a", "b"), ("b", "c"), ("c", "d")):
        store.kg_add(AGENT, {"id": source, "relations": [{"target": target, "type": "next"}]})


def test_inverse_type_round_trips() -> None:
    assert inverse_type("works_at") == "inverse:works_at"
    assert inverse_type("inverse:works_at") == "works_at"


def test_kg_add_stores_each_relation_and_its_inverse_exactly_once(store: MemoryStore) -> None:
    entity = Entity(id="alice", type="person", attributes={"role": "engineer"},
                    relations=[Relation(target="acme", type="works_at"),
                               Relation(target="bob", type="knows")])
    assert store.kg_add(AGENT, entity) is True
    expected = [
        ("acme", "alice", "inverse:works_at"),
        ("alice", "acme", "works_at"),
        ("alice", "bob", "knows"),
        ("bob", "alice", "inverse:knows"),
    ]
    assert _relations(store) == expected

    assert store.kg_add(AGENT, entity) is False
    assert _relations(store) == expected
    # the inverse added from the other side is the same edge, not a new one
    store.kg_add(AGENT, {"id": "acme", "relations": [{"target": "alice",
                                                     "type": "inverse:works_at"}]})
    assert _relations(store) == expected
    with store.session() as session:
        count = session.execute(text("SELECT count(*) FROM kg_relations WHERE agent_id = :a"),
                                {"a": AGENT}).scalar_one()
    assert count == 4


def test_kg_add_returns_true_for_new_and_merges_attributes_on_update(
        store: MemoryStore) -> None:
    assert store.kg_add(AGENT, {"id": "alice", "type": "person",
                                "attributes": {"city": "Lisbon", "age": 30}}) is True
    assert store.kg_add(AGENT, {"id": "alice", "type": "person",
                                "attributes": {"age": 31, "team": "data"}}) is False
    [alice] = store.kg_query(AGENT, "alice", depth=0)
    assert alice.type == "person"
    assert alice.attributes == {"city": "Lisbon", "age": 31, "team": "data"}


def test_relation_targets_become_entities(store: MemoryStore) -> None:
    store.kg_add(AGENT, {"id": "alice", "relations": [{"target": "acme", "type": "works_at"}]})
    [acme, alice] = store.kg_query(AGENT, "acme", depth=1)
    assert (acme.id, alice.id) == ("acme", "alice")
    assert acme.relations == [Relation(target="alice", type="inverse:works_at")]
    assert store.kg_add(AGENT, {"id": "acme", "type": "company"}) is False


def test_kg_query_respects_depth(store: MemoryStore) -> None:
    _chain(store)
    assert [e.id for e in store.kg_query(AGENT, "a", depth=0)] == ["a"]
    assert [e.id for e in store.kg_query(AGENT, "a", depth=1)] == ["a", "b"]
    assert [e.id for e in store.kg_query(AGENT, "a", depth=2)] == ["a", "b", "c"]
    assert [e.id for e in store.kg_query(AGENT, "a", depth=3)] == ["a", "b", "c", "d"]
    assert [e.id for e in store.kg_query(AGENT, "a", depth=MAX_DEPTH)] == ["a", "b", "c", "d"]
    # inverse edges make the graph walkable backwards too
    assert [e.id for e in store.kg_query(AGENT, "d", depth=2)] == ["d", "c", "b"]
    # default depth is 2
    assert [e.id for e in store.kg_query(AGENT, "b")] == ["b", "a", "c", "d"]

    [a, b] = store.kg_query(AGENT, "a", depth=1)
    assert a.relations == [Relation(target="b", type="next")]
    assert sorted((r.target, r.type) for r in b.relations) == [
        ("a", "inverse:next"), ("c", "next")]


def test_kg_query_is_cycle_safe(store: MemoryStore) -> None:
    store.kg_add(AGENT, {"id": "a", "relations": [{"target": "b", "type": "likes"}]})
    store.kg_add(AGENT, {"id": "b", "relations": [{"target": "a", "type": "likes"}]})
    store.kg_add(AGENT, {"id": "c", "relations": [{"target": "c", "type": "self"}]})
    found = store.kg_query(AGENT, "a", depth=MAX_DEPTH)
    assert [e.id for e in found] == ["a", "b"]
    assert [e.id for e in store.kg_query(AGENT, "c", depth=MAX_DEPTH)] == ["c"]


def test_kg_query_missing_start_raises_not_found(store: MemoryStore) -> None:
    with pytest.raises(NotFound):
        store.kg_query(AGENT, "nobody")
    store.kg_add(AGENT, {"id": "somebody"})
    with pytest.raises(NotFound):
        store.kg_query("other-agent", "somebody")
    assert [e.id for e in store.kg_query(AGENT, "somebody")] == ["somebody"]


@pytest.mark.parametrize("depth", [-1, MAX_DEPTH + 1, 100, 1.5, "2", True, None])
def test_kg_query_rejects_bad_depth(store: MemoryStore, depth: object) -> None:
    store.kg_add(AGENT, {"id": "a"})
    with pytest.raises(ValidationError) as info:
        store.kg_query(AGENT, "a", depth=depth)  # type: ignore[arg-type]
    assert info.value.field == "depth"


@pytest.mark.parametrize(("entity", "field"), [
    ({"type": "person"}, "entity.id"),
    ({"id": ""}, "entity.id"),
    ({"id": "x", "attributes": ["not", "a", "mapping"]}, "entity.attributes"),
    ({"id": "x", "relations": "nope"}, "entity.relations"),
    ({"id": "x", "relations": [{"target": "y"}]}, "entity.relations[0]"),
    ({"id": "x", "relations": [{"target": "y", "type": "ok"}, 3]}, "entity.relations[1]"),
    ({"id": "x", "relations": [{"target": "y\ud800", "type": "ok"}]},
     "entity.relations[0].target"),
    ({"id": "x", "attributes": {"v": float("nan")}}, "entity.attributes"),
    ({"id": "x", "attributes": {"v": "nul\x00"}}, "entity.attributes"),
    ({"id": "x", "attributes": {"v": "lone \ud800"}}, "entity.attributes"),
    ({"id": "x", "attributes": {"v": object()}}, "entity.attributes"),
    ({"id": "x\ud800"}, "entity.id"),
    ({"id": "x", "type": "t" * 129}, "entity.type"),
    (None, "entity"),
    ("alice", "entity"),
])
def test_kg_add_rejects_bad_entities(store: MemoryStore, entity: object,
                                     field: str) -> None:
    with pytest.raises(ValidationError) as info:
        store.kg_add(AGENT, entity)
    assert info.value.field == field
    assert _relations(store) == []


def test_update_without_a_type_keeps_the_known_type(store: MemoryStore) -> None:
    store.kg_add(AGENT, {"id": "alice", "type": "person"})
    store.kg_add(AGENT, {"id": "alice", "attributes": {"city": "Lisbon"}})
    [alice] = store.kg_query(AGENT, "alice", depth=0)
    assert alice.type == "person"
    assert alice.attributes == {"city": "Lisbon"}
    store.kg_add(AGENT, {"id": "alice", "type": "robot"})
    assert store.kg_query(AGENT, "alice", depth=0)[0].type == "robot"
