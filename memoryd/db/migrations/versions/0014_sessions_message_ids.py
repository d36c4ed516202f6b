"""Sessions keep their message ids as a text array beside the message list.

Recall reads where each candidate sits in its session, and the ids next to the seeds'
(``recall_sql``). Read from the ``messages`` JSONB, that meant parsing every message
object of each such session at every recall: 0.21 ms for a session of 1,000 messages,
against 0.10 ms to unnest the array, paid for each session a recall touches (and
0.15-0.24 ms per recall on the 1M benchmark's 30-message sessions, bench/README.md).
``message_ids`` is the ids in list order, generated from ``messages`` by PostgreSQL on
every write of it (no writer can forget it), so recall unnests a plain array instead.
The array costs an append about 0.25 microseconds per message in the session (1.2 ms at
5,000 messages, which also rewrite their JSONB).

An element that is not an object, or has no ``id``, keeps its place as NULL: positions
stay those of ``messages``. Adding the column rewrites the sessions table once (one row
per session, far fewer than memories) under an exclusive lock.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE OR REPLACE FUNCTION memoryd_message_ids(messages jsonb)
        RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE
        RETURN ARRAY(
            SELECT e.msg ->> 'id'
            FROM jsonb_array_elements(CASE WHEN jsonb_typeof(messages) = 'array'
                                           THEN messages ELSE CAST('[]' AS jsonb) END)
                 WITH ORDINALITY AS e(msg, n)
            ORDER BY e.n)""")
    op.execute("ALTER TABLE sessions ADD COLUMN IF NOT EXISTS message_ids text[] "
               "GENERATED ALWAYS AS (memoryd_message_ids(messages)) STORED")
    # The planner sizes recall's unnest of the array by its statistics: without them it
    # planned the 1,000-memory agent's candidate query 0.5 ms slower until the next
    # automatic analyze.
    op.execute("ANALYZE sessions")


def downgrade() -> None:
    op.execute("ALTER TABLE sessions DROP COLUMN IF EXISTS message_ids")
    op.execute("DROP FUNCTION IF EXISTS memoryd_message_ids(jsonb)")
