"""The one write path for memories: validated items are embedded and prepared
(``prepare``), then inserted or upserted inside the caller's transaction (``write``).
``MemoryStore.store_many``, the worker's store batches and the maintenance jobs that
create memories all go through these two functions.

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
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd import clock
from memoryd.memory import asking, classify, sessions, supersession, versions
from memoryd.memory.embeddings import Embedder, to_pgvector
from memoryd.types import StoreItem, StoreResult


def content_hash(content: str) -> str:
    """SHA-256 of the whitespace-normalized content (hex)."""
    return hashlib.sha256(" ".join(content.split()).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class PreparedRow:
    """One memory ready to insert: defaults resolved, hash and embedding attached."""

    item: StoreItem
    values: dict[str, Any]
    actor: str | None = None  # who stores it, for versions: ``key:<id>``, ``run:<id>``

    @property
    def agent_id(self) -> str:
        return str(self.values["agent_id"])


# --- the columns a write sets: one definition for every statement below -------------


@dataclass(frozen=True)
class _Written:
    """A column a store writes: the SQL type of its bound value and the expression
    that turns the bound value (``{v}``) into the column's value."""

    name: str
    sql_type: str
    value: str = "{v}"


_WRITTEN = (
    _Written("agent_id", "text"),
    _Written("content", "text"),
    _Written("content_hash", "text"),
    _Written("role", "text"),
    _Written("session_id", "text"),
    _Written("key", "text"),
    _Written("category", "text"),
    # Tags travel as a JSON list: one encoding for a bound value and an unnest element.
    _Written("tags", "text", "ARRAY(SELECT jsonb_array_elements_text(CAST({v} AS jsonb)))"),
    _Written("source", "text"),
    _Written("metadata", "text", "CAST({v} AS jsonb)"),
    _Written("importance", "float8"),
    _Written("expires_at", "timestamptz"),
    _Written("created_at", "timestamptz", "coalesce(CAST({v} AS timestamptz), now())"),
    # True from when it was stored, unless the caller says since when.
    _Written("valid_from", "timestamptz",
             "coalesce(CAST({v} AS timestamptz), CAST({p}created_at AS timestamptz), now())"),
    _Written("embedding", "text", "CAST({v} AS vector)"),
    _Written("embedding_model", "text"),
    _Written("about", "text",
             "nullif(ARRAY(SELECT jsonb_array_elements_text(CAST({v} AS jsonb))), '{{}}')"),
)
# What storing under an existing key with the same content replaces (its metadata,
# say); identity, creation and validity stay.
_REPLACED = tuple(c for c in _WRITTEN
                  if c.name not in ("agent_id", "key", "created_at", "valid_from"))
_NAMES = ", ".join(c.name for c in _WRITTEN)


def _value(column: _Written, prefix: str) -> str:
    return column.value.format(v=f"{prefix}{column.name}", p=prefix)


def _values(prefix: str) -> str:
    return ", ".join(_value(c, prefix) for c in _WRITTEN)


_INSERT = text(f"""
INSERT INTO memories ({_NAMES}, updated_at)
SELECT {_values(":")}, now()
ON CONFLICT DO NOTHING
RETURNING id, created_at, valid_from
""")
# Many rows in one statement: per-row statements cost more than the row itself (parse,
# bind, round trip) once the embedding is done. ORDER BY keeps the input order, so of
# two rows with the same content the first is stored, as row by row.
_ARRAYS = ", ".join(f"CAST(:{c.name} AS {c.sql_type}[])" for c in _WRITTEN)
_BULK_INSERT = text(f"""
INSERT INTO memories ({_NAMES}, updated_at)
SELECT {_values("r.")}, now()
FROM unnest({_ARRAYS}) WITH ORDINALITY AS r({_NAMES}, n)
ORDER BY r.n
ON CONFLICT DO NOTHING
RETURNING id, content_hash, created_at
""")
_UPDATE_BY_KEY = text(f"""
UPDATE memories SET {", ".join(f"{c.name} = {_value(c, ':')}" for c in _REPLACED)},
    confidence = 1.0, archived_at = NULL, updated_at = now()
WHERE id = :id
""")
# Only current memories deduplicate and hold keys (the partial unique indexes).
_BY_HASH = text("""SELECT id FROM memories
                   WHERE agent_id = :agent_id AND content_hash = :h AND valid_to IS NULL""")
