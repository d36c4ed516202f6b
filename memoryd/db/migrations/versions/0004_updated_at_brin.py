"""Index ``updated_at`` with BRIN, so maintenance updates stay HOT.

Merging (consolidate, deduplicate) sets ``updated_at`` on the surviving memory. With a
btree on that column every such update re-inserted the row into every index, the HNSW
graph included (milliseconds per row). A BRIN index is summarizing: PostgreSQL 16+ keeps
those updates HOT. "Changed since the last run" scans remain cheap: ``updated_at`` grows
with the table's physical order.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memories_updated")
    op.execute("CREATE INDEX ix_memories_updated ON memories USING brin (updated_at)")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memories_updated")
    op.execute("CREATE INDEX ix_memories_updated ON memories (updated_at)")
