"""Every maintenance job by name, in the order they are listed everywhere: what
``run_job`` runs.

A job is a plain function of a ``JobContext``, named by its function's name and described
by its docstring. When each runs is the schedule table's business
(``memoryd.schedules.table``, which gives every job here a time); thin clients check
names against ``memoryd.schedules.names``, which a unit test keeps equal to this list."""

from __future__ import annotations

from memoryd.memory.maintenance.compact_sessions import compact_sessions
from memoryd.memory.maintenance.consolidate import consolidate
from memoryd.memory.maintenance.context import JobFn
from memoryd.memory.maintenance.cortex import cortex
from memoryd.memory.maintenance.deduplicate import deduplicate
from memoryd.memory.maintenance.evict import evict
from memoryd.memory.maintenance.expire import expire
from memoryd.memory.maintenance.index_agents import index_agents
from memoryd.memory.maintenance.reconcile import reconcile
from memoryd.memory.maintenance.reembed import reembed
from memoryd.memory.maintenance.repair_sessions import repair_sessions
from memoryd.memory.maintenance.summarize import summarize

JOBS: dict[str, JobFn] = {fn.__name__: fn for fn in (
    consolidate, evict, expire, deduplicate, summarize,
    cortex, compact_sessions, repair_sessions, index_agents,
    reembed, reconcile,
)}
