"""The per-agent knowledge graph: entities and typed relations, each relation
stored together with its ``inverse:<type>`` edge."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd.errors import NotFound, ValidationError
from memoryd.types import Entity, Relation
from memoryd.validation import short_text

INVERSE_PREFIX = "inverse:"
MAX_DEPTH = 6
MAX_RELATIONS = 1000


def inverse_type(rel_type: str) -> str:
    """``likes`` <-> ``inverse:likes``: the inverse of an inverse is the original."""
    if rel_type.startswith(INVERSE_PREFIX):
        return rel_type[len(INVERSE_PREFIX):]
    return INVERSE_PREFIX + rel_type


def parse_entity(raw: Entity | Mapping[str, Any]) -> Entity:
    """Validate an entity given as ``Entity`` or a plain mapping."""
    data = raw.model_dump() if isinstance(raw, Entity) else dict(raw)
    entity_id = short_text("entity.id", data.get("id"))
    if entity_id is None:
        raise ValidationError("entity.id", "is required")
    entity_type = short_text("entity.type", data.get("type") or "entity", 128) or "entity"
    attributes = data.get("attributes") or {}
    if not isinstance(attributes, Mapping):
        raise ValidationError("entity.attributes", "must be a JSON object")
    relations = data.get("relations") or []
    if not isinstance(relations, list) or len(relations) > MAX_RELATIONS:
        raise ValidationError("entity.relations", f"must be a list of at most {MAX_RELATIONS}")
    parsed = []
    for index, rel in enumerate(relations):
        rel_data = rel.model_dump() if isinstance(rel, Relation) else rel
        if not isinstance(rel_data, Mapping):
            raise ValidationError(f"entity.relations[{index}]", "must be {target, type}")
        target = short_text(f"entity.relations[{index}].target", rel_data.get("target"))
        rel_type = short_text(f"entity.relations[{index}].type", rel_data.get("type"), 240)
        if target is None or rel_type is None:
            raise ValidationError(f"entity.relations[{index}]", "needs target and type")
        parsed.append(Relation(target=target, type=rel_type))
    try:  # jsonb takes neither NaN, NUL nor lone surrogates (UnicodeEncodeError is a ValueError)
        encoded = json.dumps(dict(attributes), allow_nan=False, ensure_ascii=False)
        encoded.encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise ValidationError("entity.attributes", f"is not JSON-serializable: {exc}") from None
    if "\\u0000" in encoded:
        raise ValidationError("entity.attributes", "contains a NUL character")
    return Entity(id=entity_id, type=entity_type, attributes=dict(attributes), relations=parsed)


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
    if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= MAX_DEPTH:
        raise ValidationError("depth", f"must be an integer from 0 to {MAX_DEPTH}")
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
        raise NotFound(f"entity {start_id!r} not found for this agent")
    return [Entity(id=eid, type=found[eid].type, attributes=found[eid].attributes,
                   relations=edges.get(eid, [])) for eid in order if eid in found]
