"""Per-agent document frequencies of lexemes, for the keyword side of large agents.

Recall weighs each query stem by its inverse document frequency among the agent's
memories. For an agent above 2,000 memories it estimated the frequencies on a sample of
1,000 of them at every recall, a large part of the keyword query. The ``index_agents``
job now counts them over all of the agent's memories, hourly, for the agents it
indexes (``maintenance.index_agents``):

- ``agent_term_stats``: one row per such agent, with the number of memories counted;
- ``agent_terms``: the lexemes held by more than 0.2 % of them (rarer ones are "rare"
  to recall and need no count), with their document frequency. At most 500 lexemes per
  average memory's lexemes, whatever the agent's size.

Recall reads them by primary key; an agent without a row keeps the sample.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE IF NOT EXISTS agent_term_stats (
            agent_id varchar(255) PRIMARY KEY,
            memories integer NOT NULL,
            counted_at timestamptz NOT NULL DEFAULT now())""")
    op.execute("""
        CREATE TABLE IF NOT EXISTS agent_terms (
            agent_id varchar(255) NOT NULL
                REFERENCES agent_term_stats (agent_id) ON DELETE CASCADE,
            lexeme text NOT NULL,
            df integer NOT NULL,
            PRIMARY KEY (agent_id, lexeme))""")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS agent_terms")
    op.execute("DROP TABLE IF EXISTS agent_term_stats")
