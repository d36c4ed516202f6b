"""Session message lists: appending references and listing sessions."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd.types import SessionInfo

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
            updated_at = now()
        FROM (SELECT coalesce(jsonb_agg(e ORDER BY n), '[]'::jsonb) AS messages
              FROM sessions s2, jsonb_array_elements(s2.messages) WITH ORDINALITY AS t(e, n)
              WHERE s2.agent_id = :agent_id AND s2.session_id = :session_id
                AND e->>'id' IS DISTINCT FROM :memory_id) AS kept
        WHERE s.agent_id = :agent_id AND s.session_id = :session_id
    """), {"agent_id": agent_id, "session_id": session_id, "memory_id": memory_id})


def list_sessions(session: Session, agent_id: str) -> list[SessionInfo]:
    rows = session.execute(text("""
        SELECT session_id, message_count, summary, created_at, updated_at, compacted_at,
               consolidated_at, indexed_at, repaired_at
        FROM sessions WHERE agent_id = :agent_id ORDER BY updated_at DESC, session_id
    """), {"agent_id": agent_id}).mappings()
    return [SessionInfo.model_validate(dict(row)) for row in rows]
