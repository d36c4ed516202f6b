"""Erasing one agent: every row memoryd holds about it, for an operator asked to delete
everything of a user who left (a GDPR request).

``forget_agent`` deletes the agent's memories (evicted and merged copies included),
sessions, knowledge graph, links, restored-eviction records, term counts, dead letters
(found by the agent id they carry: the ``agent_id`` keyword, or the first argument every
agent task takes), its maintenance runs and its own HNSW index. A key for this agent
alone is deleted (a key for nobody has no use); a key that also covers other agents
loses this one and keeps the rest. Other runs' audit rows that name the agent in their
parameters, stats or error are scrubbed: the id becomes ``<erased>``, a checkpoint
naming it is dropped (that job starts its sweep afresh, which its idempotence makes
harmless), and an error naming it loses its text.

Each step deletes at most ``batch_size`` rows per short transaction, so erasing a large
agent never holds locks for long. A run stops at its time budget with ``complete``
False; running it again goes on, and once done it is a no-op. Keys go first, so no new
write arrives through the front door meanwhile; a write already queued that lands after
its step passed is caught by running it again.

The audit keeps that it happened, never what was erased: a ``maintenance_runs`` row of
job ``forget_agent`` with the SHA-256 of the agent id instead of the id (an id may be
the person's name or address; an operator proves an erasure by hashing the id they were
asked about), when, and the rows per table.
"""

from __future__ import annotations

import json
import re
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from memoryd import redaction
from memoryd import validation as check
from memoryd.config import Settings
from memoryd.errors import Unavailable
from memoryd.memory.agent_indexes import drop_agent_index, existing_indexes, index_name
from memoryd.types import Erasure

log = structlog.get_logger(__name__)


class Database(Protocol):
    """What erasure uses of a ``MemoryStore``: the store offers ``forget_agent`` by
    calling this module, which therefore names the store only by this shape."""

    @property
    def settings(self) -> Settings: ...

    @property
    def engine(self) -> Engine: ...

    def session(self) -> AbstractContextManager[Session]: ...

JOB = "forget_agent"
ERASED = "<erased>"
ERROR_REMOVED = "error text removed: it named an erased agent"
INTERRUPTED = "interrupted before it finished; a later erasure of the same agent went on"
MAX_BATCH = 1_000_000


@dataclass(frozen=True)
class Step:
    """Rows of ``table`` (alias ``t``) matching ``where``: deleted, or updated with
    ``sets`` when given. In batches, unless ``once``: an update whose result may match
    again (an agent called ``<erased>``) runs as one statement, so it cannot loop."""

    table: str
    where: str
    sets: str | None = None
    once: bool = False


_ALONE = ("cardinality(t.agent_prefixes) = 0 AND cardinality(t.agents) > 0 "
          "AND t.agents <@ ARRAY[CAST(:a AS text)]")
_NAMES_AGENT = ("strpos(CAST(t.params AS text), :quoted) > 0 "
                "OR strpos(CAST(t.stats AS text), :quoted) > 0 OR t.error ~ :pattern")
_SCRUB_RUN = ("params = CAST(replace(CAST(params AS text), :quoted, :erased) AS jsonb), "
              "stats = CAST(replace(CAST(CASE WHEN strpos(CAST(stats -> 'checkpoint' AS text), "
              ":quoted) > 0 THEN stats - 'checkpoint' ELSE stats END AS text), :quoted, "
              ":erased) AS jsonb), "
              "error = CASE WHEN error ~ :pattern THEN :error_removed ELSE error END")

