"""The per-agent knowledge graph: entities and typed relations, each relation
stored together with its ``inverse:<type>`` edge.

An edge has a validity, as a memory has: it holds from ``valid_from`` (its
``created_at`` when not given) until ``valid_to`` (NULL: it still holds). A query
follows current edges, or those that held at ``as_of``; both rows of an edge (it and
its inverse) are always written together, so they always say the same."""

from __future__ import annotations

import json
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd import clock
from memoryd import validation as check
from memoryd.errors import NotFound, ValidationError
from memoryd.types import Entity, Relation

INVERSE_PREFIX = "inverse:"


def inverse_type(rel_type: str) -> str:
    """``likes`` <-> ``inverse:likes``: the inverse of an inverse is the original."""
    if rel_type.startswith(INVERSE_PREFIX):
        return rel_type[len(INVERSE_PREFIX):]
    return INVERSE_PREFIX + rel_type


# Re-adding an edge says it holds as the relation now tells: its end is the one given
# (none: it holds again), its start the one given or the one it had. An edge that would
# end before it starts is reported (``never``), for the caller to refuse.
_EDGES = text("""
INSERT INTO kg_relations AS r (agent_id, source, target, type, valid_from, valid_to)
SELECT :a, e.s, e.t, e.ty, e.vf, e.vt
FROM unnest(CAST(:s AS text[]), CAST(:t AS text[]), CAST(:ty AS text[]),
            CAST(:vf AS timestamptz[]), CAST(:vt AS timestamptz[])) AS e(s, t, ty, vf, vt)
ON CONFLICT (agent_id, source, target, type) DO UPDATE
SET valid_from = coalesce(EXCLUDED.valid_from, r.valid_from), valid_to = EXCLUDED.valid_to
RETURNING r.source, r.target, r.type,
          r.valid_to <= coalesce(r.valid_from, r.created_at) AS never
""")

_Key = tuple[str, str, str]


def add(session: Session, agent_id: str, entity: Entity) -> bool:
    """Upsert the entity (attributes merged), its relations and their inverses, each
    with the validity its relation carries.

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
        _add_edges(session, agent_id, entity)
    return bool(created)


def _add_edges(session: Session, agent_id: str, entity: Entity) -> None:
    """Write each relation and its inverse; refuse (``ValidationError`` naming the
    relation) one that would end before it starts."""
    # One row per edge: a statement may not update a row twice, so of two relations
    # naming one edge (or a self-loop's edge and its inverse) the later one wins.
    edges: dict[_Key, tuple[int, Relation]] = {}
    for index, rel in enumerate(entity.relations):
        edges[(entity.id, rel.target, rel.type)] = (index, rel)
        edges[(rel.target, entity.id, inverse_type(rel.type))] = (index, rel)
    rows = session.execute(_EDGES, {
        "a": agent_id, "s": [k[0] for k in edges], "t": [k[1] for k in edges],
        "ty": [k[2] for k in edges], "vf": [rel.valid_from for _, rel in edges.values()],
        "vt": [rel.valid_to for _, rel in edges.values()]}).all()
    ended = sorted(edges[(r.source, r.target, r.type)][0] for r in rows if r.never)
    if ended:
        raise ValidationError(f"entity.relations[{ended[0]}].valid_to",
                              "must be after the edge's valid_from (its creation when "
                              "not given)")


# Current edges: those not ended yet. As of a time: those that held then.
_CURRENT = "(valid_to IS NULL OR valid_to > :t)"
_AS_OF = "coalesce(valid_from, created_at) <= :t AND (valid_to IS NULL OR valid_to > :t)"
_FOLLOW = """
SELECT source, target, type, coalesce(valid_from, created_at) AS valid_from, valid_to
FROM kg_relations WHERE agent_id = :a AND source = ANY(:f) AND {valid}
ORDER BY source, type, target"""


def query(session: Session, agent_id: str, start_id: str, depth: int, *,
          as_of: datetime | None = None) -> list[Entity]:
    """Breadth-first from ``start_id`` up to ``depth`` hops over the edges that hold
    now (or held at ``as_of``); each entity once (cycle-safe). Each relation carries
    its validity."""
    check.depth(depth)
    follow = text(_FOLLOW.format(valid=_CURRENT if as_of is None else _AS_OF))
    moment = clock.now() if as_of is None else as_of
    order = [start_id]
    seen = {start_id}
    frontier = [start_id]
    edges: dict[str, list[Relation]] = {}
    for level in range(depth + 1):
        rows = session.execute(follow, {"a": agent_id, "f": frontier, "t": moment}).all()
        following = []
        for row in rows:
            edges.setdefault(row.source, []).append(Relation(
                target=row.target, type=row.type, valid_from=row.valid_from,
                valid_to=row.valid_to))
            if level < depth and row.target not in seen:
                seen.add(row.target)
                order.append(row.target)
                following.append(row.target)
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
