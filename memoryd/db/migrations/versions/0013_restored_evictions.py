"""Restored evictions: which eviction numbers were put back, as which memory.

Restoring an eviction deletes its row from ``evicted_memories``, so a redelivered
``memoryd.admin.restore`` message naming the eviction number found nothing and failed,
although the first delivery had restored the memory. A row here per restored eviction
lets the task answer such a redelivery with the memory it restored. Rows are small and
kept ``restoring.RESTORED_KEEP_DAYS`` days (a redelivery comes within hours).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE IF NOT EXISTS restored_evictions (
            eviction_id bigint PRIMARY KEY,
            memory_id uuid NOT NULL,
            restored_at timestamptz NOT NULL DEFAULT now())""")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS restored_evictions")
