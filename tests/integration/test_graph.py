"""The per-agent knowledge graph: upserts, inverse edges, breadth-first queries, and
each edge's validity in time (current edges by default, ``as_of`` for the past)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from memoryd import clock
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


def _edges(entity: Entity) -> list[tuple[str, str]]:
    return [(r.target, r.type) for r in entity.relations]


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
    assert _edges(acme) == [("alice", "inverse:works_at")]
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
    assert _edges(a) == [("b", "next")]
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
    ({"id": "x", "relations": [{"target": "y", "type": "r", "valid_from": "yesterday"}]},
     "entity.relations[0].valid_from"),
    ({"id": "x", "relations": [{"target": "y", "type": "r", "valid_to": "2024-01-01T00:00"}]},
     "entity.relations[0].valid_to"),
    ({"id": "x", "relations": [{"target": "y", "type": "r", "valid_from": "2024-02-01T00:00Z",
                                "valid_to": "2024-01-01T00:00Z"}]},
     "entity.relations[0].valid_to"),
    ({"id": "x", "relations": [{"target": "y", "type": "r", "valid_from": "2024-01-01T00:00Z",
                                "valid_to": "2024-01-01T00:00Z"}]},
     "entity.relations[0].valid_to"),
    # No start given: the edge would start when added, after its end.
    ({"id": "x", "relations": [{"target": "y", "type": "r"},
                               {"target": "z", "type": "r", "valid_to": "2001-01-01T00:00Z"}]},
     "entity.relations[1].valid_to"),
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


# --- validity in time ---------------------------------------------------------------------
YEAR_2020 = datetime(2020, 1, 1, tzinfo=UTC)
YEAR_2023 = datetime(2023, 1, 1, tzinfo=UTC)


def _validity(store: MemoryStore, source: str, target: str
              ) -> list[tuple[str, datetime | None, datetime | None]]:
    """Both rows of an edge as stored: (type, valid_from, valid_to), the edge first."""
    with store.session() as session:
        rows = session.execute(text(
            "SELECT type, valid_from, valid_to FROM kg_relations WHERE agent_id = :a AND "
            "((source = :s AND target = :t) OR (source = :t AND target = :s)) "
            "ORDER BY source = :s DESC"), {"a": AGENT, "s": source, "t": target}).all()
    return [(r.type, r.valid_from, r.valid_to) for r in rows]


def _moved(store: MemoryStore) -> None:
    """Alice lived in Lisbon from 2020 to 2023, in Porto since."""
    store.kg_add(AGENT, {"id": "alice", "type": "person", "relations": [
        {"target": "lisbon", "type": "lives_in", "valid_from": YEAR_2020,
         "valid_to": YEAR_2023},
        {"target": "porto", "type": "lives_in", "valid_from": YEAR_2023.isoformat()}]})


def test_a_query_follows_only_the_edges_that_still_hold(store: MemoryStore) -> None:
    _moved(store)
    alice, porto = store.kg_query(AGENT, "alice", depth=1)
    assert porto.id == "porto"
    assert alice.relations == [Relation(target="porto", type="lives_in",
                                        valid_from=YEAR_2023, valid_to=None)]
    [lisbon] = store.kg_query(AGENT, "lisbon", depth=2)
    assert lisbon.relations == []


def test_as_of_follows_the_edges_that_held_then(store: MemoryStore) -> None:
    _moved(store)
    in_2021 = store.kg_query(AGENT, "alice", depth=1, as_of=YEAR_2020 + timedelta(days=400))
    assert [e.id for e in in_2021] == ["alice", "lisbon"]
    assert in_2021[0].relations == [Relation(target="lisbon", type="lives_in",
                                             valid_from=YEAR_2020, valid_to=YEAR_2023)]
    # The inverse edge holds over the same time, so the graph walks back the same way.
    assert [(r.target, r.type, r.valid_to) for r in in_2021[1].relations] == [
        ("alice", "inverse:lives_in", YEAR_2023)]
    # valid_to is exclusive: at the moment of the move, Porto.
    at_move = store.kg_query(AGENT, "alice", depth=1, as_of=YEAR_2023)
    assert [e.id for e in at_move] == ["alice", "porto"]
    before = store.kg_query(AGENT, "alice", depth=1, as_of=YEAR_2020 - timedelta(seconds=1))
    assert [e.id for e in before] == ["alice"]


def test_an_edge_without_a_start_holds_from_when_it_was_added(store: MemoryStore) -> None:
    store.kg_add(AGENT, {"id": "alice", "relations": [{"target": "acme", "type": "works_at"}]})
    with store.session() as session:
        added = session.execute(text("SELECT created_at FROM kg_relations WHERE source = "
                                     "'alice'")).scalar_one()
    [rel] = store.kg_query(AGENT, "alice", depth=1)[0].relations
    assert (rel.valid_from, rel.valid_to) == (added, None)
    assert _edges(store.kg_query(AGENT, "alice", depth=1, as_of=added)[0]) == [
        ("acme", "works_at")]
    assert store.kg_query(AGENT, "alice", depth=1,
                          as_of=added - timedelta(seconds=1))[0].relations == []


def test_an_edge_ending_later_holds_until_then(store: MemoryStore) -> None:
    now = clock.now()
    store.kg_add(AGENT, {"id": "alice", "relations": [
        {"target": "acme", "type": "contracts_with", "valid_to": now + timedelta(days=30)}]})
    assert _edges(store.kg_query(AGENT, "alice")[0]) == [("acme", "contracts_with")]
    clock.set_clock(lambda: now + timedelta(days=31))
    try:
        assert store.kg_query(AGENT, "alice")[0].relations == []
    finally:
        clock.set_clock(None)


def test_re_adding_an_edge_updates_its_validity_and_its_inverse(store: MemoryStore) -> None:
    store.kg_add(AGENT, {"id": "alice", "relations": [{"target": "bob", "type": "knows"}]})
    assert [(ty, end) for ty, _, end in _validity(store, "alice", "bob")] == [
        ("knows", None), ("inverse:knows", None)]
    store.kg_add(AGENT, {"id": "alice", "relations": [
        {"target": "bob", "type": "knows", "valid_from": YEAR_2020, "valid_to": YEAR_2023}]})
    assert _validity(store, "alice", "bob") == [("knows", YEAR_2020, YEAR_2023),
                                                ("inverse:knows", YEAR_2020, YEAR_2023)]
    assert store.kg_query(AGENT, "alice")[0].relations == []
    # Added again from the other side, with no end: it holds again, from the same start.
    store.kg_add(AGENT, {"id": "bob", "relations": [{"target": "alice",
                                                     "type": "inverse:knows"}]})
    assert _validity(store, "alice", "bob") == [("knows", YEAR_2020, None),
                                                ("inverse:knows", YEAR_2020, None)]
    assert _edges(store.kg_query(AGENT, "alice", depth=1)[0]) == [("bob", "knows")]
    assert len(_relations(store)) == 2


def test_an_end_before_the_start_an_edge_already_has_is_refused(store: MemoryStore) -> None:
    _moved(store)
    with pytest.raises(ValidationError) as info:
        store.kg_add(AGENT, {"id": "alice", "relations": [
            {"target": "porto", "type": "lives_in", "valid_to": YEAR_2020}]})
    assert info.value.field == "entity.relations[0].valid_to"
    assert _validity(store, "alice", "porto") == [("lives_in", YEAR_2023, None),
                                                  ("inverse:lives_in", YEAR_2023, None)]


def test_as_of_in_the_future_is_refused_by_name(store: MemoryStore) -> None:
    store.kg_add(AGENT, {"id": "alice"})
    with pytest.raises(ValidationError) as info:
        store.kg_query(AGENT, "alice", as_of=clock.now() + timedelta(days=30))
    assert info.value.field == "as_of"
