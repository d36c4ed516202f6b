"""Keep each memory's embedding and tsvector in its heap row (storage MAIN).

Recall reads every row of an agent below ``recall_exact_threshold``: the distance of
its embedding to the query and its lexemes. PostgreSQL moves values out of a row to the
TOAST table once the row passes about 2 KB, and the embedding (1,540 bytes, storage
EXTERNAL by pgvector's default) was the first to go: a memory of a few hundred
characters had its embedding in the TOAST table, and reading it cost a TOAST index
lookup and a second heap read per row.

With storage MAIN, PostgreSQL first compresses, then moves out the other long values
(the content, the metadata), and moves the embedding or the tsvector out only when the
row would not fit in a page otherwise. Recall reads the content of its ~50 candidates
only. The heap holds the same data per row as for short memories, whose embeddings
were inline already.

Only rows written from now on are stored this way; existing rows move when they are
next rewritten (an update that is not HOT, ``VACUUM FULL``, pg_repack). No table
rewrite, no lock beyond a brief catalog change.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE memories ALTER COLUMN embedding SET STORAGE MAIN, "
               "ALTER COLUMN tsv SET STORAGE MAIN")


def downgrade() -> None:
    # pgvector's default for vector is EXTERNAL; tsvector's is EXTENDED.
    op.execute("ALTER TABLE memories ALTER COLUMN embedding SET STORAGE EXTERNAL, "
               "ALTER COLUMN tsv SET STORAGE EXTENDED")
