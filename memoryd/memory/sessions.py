"""Session message lists: appending references, reading them back, listing sessions."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd.memory.rows import select_list, to_memory
from memoryd.types import Memory, SessionInfo

# A session row written by hand can hold anything: these keep SQL over it from failing.
MESSAGES_SQL = ("(CASE WHEN jsonb_typeof(s.messages) = 'array' THEN s.messages "
                "ELSE CAST('[]' AS jsonb) END)")
REF_UUID_SQL = ("(CASE WHEN e.msg->>'id' ~* "
                "'^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' "
                "THEN CAST(e.msg->>'id' AS uuid) END)")

_APPEND = text("""
INSERT INTO sessions (agent_id, session_id, messages, message_count)
VALUES (:agent_id, :session_id, CAST(:messages AS jsonb), :count)
ON CONFLICT (agent_id, session_id) DO UPDATE
SET messages = sessions.messages || EXCLUDED.messages,
    message_count = sessions.message_count + EXCLUDED.message_count,
    updated_at = now()
""")


def message_ref(memory_id: str, role: str | None, ts: str) -> dict[str, Any]:
    return {"id": memory_id, "role": role, "ts": ts}


def append(session: Session, agent_id: str, session_id: str,
           refs: Sequence[dict[str, Any]]) -> None:
    """Append message references to a session, creating it on first use."""
    if refs:
        session.execute(_APPEND, {"agent_id": agent_id, "session_id": session_id,
                                  "messages": json.dumps(list(refs)), "count": len(refs)})


def remove_reference(session: Session, agent_id: str, session_id: str, memory_id: str) -> None:
    """Drop one memory from its session's list (used when a memory is forgotten)."""
    session.execute(text("""
        UPDATE sessions s
        SET messages = kept.messages, message_count = jsonb_array_length(kept.messages),
            compacted_ids = array_remove(s.compacted_ids, CAST(:memory_id AS text)),
            updated_at = now()
        FROM (SELECT coalesce(jsonb_agg(e ORDER BY n), '[]'::jsonb) AS messages
              FROM sessions s2, jsonb_array_elements(s2.messages) WITH ORDINALITY AS t(e, n)
              WHERE s2.agent_id = :agent_id AND s2.session_id = :session_id
                AND e->>'id' IS DISTINCT FROM :memory_id) AS kept
        WHERE s.agent_id = :agent_id AND s.session_id = :session_id
    """), {"agent_id": agent_id, "session_id": session_id, "memory_id": memory_id})


# Newest first, so LIMIT keeps the latest; references to vanished memories are skipped
# before the limit counts. A NULL limit is no limit.
_MESSAGES = text(f"""
SELECT {select_list()}
FROM sessions s
CROSS JOIN LATERAL jsonb_array_elements({MESSAGES_SQL}) WITH ORDINALITY AS e(msg, n)
JOIN memories m ON m.agent_id = s.agent_id AND m.id = {REF_UUID_SQL}
WHERE s.agent_id = :agent_id AND s.session_id = :session_id
ORDER BY e.n DESC
LIMIT :limit
""")


def messages(session: Session, agent_id: str, session_id: str,
             limit: int | None = None) -> list[Memory]:
    """The memories of a session's messages in the list's order: the newest ``limit``
    of them (all when None), oldest first."""
    rows = session.execute(_MESSAGES, {"agent_id": agent_id, "session_id": session_id,
                                       "limit": limit}).mappings().all()
    return [to_memory(row) for row in reversed(rows)]


def list_sessions(session: Session, agent_id: str) -> list[SessionInfo]:
    rows = session.execute(text("""
        SELECT session_id, message_count, summary, created_at, updated_at, compacted_at,
               consolidated_at, indexed_at, repaired_at
        FROM sessions WHERE agent_id = :agent_id ORDER BY updated_at DESC, session_id
    """), {"agent_id": agent_id}).mappings()
    return [SessionInfo.model_validate(dict(row)) for row in rows]