_BY_HASHES = text("""SELECT content_hash, id FROM memories
                     WHERE agent_id = :agent_id AND content_hash = ANY(:hashes)
                       AND valid_to IS NULL""")
_BY_KEY = text("""SELECT id, content_hash, metadata, created_at FROM memories
                  WHERE agent_id = :agent_id AND key = :key AND valid_to IS NULL FOR UPDATE""")
_SET_CONTENT = text("""
UPDATE memories SET content = :content, content_hash = :h,
    embedding = CAST(:vector AS vector), embedding_model = :model,
    importance = coalesce(:importance, importance), updated_at = now()
WHERE id = :id
""")


# --- preparing ------------------------------------------------------------------------


def embed_texts(embedder: Embedder, contents: Sequence[str]) -> list[str]:
    """The embeddings of ``contents`` in pgvector's text form, in one batch. Called
    outside any transaction: embedding is the slow part of a write."""
    return [to_pgvector(vector) for vector in embedder.embed(list(contents))] if contents else []


def prepare(embedder: Embedder, pairs: Sequence[tuple[str, StoreItem]], *,
            actor: str | None = None) -> list[PreparedRow]:
    """(agent id, validated item) pairs as rows to write: every content embedded in one
    pass, category and importance defaulted from the content. ``actor``: who stores them,
    as versions name it."""
    vectors = embed_texts(embedder, [item.content for _, item in pairs])
    return [_prepared(agent_id, item, vector, embedder.name, actor)
            for (agent_id, item), vector in zip(pairs, vectors, strict=True)]


def _prepared(agent_id: str, item: StoreItem, vector: str, model: str,
              actor: str | None) -> PreparedRow:
    category = item.category or classify.classify(item.content).category
    importance = item.importance
    if importance is None:
        importance = classify.importance(item.content, item.role, category)
    return PreparedRow(item, {
        "agent_id": agent_id, "content": item.content,
        "content_hash": content_hash(item.content), "role": item.role,
        "session_id": item.session_id, "key": item.key, "category": category,
        "tags": json.dumps(list(item.tags)), "source": item.source,
        "metadata": json.dumps(item.metadata or {}), "importance": importance,
        "expires_at": item.expires_at, "created_at": item.created_at,
        "valid_from": item.valid_from, "embedding": vector, "embedding_model": model,
        "about": json.dumps(asking.about(item.content)),
    }, actor)


# --- writing --------------------------------------------------------------------------


def write(session: Session, rows: Sequence[PreparedRow]) -> list[StoreResult]:
    """Insert or upsert each row inside the caller's transaction; results in the order
    of ``rows``, which may belong to several agents (written agent by agent)."""
    by_agent: dict[str, list[int]] = {}
    for index, row in enumerate(rows):
        by_agent.setdefault(row.agent_id, []).append(index)
    results: list[StoreResult | None] = [None] * len(rows)
    for agent_id, indexes in by_agent.items():
        written = _write_agent(session, agent_id, [rows[i] for i in indexes])
        for index, result in zip(indexes, written, strict=True):
            results[index] = result
    return [result for result in results if result is not None]


def set_content(session: Session, memory_id: uuid.UUID, content: str, vector: str, *,
                model: str, importance: float | None = None) -> None:
    """Rewrite a memory's content, hash and embedding (of ``model``) in place
    (maintenance edits), optionally its importance. Raises ``IntegrityError`` if the
    agent already holds that content under another memory: dedup wins."""
    session.execute(_SET_CONTENT, {"content": content, "h": content_hash(content),
                                   "vector": vector, "model": model,
                                   "importance": importance, "id": memory_id})


def _write_agent(session: Session, agent_id: str,
                 rows: Sequence[PreparedRow]) -> list[StoreResult]:
    """One agent's rows; without keys they go in as one statement."""
    if not any(row.item.key for row in rows):
        written = _write_plain_bulk(session, agent_id, rows)
    else:
        written = [_write_keyed(session, row) if row.item.key else _write_plain(session, row)
                   for row in rows]
    refs: dict[str, list[dict[str, Any]]] = {}
    for row, (result, created_at) in zip(rows, written, strict=True):
        if result.stored and row.item.session_id:
            ts = (created_at or clock.now()).isoformat()
            refs.setdefault(row.item.session_id, []).append(
                sessions.message_ref(str(result.id), row.item.role, ts))
    for session_id, session_refs in refs.items():
        sessions.append(session, agent_id, session_id, session_refs)
    return [result for result, _ in written]


