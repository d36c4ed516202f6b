"""Keep recall's full-text GIN index free of a pending list (``fastupdate = off``).

With GIN's default ``fastupdate``, new entries go to a pending list that is merged
into the index only by vacuum, or once it passes ``gin_pending_list_limit`` (4 MB):
every search reads the whole list meanwhile, which grows with every agent's writes.
Without the list each insert updates the index directly, a cost small beside the
memory's embedding (bench/HISTORY.md has the figures).

Merges what is pending now, so the first recalls after the upgrade do not pay for it.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER INDEX ix_memories_agent_lexemes SET (fastupdate = off)")
    op.execute("SELECT gin_clean_pending_list('ix_memories_agent_lexemes')")


def downgrade() -> None:
    op.execute("ALTER INDEX ix_memories_agent_lexemes RESET (fastupdate)")
