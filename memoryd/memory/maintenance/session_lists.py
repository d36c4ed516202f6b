"""Sessions' message lists, as the session jobs (``compact_sessions``,
``repair_sessions``) and ``cortex`` read and rewrite them.

A session row holds an ordered JSONB list of references ``{"id", "role", "ts"}`` to
memories. Agents append to it concurrently (``messages || new``), so both session jobs
read a session, do the slow work (LLM, embeddings) outside any transaction, and then
rewrite it under ``FOR UPDATE`` only if the part they read is still the list's prefix;
messages appended meanwhile are carried over untouched.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd import validation as check
from memoryd.errors import ValidationError
from memoryd.memory.maintenance.context import JobContext
from memoryd.memory.sessions import MESSAGES_SQL, REF_UUID_SQL

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
LENGTH_SQL = f"jsonb_array_length({MESSAGES_SQL})"


def message_list(value: object) -> list[Any]:
    """A session's ``messages`` as a list, whatever a broken row holds."""
    if isinstance(value, list):
        return value
    return [value] if isinstance(value, dict) else []


def ref_id(ref: object) -> str | None:
    """The reference's memory id, if it has a non-empty string one."""
    if isinstance(ref, dict):
        value = ref.get("id")
        if isinstance(value, str) and value.strip():
            return value
    return None


def as_uuid(value: str | None) -> uuid.UUID | None:
    """The UUID spelled canonically in ``value`` (as memoryd writes them), else None."""
    return uuid.UUID(value) if value is not None and _UUID.fullmatch(value) else None


def single_session(ctx: JobContext, session_id: object) -> str | None:
    """Validate the on-demand ``session_id`` parameter: it needs the run's agent."""
    if session_id is None:
        return None
    sid = check.short_text("session_id", session_id)
    if ctx.agent_id is None:
        raise ValidationError("agent_id", "is required when session_id is given")
    return sid


def session_keys(ctx: JobContext, where: str, params: Mapping[str, Any],
                 session_id: str | None = None) -> Iterator[tuple[str, str]]:
    """(agent_id, session_id) of the sessions matching ``where`` (alias ``s``), keyset-paged
    ``batch_size`` at a time, each page read in its own short transaction."""
    if session_id is not None:
        where = f"({where}) AND s.session_id = :session_id"
    after = ("", "")
    while True:
        with ctx.store.session() as session:
            rows = session.execute(text(f"""
                SELECT s.agent_id, s.session_id FROM sessions s
                WHERE {ctx.agent_clause('s')} AND ({where})
                  AND (s.agent_id, s.session_id) > (:after_agent, :after_session)
                ORDER BY s.agent_id, s.session_id LIMIT :batch
            """), {**params, "agent_id": ctx.agent_id, "session_id": session_id,
                   "after_agent": after[0], "after_session": after[1],
                   "batch": ctx.batch_size}).all()
        for row in rows:
            yield str(row.agent_id), str(row.session_id)
        if len(rows) < ctx.batch_size:
            return
        after = (str(rows[-1].agent_id), str(rows[-1].session_id))


# Superseded messages are left out: what a job learns from a session (facts, a gist)
# must not restate what has been replaced since.
_MESSAGES = text(f"""
SELECT m.id, left(m.content, :chars) AS content
FROM sessions s
CROSS JOIN LATERAL jsonb_array_elements({MESSAGES_SQL}) WITH ORDINALITY AS e(msg, n)
JOIN memories m ON m.agent_id = s.agent_id AND m.id = {REF_UUID_SQL}
WHERE s.agent_id = :agent_id AND s.session_id = :session_id AND m.valid_to IS NULL
ORDER BY e.n
LIMIT :limit
""")


class Message(NamedTuple):
    """One message of a session as a job reads it: its memory and its (clipped) text."""

    id: uuid.UUID
    content: str


def session_messages(ctx: JobContext, agent_id: str, session_id: str, *, limit: int = 500,
                     chars: int = 2000) -> list[Message]:
    """A session's first ``limit`` current messages in message order, each clipped to
    ``chars`` (the LLM helpers clip prompt items to 2,000 characters anyway); their ids
    are what the memories learnt from them link to (``derived_from``)."""
    with ctx.store.session() as session:
        return [Message(r.id, str(r.content)) for r in session.execute(_MESSAGES, {
            "agent_id": agent_id, "session_id": session_id, "limit": limit,
            "chars": chars})]


class SessionRow(NamedTuple):
    """A session's list as read, with what a repair needs to know about the row."""

    messages: list[Any]
    stored_count: int  # the message_count column
    is_list: bool  # False for a hand-written object or scalar in place of the list


def read_messages(session: Session, agent_id: str, session_id: str,
                  lock: bool = False) -> SessionRow | None:
    """A session's list as read (``lock``: FOR UPDATE, for a rewrite), or None."""
    row = session.execute(text(
        "SELECT messages, message_count FROM sessions "
        "WHERE agent_id = :agent_id AND session_id = :session_id"
        + (" FOR UPDATE" if lock else "")),
        {"agent_id": agent_id, "session_id": session_id}).first()
    if row is None:
        return None
    return SessionRow(message_list(row.messages), int(row.message_count),
                      isinstance(row.messages, list))


_REWRITE = """
UPDATE sessions SET messages = CAST(:messages AS jsonb), message_count = :count, {stamp} = :now,
    compacted_ids = compacted_ids || CAST(:compacted AS text[])
WHERE agent_id = :agent_id AND session_id = :session_id
"""


def write_session(session: Session, agent_id: str, session_id: str, messages: list[Any],
                  stamp: str, now: datetime, compacted: list[str] | None = None) -> None:
    """Replace a session's list and count, and set the job's ``stamp`` column;
    ``compacted``: the ids of messages taken out by compaction, kept in recall's positions."""
    # updated_at is left alone on purpose: it means "an agent wrote here", which the
    # cortex and repair sweeps use to find new activity.
    session.execute(text(_REWRITE.format(stamp=stamp)), {
        "messages": json.dumps(messages), "count": len(messages), "now": now,
        "compacted": compacted or [],
        "agent_id": agent_id, "session_id": session_id})
