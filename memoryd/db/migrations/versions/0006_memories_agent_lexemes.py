"""Key the full-text GIN index by agent and lexeme together.

The GIN index of 0001, on (agent_id, tsv) through btree_gin, keeps one posting list per
agent and one per lexeme over the whole table: a search for an agent's memories holding
some words intersects the agent's posting list (every memory of the agent) with the
words' (every memory of every agent holding them). Recall's keyword side of a large
agent makes two or three such searches.

``memoryd_agent_lexemes(agent_id, tsv)`` is the memory's tsvector with each lexeme
prefixed by 12 hex digits of the md5 of its agent id: one posting list per (agent,
lexeme), so a search reads only the entries of the agent's memories that hold the
words. Queries still filter on ``agent_id`` (two agents' prefixes could collide) and
score with ``tsv``. Lexemes over 1,000 bytes are left out, so the prefix never pushes
one past tsvector's 2 KB lexeme limit.

Replaces ix_memories_agent_tsv (recall was its only user). Building it reads the whole
table.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE OR REPLACE FUNCTION memoryd_agent_lexemes(agent text, doc tsvector)
        RETURNS tsvector LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
        RETURN array_to_tsvector(ARRAY(
            SELECT left(md5(agent), 12) || l FROM unnest(tsvector_to_array(doc)) AS l
            WHERE octet_length(l) <= 1000))""")
    op.execute("CREATE INDEX IF NOT EXISTS ix_memories_agent_lexemes ON memories "
               "USING gin (memoryd_agent_lexemes(agent_id, tsv))")
    op.execute("DROP INDEX IF EXISTS ix_memories_agent_tsv")


def downgrade() -> None:
    op.execute("CREATE INDEX IF NOT EXISTS ix_memories_agent_tsv ON memories "
               "USING gin (agent_id, tsv)")
    op.execute("DROP INDEX IF EXISTS ix_memories_agent_lexemes")
    op.execute("DROP FUNCTION IF EXISTS memoryd_agent_lexemes(text, tsvector)")
