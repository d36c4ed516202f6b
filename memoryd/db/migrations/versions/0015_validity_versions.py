"""Memory that stays true: validity in time, supersession decisions and versions.

A memory is *current* while ``valid_to`` is NULL. Superseding one sets its ``valid_to``
(when its replacement became true) and ``superseded_by``; nothing is deleted. Only current
memories take part in deduplication and keys, so the unique (agent, content hash) and
(agent, key) indexes become partial: a key's older versions keep their key, and a fact
that becomes true again ("moved back to Lisbon") is a new memory, not a duplicate of the
replaced one. ``valid_from`` is NULL for rows written before this revision and reads as
``created_at`` (adding it NULL costs no table rewrite).

``memory_supersessions`` records each decision (its cause, judge, confidence, who made it)
and is the review queue; ``memory_versions`` holds a memory's row as it was before each
change. Knowledge-graph edges get the same validity. ``about`` holds what a memory states
of whom (``memory.asking``), read by recall's ranking.

Building the partial unique indexes reads the whole table and blocks writes meanwhile.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        ALTER TABLE memories ADD COLUMN IF NOT EXISTS valid_from timestamptz,
                             ADD COLUMN IF NOT EXISTS valid_to timestamptz,
                             ADD COLUMN IF NOT EXISTS superseded_by uuid,
                             ADD COLUMN IF NOT EXISTS about text[]""")
    op.execute("DROP INDEX IF EXISTS uq_memories_agent_hash")
    op.execute("CREATE UNIQUE INDEX uq_memories_agent_hash ON memories (agent_id, content_hash) "
               "WHERE valid_to IS NULL")
    op.execute("DROP INDEX IF EXISTS uq_memories_agent_key")
    op.execute("CREATE UNIQUE INDEX uq_memories_agent_key ON memories (agent_id, key) "
               "WHERE key IS NOT NULL AND valid_to IS NULL")
    op.execute("CREATE INDEX IF NOT EXISTS ix_memories_agent_superseded_by "
               "ON memories (agent_id, superseded_by) WHERE superseded_by IS NOT NULL")
    op.execute("""
        CREATE TABLE IF NOT EXISTS memory_supersessions (
            id bigserial PRIMARY KEY,
            agent_id varchar(255) NOT NULL,
            old_id uuid NOT NULL,
            new_id uuid NOT NULL,
            cause varchar(16) NOT NULL,
            judge varchar(32),
            attribute varchar(32),
            confidence double precision NOT NULL DEFAULT 1.0,
            status varchar(16) NOT NULL,
            actor varchar(255),
            decided_at timestamptz NOT NULL DEFAULT now(),
            reviewed_at timestamptz,
            reviewed_by varchar(255))""")
    op.execute("CREATE UNIQUE INDEX IF NOT EXISTS uq_supersessions_pair "
               "ON memory_supersessions (agent_id, old_id, new_id)")
    op.execute("CREATE INDEX IF NOT EXISTS ix_supersessions_new "
               "ON memory_supersessions (agent_id, new_id)")
    op.execute("CREATE INDEX IF NOT EXISTS ix_supersessions_review "
               "ON memory_supersessions (agent_id, id) WHERE status = 'review'")
    op.execute("""
        CREATE TABLE IF NOT EXISTS memory_versions (
            id bigserial PRIMARY KEY,
            agent_id varchar(255) NOT NULL,
            memory_id uuid NOT NULL,
            changed_at timestamptz NOT NULL DEFAULT now(),
            cause varchar(32) NOT NULL,
            actor varchar(255),
            data jsonb NOT NULL)""")
    op.execute("CREATE INDEX IF NOT EXISTS ix_versions_memory "
               "ON memory_versions (agent_id, memory_id, id)")
    op.execute("""
        ALTER TABLE kg_relations ADD COLUMN IF NOT EXISTS valid_from timestamptz,
                                 ADD COLUMN IF NOT EXISTS valid_to timestamptz""")


def downgrade() -> None:
    op.execute("ALTER TABLE kg_relations DROP COLUMN IF EXISTS valid_to, "
               "DROP COLUMN IF EXISTS valid_from")
    op.execute("DROP TABLE IF EXISTS memory_versions")
    op.execute("DROP TABLE IF EXISTS memory_supersessions")
    # Replaced rows would break the full unique indexes: they go with the columns.
    op.execute("DELETE FROM memories WHERE valid_to IS NOT NULL")
    op.execute("DROP INDEX IF EXISTS ix_memories_agent_superseded_by")
    op.execute("DROP INDEX IF EXISTS uq_memories_agent_key")
    op.execute("CREATE UNIQUE INDEX uq_memories_agent_key ON memories (agent_id, key) "
               "WHERE key IS NOT NULL")
    op.execute("DROP INDEX IF EXISTS uq_memories_agent_hash")
    op.execute("CREATE UNIQUE INDEX uq_memories_agent_hash ON memories (agent_id, content_hash)")
    op.execute("ALTER TABLE memories DROP COLUMN IF EXISTS about, "
               "DROP COLUMN IF EXISTS superseded_by, "
               "DROP COLUMN IF EXISTS valid_to, DROP COLUMN IF EXISTS valid_from")
