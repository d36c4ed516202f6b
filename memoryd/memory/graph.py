"""The per-agent knowledge graph: entities and typed relations, each relation
stored together with its ``inverse:<type>`` edge."""

from __future__ import annotations

import json

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd import validation as check
from memoryd.errors import NotFound
from memoryd.types import Entity, Relation

INVERSE_PREFIX = "inverse:"


def inverse_type(rel_type: str) -> str:
    """``likes`` <-> ``inverse:likes``: the inverse of an inverse is the original."""
    if rel_type.startswith(INVERSE_PREFIX):
        return rel_type[len(INVERSE_PREFIX):]
    return INVERSE_PREFIX + rel_type


def add(session: Session, agent_id: str, entity: Entity) -> bool:
    """Upsert the entity (attributes merged), its relations and their inverses.

    Returns True when the entity did not exist before.
    """
    created = session.execute(text("""
        INSERT INTO kg_entities (agent_id, entity_id, type, attributes)
        VALUES (:a, :id, :type, CAST(:attrs AS jsonb))
        ON CONFLICT (agent_id, entity_id) DO UPDATE
        SET type = CASE WHEN EXCLUDED.type = 'entity' THEN kg_entities.type
                        ELSE EXCLUDED.type END,  -- an update without a type keeps the known one
            attributes = kg_entities.attributes || EXCLUDED.attributes, updated_at = now()
        RETURNING (xmax = 0) AS inserted
    """), {"a": agent_id, "id": entity.id, "type": entity.type,
           "attrs": json.dumps(entity.attributes)}).scalar_one()
    if entity.relations:
        targets = sorted({rel.target for rel in entity.relations} - {entity.id})
        session.execute(text("""
            INSERT INTO kg_entities (agent_id, entity_id, type)
            SELECT :a, t, 'entity' FROM unnest(CAST(:targets AS text[])) AS t
            ON CONFLICT DO NOTHING
        """), {"a": agent_id, "targets": targets})
        edges = [(entity.id, rel.target, rel.type) for rel in entity.relations]
        edges += [(rel.target, entity.id, inverse_type(rel.type)) for rel in entity.relations]
        session.execute(text("""
            INSERT INTO kg_relations (agent_id, source, target, type)
            SELECT :a, s, t, ty FROM unnest(CAST(:s AS text[]), CAST(:t AS text[]),
                                             CAST(:ty AS text[])) AS e(s, t, ty)
            ON CONFLICT DO NOTHING
        """), {"a": agent_id, "s": [e[0] for e in edges], "t": [e[1] for e in edges],
               "ty": [e[2] for e in edges]})
    return bool(created)


def query(session: Session, agent_id: str, start_id: str, depth: int) -> list[Entity]:
    """Breadth-first from ``start_id`` up to ``depth`` hops; each entity once (cycle-safe)."""
    check.depth(depth)
    order = [start_id]
    seen = {start_id}
    frontier = [start_id]
    edges: dict[str, list[Relation]] = {}
    for level in range(depth + 1):
        rows = session.execute(text("""
            SELECT source, target, type FROM kg_relations
            WHERE agent_id = :a AND source = ANY(:f) ORDER BY source, type, target
        """), {"a": agent_id, "f": frontier}).all()
        following = []
        for source, target, rel_type in rows:
            edges.setdefault(source, []).append(Relation(target=target, type=rel_type))
            if level < depth and target not in seen:
                seen.add(target)
                order.append(target)
                following.append(target)
        frontier = following
        if not frontier:
            break
    found = {row.entity_id: row for row in session.execute(text("""
        SELECT entity_id, type, attributes FROM kg_entities
        WHERE agent_id = :a AND entity_id = ANY(:ids)
    """), {"a": agent_id, "ids": order})}
    if start_id not in found:
        raise NotFound("no such entity for this agent")
    return [Entity(id=eid, type=found[eid].type, attributes=found[eid].attributes,
                   relations=edges.get(eid, [])) for eid in order if eid in found]
