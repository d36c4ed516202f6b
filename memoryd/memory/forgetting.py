"""Forgetting one memory, and every copy of what it said.

``forget`` erases the memory, the earlier versions of it (its ``memory_versions`` rows,
and the rows its key superseded: the same record as it was), the memories derived from
it (a summary, a merge's survivor, an extracted fact: linked ``derived_from`` to it,
transitively) with their own versions, and the evicted duplicates merged into any of
them. What a derived memory had archived comes back (its other sources stated facts of
their own), and what the erased memory had superseded by judgement or by the caller's
word is current again: with the replacement gone, nothing says it no longer holds.
"""

from __future__ import annotations

import uuid

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd.errors import ValidationError
from memoryd.memory import sessions, supersession, versions

# The erased set: the memory, its key's earlier versions and what derives from them.
_ERASED = text("""
WITH RECURSIVE erased(id) AS (
    SELECT CAST(:id AS uuid)
    UNION
    SELECT n.id FROM erased e CROSS JOIN LATERAL (
        SELECT s.old_id AS id FROM memory_supersessions s
        WHERE s.agent_id = :a AND s.new_id = e.id AND s.cause = 'key'
        UNION ALL
        SELECT l.source_id FROM memory_links l
        WHERE l.agent_id = :a AND l.target_id = e.id AND l.kind = 'derived_from') n)
SELECT m.id, m.session_id FROM erased e JOIN memories m ON m.id = e.id AND m.agent_id = :a
ORDER BY m.id FOR UPDATE OF m""")
# Archived sources of erased derived memories that nothing else erased summarizes.
_SOURCES = text("""
SELECT DISTINCT l.target_id FROM memory_links l
JOIN memories m ON m.id = l.target_id AND m.agent_id = :a AND m.archived_at IS NOT NULL
WHERE l.agent_id = :a AND l.kind = 'derived_from' AND l.source_id = ANY(CAST(:ids AS uuid[]))
  AND l.target_id <> ALL(CAST(:ids AS uuid[]))""")
# Memories the erased ones superseded other than by key: they hold again.
_REPLACED = text("""
SELECT id FROM memories WHERE agent_id = :a AND superseded_by = ANY(CAST(:ids AS uuid[]))
  AND id <> ALL(CAST(:ids AS uuid[]))""")


def forget(session: Session, agent_id: str, memory_id: uuid.UUID) -> bool:
    """Erase the memory and its copies (module docstring); False if it did not exist."""
    rows = session.execute(_ERASED, {"a": agent_id, "id": memory_id}).all()
    if not any(r.id == memory_id for r in rows):
        return False
    ids = [str(r.id) for r in rows]
    params: dict[str, object] = {"a": agent_id, "ids": ids}
    sources = list(session.execute(_SOURCES, params).scalars())
    if sources:
        versions.record(session, sources, "unarchived", agent_id=agent_id)
        session.execute(text("""UPDATE memories SET archived_at = NULL, updated_at = now()
                                WHERE agent_id = :a AND id = ANY(CAST(:s AS uuid[]))"""),
                        {"a": agent_id, "s": [str(s) for s in sources]})
    replaced = list(session.execute(_REPLACED, params).scalars())
    _delete(session, params)
    for old in replaced:
        try:
            with session.begin_nested():
                supersession.restore(session, agent_id, old)
        except ValidationError:
            continue  # its content or key is current elsewhere: it stays superseded
    for row in rows:
        if row.session_id:
            sessions.remove_reference(session, agent_id, row.session_id, str(row.id))
    return True


def _delete(session: Session, params: dict[str, object]) -> None:
    """The erased rows and everything naming them, merged duplicates included."""
    for sql in (
        """DELETE FROM evicted_memories e USING memory_links l
           WHERE l.agent_id = :a AND l.kind = 'derived_from'
             AND l.source_id = ANY(CAST(:ids AS uuid[])) AND e.agent_id = :a
             AND e.memory_id = l.target_id""",
        """DELETE FROM memory_links WHERE agent_id = :a
           AND (source_id = ANY(CAST(:ids AS uuid[])) OR target_id = ANY(CAST(:ids AS uuid[])))""",
        """DELETE FROM memory_versions WHERE agent_id = :a
           AND memory_id = ANY(CAST(:ids AS uuid[]))""",
        """DELETE FROM memory_supersessions WHERE agent_id = :a
           AND (old_id = ANY(CAST(:ids AS uuid[])) OR new_id = ANY(CAST(:ids AS uuid[])))""",
        """DELETE FROM memories WHERE agent_id = :a AND id = ANY(CAST(:ids AS uuid[]))""",
    ):
        session.execute(text(sql), params)