# In order: keys first (no new writes through the front door), and what refers to a
# memory before the memory.
STEPS: tuple[Step, ...] = (
    Step("api_keys", _ALONE),
    Step("api_keys", f"CAST(:a AS text) = ANY(t.agents) AND NOT ({_ALONE})",
         "agents = array_remove(agents, CAST(:a AS text))"),
    Step("restored_evictions",
         "EXISTS (SELECT 1 FROM memories m WHERE m.id = t.memory_id AND m.agent_id = :a) "
         "OR EXISTS (SELECT 1 FROM evicted_memories e WHERE e.agent_id = :a "
         "AND (e.eviction_id = t.eviction_id OR e.memory_id = t.memory_id))"),
    Step("memory_links", "t.agent_id = :a"),
    Step("memory_versions", "t.agent_id = :a"),
    Step("memory_supersessions", "t.agent_id = :a"),
    Step("working_promotions", "t.agent_id = :a"),
    Step("sessions", "t.agent_id = :a"),
    Step("kg_relations", "t.agent_id = :a"),
    Step("kg_entities", "t.agent_id = :a"),
    Step("evicted_memories", "t.agent_id = :a"),
    Step("memories", "t.agent_id = :a"),
    Step("agent_terms", "t.agent_id = :a"),
    Step("agent_term_stats", "t.agent_id = :a"),
    Step("dead_letters", "t.agent_id = :a OR t.kwargs ->> 'agent_id' = :a "
                         "OR t.args ->> 0 = :a"),
    Step("maintenance_runs", "t.agent_id = :a"),
    # Few rows name an agent (a checkpoint's keyset, an error): one statement.
    Step("maintenance_runs", _NAMES_AGENT, _SCRUB_RUN, once=True),
)


def agent_digest(agent_id: str) -> str:
    """What the audit keeps of an erased agent's id: its SHA-256 (hex), the name logs
    and task events know the agent by too (``memoryd.redaction``)."""
    return redaction.agent_digest(agent_id)


def forget_agent(store: Database, agent_id: str, *, batch_size: int | None = None,
                 time_budget_s: float | None = None) -> Erasure:
    """Erase everything memoryd holds of ``agent_id`` (see the module docstring), at
    most ``batch_size`` rows per transaction (default: the maintenance batch size),
    stopping after ``time_budget_s`` (default: none) with ``complete`` False. Raises
    ``Unavailable`` while another erasure of the same agent runs."""
    agent = check.agent_id(agent_id)
    batch = check.limit(store.settings.maintenance_batch_size if batch_size is None
                        else batch_size, "batch_size", high=MAX_BATCH)
    deadline = None if time_budget_s is None else time.monotonic() + time_budget_s
    key = {"k": f"memoryd.{JOB}.{agent_digest(agent)}"}
    with store.engine.connect() as lock:
        got = lock.execute(text("SELECT pg_try_advisory_lock(hashtext(:k))"), key).scalar_one()
        lock.commit()
        if not got:
            raise Unavailable("another erasure of this agent is running; try again when "
                              "it has finished")
        try:
            return _erase(store, agent, batch, deadline)
        finally:
            lock.execute(text("SELECT pg_advisory_unlock(hashtext(:k))"), key)
            lock.commit()


def preview(store: Database, agent_id: str) -> Erasure:
    """What ``forget_agent`` would remove now: rows per table, and whether the agent has
    an index of its own. Changes nothing."""
    agent = check.agent_id(agent_id)
    deleted, scrubbed = _tallies()
    with store.session() as session:
        params = _params(session, agent)
        for step in STEPS:
            found = int(session.execute(text(
                f"SELECT count(*) FROM {step.table} t WHERE {step.where}"), params).scalar_one())
            (deleted if step.sets is None else scrubbed)[step.table] += found
        indexed = index_name(agent) in existing_indexes(session.connection())
    return Erasure(agent_id=agent, deleted=deleted, scrubbed=scrubbed, index_dropped=indexed,
                   complete=False)


def _erase(store: Database, agent: str, batch: int, deadline: float | None) -> Erasure:
    digest = agent_digest(agent)
    run_id = _open_run(store, digest)
    started = time.monotonic()
    try:
        deleted, scrubbed, complete = _run_steps(store, agent, batch, deadline)
        dropped = complete and drop_agent_index(store.engine, agent)
    except Exception as exc:
        # Only the type: a database error's text may quote the rows it was given.
        _finish_run(store, run_id, "failed", {}, type(exc).__name__)
        raise
    done = Erasure(agent_id=agent, deleted=deleted, scrubbed=scrubbed, index_dropped=dropped,
                   complete=complete, run_id=run_id)
    _finish_run(store, run_id, "ok", {
        "deleted": deleted, "scrubbed": scrubbed, "index_dropped": dropped,
        "complete": complete, "duration_ms": round((time.monotonic() - started) * 1000)}, None)
    log.info("erasure.finished", run_id=run_id, agent_sha256=digest, complete=complete,
             deleted=sum(deleted.values()), scrubbed=sum(scrubbed.values()))
    return done


