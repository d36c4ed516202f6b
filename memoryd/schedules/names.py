"""The names of the maintenance jobs, for thin clients.

The schedule table (``memoryd.schedules.table``) is the source of the jobs; a thin
client cannot import it (the job functions need SQLAlchemy), so it validates a job name
against this copy before enqueuing ``memoryd.maintenance.<job>``: part of the wire
protocol, like the task names. A unit test keeps it equal to the table.
"""

JOB_NAMES: tuple[str, ...] = (
    "consolidate", "evict", "expire", "deduplicate", "summarize",
    "cortex", "compact_sessions", "repair_sessions", "index_agents",
)
