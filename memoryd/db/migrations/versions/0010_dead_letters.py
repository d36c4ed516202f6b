"""Dead letters: task messages delivered too often without finishing (poison messages).

A worker that receives a message for the (``MEMORYD_DEAD_LETTER_AFTER`` + 1)-th time
records it here instead of running it again, and acknowledges it. ``memoryd dlq``
lists, re-sends or drops them. The body keeps the task's arguments, so a retry sends
exactly what the caller sent.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE IF NOT EXISTS dead_letters (
            id bigserial PRIMARY KEY,
            task_id varchar(255) NOT NULL UNIQUE,
            task_name varchar(255) NOT NULL,
            queue varchar(255) NOT NULL,
            agent_id varchar(255),
            deliveries integer NOT NULL,
            args jsonb NOT NULL DEFAULT '[]',
            kwargs jsonb NOT NULL DEFAULT '{}',
            created_at timestamptz NOT NULL DEFAULT now())""")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS dead_letters")
