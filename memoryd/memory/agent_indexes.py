"""No slow first hour: a large agent without an index of its own is noticed when it
recalls, and the ``index_agents`` job is asked to run at once instead of at its next
hourly turn.

Recall already knows an agent's size class; for an agent at or past
``agent_index_min_memories`` the watch looks up its index by name (one catalog lookup)
and, if there is none, calls the store's ``request`` (in a worker: enqueue the job on the
maintenance queue), unless the fleet already holds ``MAX_AGENT_INDEXES`` of them. Each
agent is looked at once per ``RECHECK_S`` per process, so an
agent crossing the line gets one request per process, not one per recall; the job itself
takes a fleet-wide lock and builds an index only where one is missing, so requests from
several processes still build it once.

The indexes' names and the lookups and drops that recall and erasure need live here too;
the job that builds them (``maintenance.index_agents``) stands on this module."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from psycopg import sql
from sqlalchemy import Connection, Engine, Row, text
from sqlalchemy.orm import Session

from memoryd.db.pipeline import run_composed
from memoryd.memory.recall import agent_count

RECHECK_S = 600.0
# The most per-agent indexes the ``index_agents`` job keeps (its largest agents): the
# planner weighs every index of ``memories`` for every statement.
MAX_AGENT_INDEXES = 64
# How long a process trusts its list of the agents with a valid index of their own
# (``OwnIndexes``): a stale list costs speed for that long, never a result.
OWN_INDEXES_S = 30.0
# Every per-agent index is named with this prefix; the ``index_agents`` maintenance job
# builds them, erasing an agent drops its own.
INDEX_PREFIX = "ix_memories_agent_hnsw_"
# How each per-agent graph is built. Built at ``ef_construction`` 200 rather than the
# shared index's 64, a graph finds more of an agent's true nearest memories at a smaller
# search breadth, in less time (bench/README.md): recall searches one built so at
# ``agent_index_ef_search``, any other at ``hnsw_ef_search``.
GRAPH_OPTIONS = {"m": 16, "ef_construction": 200}


def index_name(agent_id: str) -> str:
    """The name of ``agent_id``'s index: derived from the agent id, which may hold any
    character and be longer than an identifier."""
    return INDEX_PREFIX + hashlib.md5(agent_id.encode(), usedforsecurity=False).hexdigest()[:16]


def _catalog(conn: Connection) -> Sequence[Row[Any]]:
    """memoryd's per-agent indexes on ``memories``: name, validity and build options."""
    return conn.execute(text("""
        SELECT c.relname, i.indisvalid, coalesce(c.reloptions, '{}') AS options
        FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE i.indrelid = 'memories'::regclass AND starts_with(c.relname, :prefix)
    """), {"prefix": INDEX_PREFIX}).all()


def existing_indexes(conn: Connection) -> dict[str, bool]:
    """memoryd's per-agent indexes on ``memories``: name -> valid (an interrupted
    concurrent build leaves an invalid one)."""
    return {str(r.relname): bool(r.indisvalid) for r in _catalog(conn)}


def older_graphs(conn: Connection) -> frozenset[str]:
    """The valid per-agent indexes not built with ``GRAPH_OPTIONS`` (built before them)."""
    return _older(_catalog(conn))


def _older(rows: Sequence[Row[Any]]) -> frozenset[str]:
    wanted = {f"{key}={value}" for key, value in GRAPH_OPTIONS.items()}
    return frozenset(str(r.relname) for r in rows
                     if r.indisvalid and not wanted <= set(r.options))


