"""The ledger of working-memory messages promoted into long-term memory.

A thread's messages are written into its session by whichever worker promotes it; a
worker killed after its commit but before Redis heard of it leaves the thread to another,
which must not write them twice. Each promoted message's (agent, thread, generation,
seq) is inserted in the same transaction as the message itself: a second attempt finds
them and writes nothing again.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE IF NOT EXISTS working_promotions (
            agent_id varchar(255) NOT NULL,
            thread_id varchar(512) NOT NULL,
            generation varchar(64) NOT NULL,
            seq bigint NOT NULL,
            promoted_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (agent_id, thread_id, generation, seq))
    """)


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS working_promotions")
