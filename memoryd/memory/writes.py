"""Writing memories: hashing, defaults, dedup-safe inserts and key upserts.

Dedup is enforced by the unique index on (agent_id, content_hash), so it holds
under any concurrency: ``INSERT ... ON CONFLICT DO NOTHING`` either inserts or
finds the row another process inserted first.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from memoryd.memory import classify, sessions
from memoryd.memory.embeddings import to_pgvector
from memoryd.types import StoreItem, StoreResult


def content_hash(content: str) -> str:
    """SHA-256 of the whitespace-normalized content (hex)."""
    return hashlib.sha256(" ".join(content.split()).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class PreparedRow:
    """One memory ready to insert: defaults resolved, hash and embedding attached."""

    item: StoreItem
    values: dict[str, Any]


def prepare(agent_id: str, items: Sequence[StoreItem],
            vectors: npt.NDArray[np.float32]) -> list[PreparedRow]:
    prepared = []
    for item, vector in zip(items, vectors, strict=True):
        category = item.category or classify.classify(item.content).category
        importance = item.importance
        if importance is None:
            importance = classify.importance(item.content, item.role, category)
        prepared.append(PreparedRow(item, {
            "agent_id": agent_id, "content": item.content,
            "content_hash": content_hash(item.content), "role": item.role,
            "session_id": item.session_id, "key": item.key, "category": category,
            "tags": list(item.tags), "source": item.source,
            "metadata": json.dumps(item.metadata or {}), "importance": importance,
            "expires_at": item.expires_at, "created_at": item.created_at,
            "embedding": to_pgvector(vector),
        }))
    return prepared


_INSERT = text("""
INSERT INTO memories (agent_id, content, content_hash, role, session_id, key, category, tags,
                      source, metadata, importance, expires_at, created_at, updated_at, embedding)
SELECT :agent_id, :content, :content_hash, :role, :session_id, :key, :category, :tags,
       :source, CAST(:metadata AS jsonb), :importance, :expires_at,
       coalesce(CAST(:created_at AS timestamptz), now()), now(), CAST(:embedding AS vector)
ON CONFLICT DO NOTHING
RETURNING id, created_at
""")
_BY_HASH = text("SELECT id FROM memories WHERE agent_id = :agent_id AND content_hash = :h")
_BY_KEY = text("""SELECT id, content_hash FROM memories
                  WHERE agent_id = :agent_id AND key = :key FOR UPDATE""")
_UPDATE_BY_KEY = text("""
UPDATE memories SET content = :content, content_hash = :content_hash, role = :role,
    session_id = :session_id, category = :category, tags = :tags, source = :source,
    metadata = CAST(:metadata AS jsonb), importance = :importance, expires_at = :expires_at,
    embedding = CAST(:embedding AS vector), confidence = 1.0, archived_at = NULL,
    updated_at = now()
WHERE id = :id
""")


def write(session: Session, rows: Sequence[PreparedRow]) -> list[StoreResult]:
    """Insert or upsert each row in order, inside the caller's transaction. Rows of one
    agent; without keys they go in as one statement (``_write_plain_bulk``)."""
    if rows and not any(row.item.key for row in rows):
        written = _write_plain_bulk(session, rows)
    else:
        written = [_write_keyed(session, row) if row.item.key else _write_plain(session, row)
                   for row in rows]
    refs: dict[str, list[dict[str, Any]]] = {}
    for row, (result, created_at) in zip(rows, written, strict=True):
        if result.stored and row.item.session_id:
            ts = (created_at or datetime.now(UTC)).isoformat()
            refs.setdefault(row.item.session_id, []).append(
                sessions.message_ref(str(result.id), row.item.role, ts))
    agent_id = rows[0].values["agent_id"] if rows else ""
    for session_id, session_refs in refs.items():
        sessions.append(session, agent_id, session_id, session_refs)
    return [result for result, _ in written]


# Many rows in one statement: per-row statements cost more than the row itself (parse,
# bind, round trip, SQLAlchemy) once the embedding is done. ORDER BY keeps the input
# order, so of two rows with the same content the first is stored, as row by row.
_BULK_INSERT = text("""
INSERT INTO memories (agent_id, content, content_hash, role, session_id, category, tags,
                      source, metadata, importance, expires_at, created_at, updated_at,
                      embedding)
SELECT :agent_id, r.content, r.content_hash, r.role, r.session_id, r.category,
       ARRAY(SELECT jsonb_array_elements_text(CAST(r.tags AS jsonb))), r.source,
       CAST(r.metadata AS jsonb), r.importance, r.expires_at,
       coalesce(r.created_at, now()), now(), CAST(r.embedding AS vector)