class OwnIndexes:
    """Per-process memo of the names of the valid per-agent indexes, and of those built
    with ``GRAPH_OPTIONS``, read at most every ``OWN_INDEXES_S`` (one catalog query):
    recall searches an agent with an index of its own through it, whatever the agent's
    size, rather than exactly, and at the breadth its build calls for. Out of date, it
    sends a newly indexed agent to the exact search, or one whose index was dropped to
    the shared index, for that long: slower, still every row found; a graph rebuilt
    meanwhile is searched as broadly as before."""

    def __init__(self) -> None:
        self._seen: tuple[float, frozenset[str], frozenset[str]] | None = None
        self._lock = threading.Lock()

    def has(self, session: Session, agent_id: str) -> bool:
        """Whether ``agent_id`` has a valid index of its own (as of the memo)."""
        return index_name(agent_id) in self._read(session)[1]

    def current(self, session: Session, agent_id: str) -> bool:
        """Whether ``agent_id`` has a valid index of its own built with
        ``GRAPH_OPTIONS`` (as of the memo)."""
        return index_name(agent_id) in self._read(session)[2]

    def _read(self, session: Session) -> tuple[float, frozenset[str], frozenset[str]]:
        now = time.monotonic()
        with self._lock:
            seen = self._seen
        if seen is None or now - seen[0] >= OWN_INDEXES_S:
            rows = _catalog(session.connection())
            valid = frozenset(str(r.relname) for r in rows if r.indisvalid)
            seen = (now, valid, valid - _older(rows))
            with self._lock:
                self._seen = seen
        return seen

    def clear(self) -> None:
        """Forget what was read (tests build and drop indexes between recalls)."""
        with self._lock:
            self._seen = None


def drop_index(conn: Connection, name: str) -> None:
    """Drop one of the per-agent indexes without blocking recall or writes (``name`` as
    the catalog has it, composed in as an identifier: DDL takes no parameters)."""
    run_composed(conn, sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(
        sql.Identifier(name)))


def drop_agent_index(engine: Engine, agent_id: str) -> bool:
    """Drop ``agent_id``'s own index, if it has one (erasing the agent: its definition
    names the agent); whether it had one."""
    name = index_name(agent_id)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        if name not in existing_indexes(conn):
            return False
        drop_index(conn, name)
    return True


class IndexWatch:
    def __init__(self, min_memories: int, exact_threshold: int,
                 request: Callable[[str], None] | None = None,
                 cap: int = MAX_AGENT_INDEXES) -> None:
        self.min_memories = min_memories
        self.exact_threshold = exact_threshold
        self.request = request
        self.cap = cap
        self._checked: dict[str, float] = {}
        self._lock = threading.Lock()

    def notice(self, session: Session, agent_id: str, size: int) -> bool:
        """Ask for the agent's index if it needs one and lacks it; whether it asked.
        ``size`` is the recall plan's count, capped just past the exact threshold."""
        if self.request is None or not self.min_memories or not self._due(agent_id):
            return False
        if not self._large(session, agent_id, size) or self._indexed(session, agent_id):
            return False
        if self._full(session):  # the hourly run decides which agents hold the indexes
            return False
        self.request(agent_id)
        return True

    def _due(self, agent_id: str) -> bool:
        now = time.monotonic()
        with self._lock:
            last = self._checked.get(agent_id)
            if last is not None and now - last < RECHECK_S:
                return False
            if len(self._checked) > 100_000:
                self._checked.clear()
            self._checked[agent_id] = now
        return True

    def _large(self, session: Session, agent_id: str, size: int) -> bool:
        if self.min_memories <= self.exact_threshold + 1 or size <= self.exact_threshold:
            return size >= self.min_memories  # the plan's count decides
        return agent_count(session, agent_id, self.min_memories) >= self.min_memories

    def _full(self, session: Session) -> bool:
        """Whether the fleet holds its ``cap`` of per-agent indexes already: a request
        could then only swap agents, which is the hourly run's work, and thousands of
        mid-sized agents would otherwise each ask for a run that builds nothing."""
        return len(existing_indexes(session.connection())) >= self.cap

    @staticmethod
    def _indexed(session: Session, agent_id: str) -> bool:
        found = session.execute(text("SELECT to_regclass(:name) IS NOT NULL"),
                                {"name": index_name(agent_id)}).scalar_one()
        return bool(found)
