"""Let recall's access bumps be HOT updates: ``ix_memories_agent_accessed`` becomes a
BRIN (summarizing) index.

Every recall increments ``access_count`` and sets ``last_accessed_at`` on the rows it
returns. With a btree on ``last_accessed_at`` each of those updates was non-HOT: the
new row version went into every index, the HNSW graph included (a graph insertion
per returned row), which made the access bump the slowest part of recall. PostgreSQL
16+ keeps an update HOT when only summarizing (BRIN) indexes cover the changed
columns, and the fillfactor of 0002 leaves the page room.

No query needs the btree: maintenance filters on ``coalesce(last_accessed_at,
created_at)``, which it could not serve. The name stays, so tooling that looks for it
keeps working.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memories_agent_accessed")
    op.execute("CREATE INDEX ix_memories_agent_accessed ON memories "
               "USING brin (agent_id, last_accessed_at)")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memories_agent_accessed")
    op.execute("CREATE INDEX ix_memories_agent_accessed ON memories "
               "(agent_id, last_accessed_at)")