FROM unnest(CAST(:contents AS text[]), CAST(:hashes AS text[]), CAST(:roles AS text[]),
            CAST(:session_ids AS text[]), CAST(:categories AS text[]),
            CAST(:tags AS text[]), CAST(:sources AS text[]), CAST(:metadata AS text[]),
            CAST(:importances AS float8[]), CAST(:expires AS timestamptz[]),
            CAST(:created AS timestamptz[]), CAST(:embeddings AS text[]))
     WITH ORDINALITY AS r(content, content_hash, role, session_id, category, tags, source,
                          metadata, importance, expires_at, created_at, embedding, n)
ORDER BY r.n
ON CONFLICT DO NOTHING
RETURNING id, content_hash, created_at
""")
_BY_HASHES = text("""SELECT content_hash, id FROM memories
                     WHERE agent_id = :agent_id AND content_hash = ANY(:hashes)""")


def _write_plain_bulk(session: Session,
                      rows: Sequence[PreparedRow]) -> list[tuple[StoreResult, datetime | None]]:
    """``_write_plain`` for many rows of one agent, in two statements: the insert, then
    the ids of the duplicates it skipped. A row whose duplicate vanished in between (a
    concurrent delete) goes through ``_write_plain``."""
    values = [row.values for row in rows]
    inserted = {r.content_hash: (r.id, r.created_at) for r in session.execute(_BULK_INSERT, {
        "agent_id": values[0]["agent_id"], "contents": [v["content"] for v in values],
        "hashes": [v["content_hash"] for v in values], "roles": [v["role"] for v in values],
        "session_ids": [v["session_id"] for v in values],
        "categories": [v["category"] for v in values],
        "tags": [json.dumps(v["tags"]) for v in values],
        "sources": [v["source"] for v in values], "metadata": [v["metadata"] for v in values],
        "importances": [v["importance"] for v in values],
        "expires": [v["expires_at"] for v in values],
        "created": [v["created_at"] for v in values],
        "embeddings": [v["embedding"] for v in values]})}
    skipped = {v["content_hash"] for v in values} - inserted.keys()
    existing = dict(session.execute(_BY_HASHES, {
        "agent_id": values[0]["agent_id"], "hashes": list(skipped)}).all()) if skipped else {}
    out: list[tuple[StoreResult, datetime | None]] = []
    for row in rows:
        h = row.values["content_hash"]
        if h in inserted:  # the first row with this content is the stored one
            memory_id, created_at = inserted.pop(h)
            existing[h] = memory_id
            out.append((StoreResult(id=memory_id, stored=True, duplicate=False), created_at))
        elif h in existing:
            out.append((StoreResult(id=existing[h], stored=False, duplicate=True), None))
        else:
            out.append(_write_plain(session, row))
    return out


def _write_plain(session: Session, row: PreparedRow) -> tuple[StoreResult, datetime | None]:
    for _ in range(3):  # the duplicate we collided with may be deleted concurrently
        inserted = session.execute(_INSERT, row.values).first()
        if inserted is not None:
            return StoreResult(id=inserted.id, stored=True, duplicate=False), inserted.created_at
        existing = session.execute(_BY_HASH, {"agent_id": row.values["agent_id"],
                                              "h": row.values["content_hash"]}).first()
        if existing is not None:
            return StoreResult(id=existing.id, stored=False, duplicate=True), None
    raise RuntimeError("memory insert kept conflicting without a visible duplicate")


def _write_keyed(session: Session, row: PreparedRow) -> tuple[StoreResult, datetime | None]:
    """Storing with an existing key updates that memory in place."""
    params = {"agent_id": row.values["agent_id"], "key": row.values["key"]}
    for _ in range(3):
        current = session.execute(_BY_KEY, params).first()
        if current is None:
            inserted = session.execute(_INSERT, row.values).first()
            if inserted is not None:
                return StoreResult(id=inserted.id, stored=True, duplicate=False), \
                    inserted.created_at
            continue  # lost a race on the key, or the content exists: look again
        if current.content_hash == row.values["content_hash"]:
            return StoreResult(id=current.id, stored=False, duplicate=True), None
        return _update_in_place(session, current.id, row), None
    existing = session.execute(_BY_HASH, {"agent_id": row.values["agent_id"],
                                          "h": row.values["content_hash"]}).first()
    if existing is None:
        raise RuntimeError("keyed insert kept conflicting without a visible duplicate")
    return StoreResult(id=existing.id, stored=False, duplicate=True), None


def _update_in_place(session: Session, memory_id: uuid.UUID, row: PreparedRow) -> StoreResult:
    try:
        with session.begin_nested():
            session.execute(_UPDATE_BY_KEY, {**row.values, "id": memory_id})
    except IntegrityError:
        # The new content already exists under another memory: dedup wins.
        existing = session.execute(_BY_HASH, {"agent_id": row.values["agent_id"],
                                              "h": row.values["content_hash"]}).one()
        return StoreResult(id=existing.id, stored=False, duplicate=True)
    return StoreResult(id=memory_id, stored=True, duplicate=False)
