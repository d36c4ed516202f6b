"""Each memory records the embedding model of its vector, so a store can move to another
model (the ``reembed`` job) while recall keeps comparing a query only with vectors of
the model that embedded it.

Rows already stored get the model configured when the migration runs (the only model
that can have embedded them). The column is added with that value as its default,
which PostgreSQL keeps in the catalogue instead of rewriting the table, and the default
is then dropped: every writer names the model. ``evicted_memories`` gets the same
column for the memories evicted before this revision (later evictions keep the model in
their ``data``, with every other column).

The index (model, agent, id) answers which models an agent's memories use with a few
index probes on every recall, and lets ``reembed`` walk one model's rows in order.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    from memoryd.config import get_settings
    from memoryd.memory.embeddings import configured_model

    model = configured_model(get_settings()).replace("'", "''")
    for table in ("memories", "evicted_memories"):
        op.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS embedding_model text "
                   f"{'NOT NULL ' if table == 'memories' else ''}DEFAULT '{model}'")
        op.execute(f"ALTER TABLE {table} ALTER COLUMN embedding_model DROP DEFAULT")
    op.execute("CREATE INDEX IF NOT EXISTS ix_memories_model_agent "
               "ON memories (embedding_model, agent_id, id)")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memories_model_agent")
    for table in ("memories", "evicted_memories"):
        op.execute(f"ALTER TABLE {table} DROP COLUMN IF EXISTS embedding_model")
