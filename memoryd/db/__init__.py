"""The database: the engine and sessions (``engine``), the tables (``models``), their
migrations, how a database error is judged (``faults``) and backups. Imports the base
modules and ``embedded`` (the engine asks the embedded server for its URL), nothing of
the memory layer above it."""
