"""What the database holds for one agent, to check that a call changed nothing of it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from memoryd.memory.store import MemoryStore


def agent_snapshot(store: MemoryStore, agent: str) -> dict[str, Any]:
    """Everything the database holds for ``agent``, in a comparable form."""
    with store.session() as session:
        memories = session.execute(text("""
            SELECT id, content, content_hash, key, category, tags, importance, confidence,
                   access_count, last_accessed_at, updated_at, archived_at, session_id
            FROM memories WHERE agent_id = :a ORDER BY id"""), {"a": agent}).all()
        sessions = session.execute(text("""
            SELECT session_id, messages, message_count, updated_at FROM sessions
            WHERE agent_id = :a ORDER BY session_id"""), {"a": agent}).all()
        entities = session.execute(text("""
            SELECT entity_id, type, attributes, updated_at FROM kg_entities
            WHERE agent_id = :a ORDER BY entity_id"""), {"a": agent}).all()
        relations = session.execute(text("""
            SELECT source, target, type FROM kg_relations
            WHERE agent_id = :a ORDER BY source, target, type"""), {"a": agent}).all()
        links = session.execute(text("""
            SELECT source_id, target_id, kind FROM memory_links
            WHERE agent_id = :a ORDER BY source_id, target_id, kind"""), {"a": agent}).all()
    return {"memories": [tuple(r) for r in memories], "sessions": [tuple(r) for r in sessions],
            "entities": [tuple(r) for r in entities], "relations": [tuple(r) for r in relations],
            "links": [tuple(r) for r in links]}