def _tallies() -> tuple[dict[str, int], dict[str, int]]:
    """Zero counts for every table a step deletes from, and every one it scrubs."""
    return ({s.table: 0 for s in STEPS if s.sets is None},
            {s.table: 0 for s in STEPS if s.sets is not None})


def _params(session: Any, agent: str) -> dict[str, Any]:
    # The id as jsonb prints it (to find it as a whole JSON string), and as a whole word
    # of an error's text (Python's escaping is a valid literal in PostgreSQL's regexes).
    quoted = session.execute(text("SELECT CAST(to_jsonb(CAST(:a AS text)) AS text)"),
                             {"a": agent}).scalar_one()
    edge = "[^[:alnum:]_.-]"
    return {"a": agent, "quoted": quoted, "erased": json.dumps(ERASED),
            "pattern": f"(^|{edge}){re.escape(agent)}($|{edge})",
            "error_removed": ERROR_REMOVED}


def _run_steps(store: Database, agent: str, batch: int, deadline: float | None
               ) -> tuple[dict[str, int], dict[str, int], bool]:
    deleted, scrubbed = _tallies()
    with store.session() as session:
        params = {**_params(session, agent), "batch": batch}
    for step in STEPS:
        rows, finished = _in_batches(store, step, params, deadline)
        (deleted if step.sets is None else scrubbed)[step.table] += rows
        if not finished:
            return deleted, scrubbed, False
    return deleted, scrubbed, True


def _in_batches(store: Database, step: Step, params: dict[str, Any],
                deadline: float | None) -> tuple[int, bool]:
    """Apply ``step`` a batch per transaction until no row matches; (rows, finished),
    unfinished when the deadline passed first."""
    change = (f"DELETE FROM {step.table} t" if step.sets is None
              else f"UPDATE {step.table} t SET {step.sets}")
    statement = text(f"""
        WITH picked AS MATERIALIZED (
            SELECT t.ctid AS tid FROM {step.table} t WHERE {step.where}
            {"" if step.once else "LIMIT :batch"}
        ), changed AS (
            {change} WHERE t.ctid = ANY(ARRAY(SELECT tid FROM picked)) RETURNING 1
        )
        SELECT (SELECT count(*) FROM picked) AS picked, (SELECT count(*) FROM changed) AS n
    """)
    rows = 0
    while True:
        with store.session() as session:
            found = session.execute(statement, params).one()
        rows += int(found.n)
        if step.once or int(found.picked) < int(params["batch"]):
            return rows, True
        if deadline is not None and time.monotonic() >= deadline:
            return rows, False


# --- the audit: one maintenance_runs row per run, naming the agent by its hash ----------

def _open_run(store: Database, digest: str) -> int:
    """Record this run; earlier runs of this agent's erasure still 'running' died (we
    hold the agent's lock), and are recorded as failed."""
    with store.session() as session:
        session.execute(text("""
            UPDATE maintenance_runs SET status = 'failed', finished_at = now(), error = :error
            WHERE job = :job AND status = 'running' AND params ->> 'agent_sha256' = :h
        """), {"job": JOB, "h": digest, "error": INTERRUPTED})
        return int(session.execute(text("""
            INSERT INTO maintenance_runs (job, params, status)
            VALUES (:job, jsonb_build_object('agent_sha256', CAST(:h AS text)), 'running')
            RETURNING id
        """), {"job": JOB, "h": digest}).scalar_one())


def _finish_run(store: Database, run_id: int, status: str, stats: dict[str, Any],
                error: str | None) -> None:
    with store.session() as session:
        session.execute(text("""
            UPDATE maintenance_runs SET status = :status, finished_at = now(),
                   stats = CAST(:stats AS jsonb), error = :error
            WHERE id = :id
        """), {"id": run_id, "status": status, "stats": json.dumps(stats), "error": error})
