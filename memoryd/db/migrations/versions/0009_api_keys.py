"""Per-agent API keys for the front door (HTTP gateway, MCP).

A key is shown once; only the SHA-256 of its secret is stored (``secret_hash``, unique,
so verification is one index lookup). A key names the agents it may touch (exact ids
and id prefixes such as ``team-a/``) and what it may do there (``read``, ``write``;
``admin`` for operator endpoints). Revoked and expired keys stay, for the audit trail.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE IF NOT EXISTS api_keys (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            name varchar(255) NOT NULL,
            secret_hash varchar(64) NOT NULL UNIQUE,
            hint varchar(16) NOT NULL,
            agents text[] NOT NULL DEFAULT '{}',
            agent_prefixes text[] NOT NULL DEFAULT '{}',
            permissions text[] NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            expires_at timestamptz,
            revoked_at timestamptz,
            last_used_at timestamptz)""")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS api_keys")
