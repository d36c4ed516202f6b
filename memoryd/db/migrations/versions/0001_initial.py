"""Initial schema: memories, sessions, knowledge graph, links, maintenance audit.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_UP = """
CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE EXTENSION IF NOT EXISTS btree_gin;

CREATE TABLE memories (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    agent_id         varchar(255) NOT NULL,
    content          text NOT NULL,
    content_hash     varchar(64) NOT NULL,
    role             varchar(16) CHECK (role IN ('user', 'assistant', 'system', 'tool')),
    session_id       varchar(512),
    key              varchar(512),
    category         varchar(32) NOT NULL CHECK (category IN ('fact', 'preference', 'decision',
                         'task', 'context', 'event', 'reflection', 'summary')),
    tags             text[] NOT NULL DEFAULT '{}',
    source           varchar(512),
    metadata         jsonb NOT NULL DEFAULT '{}'::jsonb,
    importance       double precision NOT NULL CHECK (importance BETWEEN 0 AND 1),
    confidence       double precision NOT NULL DEFAULT 1.0 CHECK (confidence BETWEEN 0 AND 1),
    pinned           boolean NOT NULL DEFAULT false,
    access_count     integer NOT NULL DEFAULT 0,
    last_accessed_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz,
    archived_at      timestamptz,
    embedding        vector(384) NOT NULL,
    -- capped so a 512 KB memory can never exceed tsvector's 1 MB limit
    tsv              tsvector GENERATED ALWAYS AS
                         (to_tsvector('english'::regconfig, left(content, 100000))) STORED
);
CREATE UNIQUE INDEX uq_memories_agent_hash ON memories (agent_id, content_hash);
CREATE UNIQUE INDEX uq_memories_agent_key ON memories (agent_id, key) WHERE key IS NOT NULL;
CREATE INDEX ix_memories_embedding_hnsw ON memories
    USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64);
-- btree_gin lets one GIN index answer "this agent AND these words" together.
CREATE INDEX ix_memories_agent_tsv ON memories USING gin (agent_id, tsv);
CREATE INDEX ix_memories_agent_created ON memories (agent_id, created_at);
CREATE INDEX ix_memories_agent_accessed ON memories (agent_id, last_accessed_at);
CREATE INDEX ix_memories_expires ON memories (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX ix_memories_updated ON memories (updated_at);

CREATE TABLE sessions (
    agent_id        varchar(255) NOT NULL,
    session_id      varchar(512) NOT NULL,
    messages        jsonb NOT NULL DEFAULT '[]'::jsonb,
    message_count   integer NOT NULL DEFAULT 0,
    summary         text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    compacted_at    timestamptz,
    consolidated_at timestamptz,
    indexed_at      timestamptz,
    repaired_at     timestamptz,
    PRIMARY KEY (agent_id, session_id)
);
CREATE INDEX ix_sessions_updated ON sessions (updated_at);

CREATE TABLE kg_entities (
    agent_id   varchar(255) NOT NULL,
    entity_id  varchar(512) NOT NULL,
    type       varchar(128) NOT NULL,
    attributes jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (agent_id, entity_id)
);

CREATE TABLE kg_relations (
    agent_id   varchar(255) NOT NULL,
    source     varchar(512) NOT NULL,
    target     varchar(512) NOT NULL,
    type       varchar(256) NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (agent_id, source, target, type)
);

CREATE TABLE memory_links (
    agent_id   varchar(255) NOT NULL,
    source_id  uuid NOT NULL,
    target_id  uuid NOT NULL,
    kind       varchar(32) NOT NULL CHECK (kind IN ('related', 'derived_from', 'supports',
                   'contradicts')),
    score      double precision NOT NULL DEFAULT 1.0,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_id, target_id, kind)
);
CREATE INDEX ix_memory_links_target ON memory_links (target_id);
CREATE INDEX ix_memory_links_agent ON memory_links (agent_id);

CREATE TABLE maintenance_runs (
    id          bigserial PRIMARY KEY,
    job         varchar(64) NOT NULL,
    agent_id    varchar(255),
    params      jsonb NOT NULL DEFAULT '{}'::jsonb,
    dry_run     boolean NOT NULL DEFAULT false,
    status      varchar(16) NOT NULL CHECK (status IN ('running', 'ok', 'failed', 'skipped')),
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    stats       jsonb NOT NULL DEFAULT '{}'::jsonb,
    error       text
);
CREATE INDEX ix_maintenance_runs_job_started ON maintenance_runs (job, started_at DESC);

CREATE TABLE evicted_memories (
    eviction_id bigserial PRIMARY KEY,
    memory_id   uuid NOT NULL,
    agent_id    varchar(255) NOT NULL,
    reason      varchar(64) NOT NULL,
    run_id      bigint,
    evicted_at  timestamptz NOT NULL DEFAULT now(),
    data        jsonb NOT NULL,
    embedding   vector(384)
);
CREATE INDEX ix_evicted_memory_id ON evicted_memories (memory_id);
CREATE INDEX ix_evicted_agent ON evicted_memories (agent_id, evicted_at);
CREATE INDEX ix_evicted_at ON evicted_memories (evicted_at);
"""

_DOWN = """
DROP TABLE IF EXISTS evicted_memories, maintenance_runs, memory_links, kg_relations,
    kg_entities, sessions, memories;
"""


def upgrade() -> None:
    op.execute(_UP)


def downgrade() -> None:
    op.execute(_DOWN)