def _write_plain_bulk(session: Session, agent_id: str, rows: Sequence[PreparedRow]
                      ) -> list[tuple[StoreResult, datetime | None]]:
    """``_write_plain`` for many rows of one agent, in two statements: the insert, then
    the ids of the duplicates it skipped. A row whose duplicate vanished in between (a
    concurrent delete) goes through ``_write_plain``."""
    columns = {c.name: [row.values[c.name] for row in rows] for c in _WRITTEN}
    inserted = {r.content_hash: (r.id, r.created_at)
                for r in session.execute(_BULK_INSERT, columns)}
    skipped = set(columns["content_hash"]) - inserted.keys()
    existing = dict(session.execute(_BY_HASHES, {
        "agent_id": agent_id, "hashes": list(skipped)}).all()) if skipped else {}
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
        existing = session.execute(_BY_HASH, {"agent_id": row.agent_id,
                                              "h": row.values["content_hash"]}).first()
        if existing is not None:
            return StoreResult(id=existing.id, stored=False, duplicate=True), None
    raise RuntimeError("memory insert kept conflicting without a visible duplicate")


def _write_keyed(session: Session, row: PreparedRow) -> tuple[StoreResult, datetime | None]:
    """Storing under a key the agent holds with other content makes a new version: a new
    memory, the old one superseded (cause ``key``). The same content with other metadata
    is an update in place (a key's record can change beside its text), kept as a version."""
    params = {"agent_id": row.agent_id, "key": row.values["key"]}
    for _ in range(3):
        current = session.execute(_BY_KEY, params).first()
        if current is None:
            inserted = session.execute(_INSERT, row.values).first()
            if inserted is not None:
                return StoreResult(id=inserted.id, stored=True, duplicate=False), \
                    inserted.created_at
            continue  # lost a race on the key, or the content exists: look again
        if current.content_hash == row.values["content_hash"]:
            if current.metadata == json.loads(row.values["metadata"]):
                return StoreResult(id=current.id, stored=False, duplicate=True), None
            return _update_in_place(session, current.id, row), None
        return _new_version(session, current.id, current.created_at, row)
    existing = session.execute(_BY_HASH, {"agent_id": row.agent_id,
                                          "h": row.values["content_hash"]}).first()
    if existing is None:
        raise RuntimeError("keyed insert kept conflicting without a visible duplicate")
    return StoreResult(id=existing.id, stored=False, duplicate=True), None


def _new_version(session: Session, old_id: uuid.UUID, created_at: datetime, row: PreparedRow
                 ) -> tuple[StoreResult, datetime | None]:
    """The key's new content as a new memory superseding ``old_id``: created when the
    key was (as an update in place kept it), true from now unless the caller says. If the
    content is another current memory's already, dedup wins and the key stays put."""
    values = {**row.values, "created_at": row.values["created_at"] or created_at,
              "valid_from": row.values["valid_from"] or clock.now()}
    try:
        with session.begin_nested():
            supersession.release_key(session, row.agent_id, old_id, actor=row.actor)
            inserted = session.execute(_INSERT, values).first()
            if inserted is None:
                raise _Taken
            supersession.replace_key(session, row.agent_id, old_id, inserted.id,
                                     actor=row.actor)
    except _Taken:
        existing = session.execute(_BY_HASH, {"agent_id": row.agent_id,
                                              "h": row.values["content_hash"]}).one()
        return StoreResult(id=existing.id, stored=False, duplicate=True), None
    return StoreResult(id=inserted.id, stored=True, duplicate=False,
                       superseded=(old_id,)), inserted.created_at


class _Taken(Exception):
    """The new version's content is held by another current memory (rolls back)."""


def _update_in_place(session: Session, memory_id: uuid.UUID, row: PreparedRow) -> StoreResult:
    versions.record(session, [memory_id], "updated", actor=row.actor, agent_id=row.agent_id)
    session.execute(_UPDATE_BY_KEY, {**row.values, "id": memory_id})
    return StoreResult(id=memory_id, stored=True, duplicate=False)
