"""The names of the maintenance jobs, for thin clients.

The schedule table (``memoryd.schedules.table``) is the source of the jobs; a thin
client cannot import it (the job functions need SQLAlchemy), so it checks a job name
against this copy before enqueuing ``memoryd.maintenance.<job>``. Like the task names,
it is part of the wire protocol; a unit test keeps it equal to the table, in order.
"""

JOB_NAMES: tuple[str, ...] = (
    "consolidate", "evict", "expire", "deduplicate", "summarize",
    "cortex", "compact_sessions", "repair_sessions", "index_agents",
    "reembed", "reconcile",
)
