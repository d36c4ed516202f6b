"""Sessions keep their message ids as a text array beside the message list.

Recall reads where each candidate sits in its session, and the ids next to the seeds'
(``recall_sql``). Read from the ``messages`` JSONB, that meant parsing every message
object of each session a recall touches, at every recall. ``message_ids`` is the ids in
list order, set from ``messages`` by a trigger on every insert and on every update of
``messages`` (no writer can forget it), so recall unnests a plain array instead, for
about half the time; an append pays for it in proportion to the session's length, as it
already does to rewrite the JSONB (both measured in docs/architecture.md, Storage).

An element that is not an object, or has no ``id``, keeps its place as NULL: positions
stay those of ``messages``.

A trigger and a nullable column rather than a generated column: adding a stored
generated column rewrites the table under an exclusive lock, which would stop every
recall (they read ``sessions``) for as long as the rewrite takes. Here the column is
added without a rewrite and filled by one UPDATE; until the migration commits, writes to
``sessions`` (stores with a session) wait, reads do not.

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
    op.execute("""
        CREATE OR REPLACE FUNCTION memoryd_sessions_message_ids() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            NEW.message_ids := memoryd_message_ids(NEW.messages);
            RETURN NEW;
        END $$""")
    op.execute("ALTER TABLE sessions ADD COLUMN IF NOT EXISTS message_ids text[]")
    op.execute("DROP TRIGGER IF EXISTS sessions_message_ids ON sessions")
    op.execute("""
        CREATE TRIGGER sessions_message_ids
        BEFORE INSERT OR UPDATE OF messages ON sessions
        FOR EACH ROW EXECUTE FUNCTION memoryd_sessions_message_ids()""")
    op.execute("UPDATE sessions SET message_ids = memoryd_message_ids(messages)")
    # The planner sizes recall's unnest of the array by its statistics: without them it
    # chose slower plans for small agents' candidate queries until the next automatic
    # analyze (bench/README.md, recall latency).
    op.execute("ANALYZE sessions")


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS sessions_message_ids ON sessions")
    op.execute("ALTER TABLE sessions DROP COLUMN IF EXISTS message_ids")
    op.execute("DROP FUNCTION IF EXISTS memoryd_sessions_message_ids()")
    op.execute("DROP FUNCTION IF EXISTS memoryd_message_ids(jsonb)")
