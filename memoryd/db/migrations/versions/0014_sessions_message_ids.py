"""Sessions keep their message ids as a text array beside the message list.

Recall reads where each candidate sits in its session, and the ids next to the seeds'
(``recall_sql``). Read from the ``messages`` JSONB, that meant parsing every message
object of each session a recall touches, at every recall. ``message_ids`` is the ids in
list order, generated from ``messages`` by PostgreSQL on every write of it (no writer can
forget it), so recall unnests a plain array instead, for about half the time; an append
pays for it in proportion to the session's length, as it already does to rewrite the
JSONB (both measured in docs/architecture.md, Storage).

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
    # chose slower plans for small agents' candidate queries until the next automatic
    # analyze (bench/README.md, recall latency).
    op.execute("ANALYZE sessions")


def downgrade() -> None:
    op.execute("ALTER TABLE sessions DROP COLUMN IF EXISTS message_ids")
    op.execute("DROP FUNCTION IF EXISTS memoryd_message_ids(jsonb)")
