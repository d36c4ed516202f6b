"""The PostgreSQL schema as SQLAlchemy 2.x models.

The Alembic migrations in ``memoryd/db/migrations`` are the source of truth
for DDL (extensions, generated columns, HNSW/GIN indexes); these models mirror
them for typed queries. ``tests/test_migrations.py`` checks the two agree.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    BigInteger,
    Boolean,
    Computed,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TSVECTOR, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

EMBEDDING_DIM = 384


class Base(DeclarativeBase):
    pass


def _now() -> Any:
    return mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())


class MemoryRow(Base):
    __tablename__ = "memories"

    id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), primary_key=True, server_default=text("gen_random_uuid()"))
    agent_id: Mapped[str] = mapped_column(String(255), nullable=False)
    content: Mapped[str] = mapped_column(Text, nullable=False)
    content_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    role: Mapped[str | None] = mapped_column(String(16))
    session_id: Mapped[str | None] = mapped_column(String(512))
    key: Mapped[str | None] = mapped_column(String(512))
    category: Mapped[str] = mapped_column(String(32), nullable=False)
    tags: Mapped[list[str]] = mapped_column(
        ARRAY(Text), nullable=False, server_default=text("'{}'::text[]"))
    source: Mapped[str | None] = mapped_column(String(512))
    meta: Mapped[dict[str, Any]] = mapped_column(
        "metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb"))
    importance: Mapped[float] = mapped_column(Float, nullable=False)
    confidence: Mapped[float] = mapped_column(Float, nullable=False, server_default=text("1.0"))
    pinned: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("false"))
    access_count: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    last_accessed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    archived_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    embedding: Mapped[Any] = mapped_column(Vector(EMBEDDING_DIM), nullable=False)
    # The model that embedded ``embedding`` (migration 0012; embeddings.MODELS).
    embedding_model: Mapped[str] = mapped_column(Text, nullable=False)
    tsv: Mapped[Any] = mapped_column(
        TSVECTOR, Computed("to_tsvector('english'::regconfig, left(content, 100000))",
                           persisted=True), nullable=True)
    # md5 of the content as deduplicate compares it (migration 0004); NULL when empty.
    content_norm_hash: Mapped[uuid.UUID | None] = mapped_column(
        UUID(as_uuid=True), Computed(
            "CAST(md5(nullif(btrim(regexp_replace(lower(content), "
            "'[[:punct:][:space:]]+', ' ', 'g')), '')) AS uuid)", persisted=True),
        nullable=True)
    # Validity in time (migration 0015): current while ``valid_to`` is NULL; a NULL
    # ``valid_from`` (rows from before 0015) reads as ``created_at``.
    valid_from: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    valid_to: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    superseded_by: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    # What it states of whom: "names|relations|attribute" (memory.asking; migration 0015).
    about: Mapped[list[str] | None] = mapped_column(ARRAY(Text))

    __table_args__ = (
        # Only current memories are deduplicated and keyed (migration 0015).
        Index("uq_memories_agent_hash", "agent_id", "content_hash", unique=True,
              postgresql_where=text("valid_to IS NULL")),
        Index("uq_memories_agent_key", "agent_id", "key", unique=True,
              postgresql_where=text("key IS NOT NULL AND valid_to IS NULL")),
        Index("ix_memories_agent_superseded_by", "agent_id", "superseded_by",
              postgresql_where=text("superseded_by IS NOT NULL")),
        Index("ix_memories_agent_created", "agent_id", "created_at"),
        # BRIN, so recall's access bumps stay HOT updates (migration 0003).
        Index("ix_memories_agent_accessed", "agent_id", "last_accessed_at",
              postgresql_using="brin"),
        Index("ix_memories_updated", "updated_at"),
        Index("ix_memories_agent_norm_hash", "agent_id", "content_norm_hash"),
        Index("ix_memories_expires", "expires_at",
              postgresql_where=text("expires_at IS NOT NULL")),
        # Metadata filters (migration 0011).
        # Which models an agent's vectors come from; reembed's walk (migration 0012).
        Index("ix_memories_model_agent", "embedding_model", "agent_id", "id"),
        Index("ix_memories_metadata", "metadata", postgresql_using="gin",
              postgresql_ops={"metadata": "jsonb_path_ops"}),
    )


class SessionRow(Base):
    __tablename__ = "sessions"

    agent_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    session_id: Mapped[str] = mapped_column(String(512), primary_key=True)
    # Ordered message references: [{"id": uuid, "role": str|None, "ts": iso8601}, ...]
    messages: Mapped[list[dict[str, Any]]] = mapped_column(
        JSONB, nullable=False, server_default=text("'[]'::jsonb"))
    message_count: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    summary: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()
    compacted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    consolidated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    indexed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    repaired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The messages' ids in list order, for recall's session positions; a trigger sets
    # them from ``messages`` on every write of it (migration 0014).
    message_ids: Mapped[list[str | None] | None] = mapped_column(ARRAY(Text))
    # The ids compaction took out of ``messages``, in order: the trigger puts them first in
    # ``message_ids``, so compacted turns keep their neighbours (migration 0016).
    compacted_ids: Mapped[list[str]] = mapped_column(
        ARRAY(Text), nullable=False, server_default=text("'{}'::text[]"))


class EntityRow(Base):
    __tablename__ = "kg_entities"

    agent_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    entity_id: Mapped[str] = mapped_column(String(512), primary_key=True)
    type: Mapped[str] = mapped_column(String(128), nullable=False)
    attributes: Mapped[dict[str, Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'{}'::jsonb"))
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()


class RelationRow(Base):
    __tablename__ = "kg_relations"

    agent_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    source: Mapped[str] = mapped_column(String(512), primary_key=True)
    target: Mapped[str] = mapped_column(String(512), primary_key=True)
    type: Mapped[str] = mapped_column(String(256), primary_key=True)
    created_at: Mapped[datetime] = _now()
    # An edge's validity (migration 0015), as a memory's: current while valid_to is NULL.
    valid_from: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    valid_to: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class LinkRow(Base):
    __tablename__ = "memory_links"

    agent_id: Mapped[str] = mapped_column(String(255), nullable=False)
    source_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    target_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32), primary_key=True)
    score: Mapped[float] = mapped_column(Float, nullable=False, server_default=text("1.0"))
    created_at: Mapped[datetime] = _now()


class SupersessionRow(Base):
    """One decision that a memory replaces another, or a candidate awaiting review: its
    cause (explicit, key, judge, reconcile), judge, confidence and who made it."""

    __tablename__ = "memory_supersessions"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    agent_id: Mapped[str] = mapped_column(String(255), nullable=False)
    old_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    new_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    cause: Mapped[str] = mapped_column(String(16), nullable=False)
    judge: Mapped[str | None] = mapped_column(String(32))
    attribute: Mapped[str | None] = mapped_column(String(32))
    confidence: Mapped[float] = mapped_column(Float, nullable=False, server_default=text("1.0"))
    status: Mapped[str] = mapped_column(String(16), nullable=False)
    actor: Mapped[str | None] = mapped_column(String(255))
    decided_at: Mapped[datetime] = _now()
    reviewed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    reviewed_by: Mapped[str | None] = mapped_column(String(255))

    __table_args__ = (
        Index("uq_supersessions_pair", "agent_id", "old_id", "new_id", unique=True),
        Index("ix_supersessions_new", "agent_id", "new_id"),
        Index("ix_supersessions_review", "agent_id", "id",
              postgresql_where=text("status = 'review'")),
    )


class VersionRow(Base):
    """A memory's row as it was before one change, with the change's cause and actor."""

    __tablename__ = "memory_versions"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    agent_id: Mapped[str] = mapped_column(String(255), nullable=False)
    memory_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    changed_at: Mapped[datetime] = _now()
    cause: Mapped[str] = mapped_column(String(32), nullable=False)
    actor: Mapped[str | None] = mapped_column(String(255))
    data: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)

    __table_args__ = (Index("ix_versions_memory", "agent_id", "memory_id", "id"),)


class WorkingPromotionRow(Base):
    """A working-memory message promoted into long-term memory (migration 0017): the
    ledger that makes promotion happen once however often it is attempted."""

    __tablename__ = "working_promotions"

    agent_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    thread_id: Mapped[str] = mapped_column(String(512), primary_key=True)
    generation: Mapped[str] = mapped_column(String(64), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    promoted_at: Mapped[datetime] = _now()


class MaintenanceRunRow(Base):
    __tablename__ = "maintenance_runs"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    job: Mapped[str] = mapped_column(String(64), nullable=False)
    agent_id: Mapped[str | None] = mapped_column(String(255))
    params: Mapped[dict[str, Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'{}'::jsonb"))
    dry_run: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("false"))
    status: Mapped[str] = mapped_column(String(16), nullable=False)  # running/ok/failed/skipped
    started_at: Mapped[datetime] = _now()
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    stats: Mapped[dict[str, Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'{}'::jsonb"))
    error: Mapped[str | None] = mapped_column(Text)


class EvictedMemoryRow(Base):
    __tablename__ = "evicted_memories"

    eviction_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    memory_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    agent_id: Mapped[str] = mapped_column(String(255), nullable=False)
    reason: Mapped[str] = mapped_column(String(64), nullable=False)
    run_id: Mapped[int | None] = mapped_column(BigInteger)
    evicted_at: Mapped[datetime] = _now()
    # The memory row as JSON (every column but the embedding and tsvector).
    data: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    embedding: Mapped[Any] = mapped_column(Vector(EMBEDDING_DIM), nullable=True)
    # Set only for memories evicted before migration 0012; later ones keep it in ``data``.
    embedding_model: Mapped[str | None] = mapped_column(Text)


class RestoredEvictionRow(Base):
    """An eviction that was restored, and as which memory: lets a redelivered restore
    by eviction number answer with that memory (``maintenance.restoring``)."""

    __tablename__ = "restored_evictions"

    eviction_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    memory_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    restored_at: Mapped[datetime] = _now()


class AgentTermStatsRow(Base):
    """Per large agent: how many memories its lexeme counts (``agent_terms``) cover."""

    __tablename__ = "agent_term_stats"

    agent_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    memories: Mapped[int] = mapped_column(Integer, nullable=False)
    counted_at: Mapped[datetime] = _now()


class AgentTermRow(Base):
    """A lexeme held by more than 0.2 % of a large agent's memories, and in how many."""

    __tablename__ = "agent_terms"

    agent_id: Mapped[str] = mapped_column(
        String(255), ForeignKey("agent_term_stats.agent_id", ondelete="CASCADE"),
        primary_key=True)
    lexeme: Mapped[str] = mapped_column(Text, primary_key=True)
    df: Mapped[int] = mapped_column(Integer, nullable=False)


