"""Serve recall's and list's metadata filters from an index.

``metadata @> '{"project": "atlas"}'`` (an equality filter on metadata keys) is answered
by a GIN index over the metadata's key/value paths (``jsonb_path_ops``: smaller than the
default operator class, and containment is the only operator memoryd uses). The planner
intersects it with the agent's btree, so a filter on a large agent reads the matching
rows only. Memories without metadata (``{}``) add no entries. Building it reads the whole
table and blocks writes meanwhile.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX IF NOT EXISTS ix_memories_metadata ON memories "
               "USING gin (metadata jsonb_path_ops)")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memories_metadata")
