"""Alembic environment. memoryd runs it programmatically (``memoryd.db.migrate``);
a connection is always handed in through ``config.attributes``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import text

from memoryd.db.models import Base

# Any 64-bit constant will do; it only has to be memoryd's own.
MIGRATION_LOCK_KEY = 0x6D656D6F72796401

config = context.config
connection = config.attributes["connection"]

# Several processes (workers, beat, CLI) may migrate at once on first start:
# serialise them so CREATE EXTENSION and the DDL run exactly once.
connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": MIGRATION_LOCK_KEY})
connection.commit()
try:
    context.configure(connection=connection, target_metadata=Base.metadata,
                      transaction_per_migration=True)
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()
finally:
    connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATION_LOCK_KEY})
    connection.commit()