class ApiKeyRow(Base):
    """A front-door key: the hash of its secret, its agents and its permissions."""

    __tablename__ = "api_keys"

    id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), primary_key=True, server_default=text("gen_random_uuid()"))
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    secret_hash: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    hint: Mapped[str] = mapped_column(String(16), nullable=False)
    agents: Mapped[list[str]] = mapped_column(
        ARRAY(Text), nullable=False, server_default=text("'{}'::text[]"))
    agent_prefixes: Mapped[list[str]] = mapped_column(
        ARRAY(Text), nullable=False, server_default=text("'{}'::text[]"))
    permissions: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False)
    created_at: Mapped[datetime] = _now()
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class DeadLetterRow(Base):
    """A task message delivered too many times without finishing, kept to retry or drop."""

    __tablename__ = "dead_letters"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(String(255), nullable=False, unique=True)
    task_name: Mapped[str] = mapped_column(String(255), nullable=False)
    queue: Mapped[str] = mapped_column(String(255), nullable=False)
    agent_id: Mapped[str | None] = mapped_column(String(255))
    deliveries: Mapped[int] = mapped_column(Integer, nullable=False)
    args: Mapped[list[Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'[]'::jsonb"))
    kwargs: Mapped[dict[str, Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'{}'::jsonb"))
    created_at: Mapped[datetime] = _now()
