"""Compacted messages keep their places in the positions recall reads.

``compact_sessions`` replaces a session's oldest messages by one summary message. The
messages stay (archived or current memories of their own), but they left the list, and
so ``message_ids``, from which recall reads a candidate's session neighbours: a compacted
turn lost the lift its neighbours gave it (LoCoMo recall@10 0.758 to 0.753 after
compaction, bench/README.md). ``compacted_ids`` keeps the ids compaction took out, in
order, and the trigger puts them before the listed ones.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def _trigger(expression: str, columns: str) -> None:
    op.execute(f"""
        CREATE OR REPLACE FUNCTION memoryd_sessions_message_ids() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            NEW.message_ids := {expression};
            RETURN NEW;
        END $$""")
    op.execute("DROP TRIGGER IF EXISTS sessions_message_ids ON sessions")
    op.execute(f"""
        CREATE TRIGGER sessions_message_ids
        BEFORE INSERT OR UPDATE OF {columns} ON sessions
        FOR EACH ROW EXECUTE FUNCTION memoryd_sessions_message_ids()""")


def upgrade() -> None:
    op.execute("ALTER TABLE sessions "
               "ADD COLUMN IF NOT EXISTS compacted_ids text[] NOT NULL DEFAULT '{}'")
    _trigger("NEW.compacted_ids || memoryd_message_ids(NEW.messages)",
             "messages, compacted_ids")


def downgrade() -> None:
    _trigger("memoryd_message_ids(NEW.messages)", "messages")
    op.execute("ALTER TABLE sessions DROP COLUMN IF EXISTS compacted_ids")
    op.execute("UPDATE sessions SET message_ids = memoryd_message_ids(messages)")
