"""Leave free space in memories' pages so confidence and access updates can be HOT.

An update that cannot stay on its page re-inserts the row into every index,
the HNSW graph included (milliseconds per row); decay touches many rows.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE memories SET (fillfactor = 70)")


def downgrade() -> None:
    op.execute("ALTER TABLE memories RESET (fillfactor)")
