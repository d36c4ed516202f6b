"""The maintenance framework: job registry, fleet-wide locking, the run audit,
time budgets, and moving memories to ``evicted_memories`` (never silent deletes)."""

from __future__ import annotations

import functools
import json
import math
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import structlog
from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd import clock
from memoryd.errors import ValidationError

if TYPE_CHECKING:
    from memoryd.memory.llm import LLM
    from memoryd.memory.store import MemoryStore

log = structlog.get_logger(__name__)

NIL_UUID = "00000000-0000-0000-0000-000000000000"  # sorts before every generated id


@dataclass
class JobContext:
    """What every job function receives."""

    store: MemoryStore
    run_id: int | None
    agent_id: str | None
    dry_run: bool
    batch_size: int
    deadline: float  # time.monotonic() value after which the job should stop and resume later
    now: datetime
    llm: LLM | None = None

    def out_of_time(self) -> bool:
        return time.monotonic() >= self.deadline

    def agent_clause(self, alias: str = "m") -> str:
        """SQL restricting to the run's agent, if any (bind ``:agent_id``)."""
        return f"{alias}.agent_id = :agent_id" if self.agent_id else "TRUE"

    def get_llm(self) -> LLM:
        if self.llm is None:
            from memoryd.memory.llm import get_llm

            self.llm = get_llm()
        return self.llm


@dataclass
class JobOutcome:
    """A job's result: its stats, and whether it finished or ran out of its time budget."""

    stats: dict[str, Any]
    complete: bool = True


JobFn = Callable[..., JobOutcome]


@dataclass(frozen=True)
class JobSpec:
    name: str
    fn: JobFn
    description: str


JOBS: dict[str, JobSpec] = {}


def job(name: str, description: str) -> Callable[[JobFn], JobFn]:
    """Register a job function under ``name``."""
    def register(fn: JobFn) -> JobFn:
        JOBS[name] = JobSpec(name, fn, description)
        return fn
    return register


@dataclass
class RunRecord:
    """One row of ``maintenance_runs`` as returned to callers."""

    run_id: int | None
    job: str
    status: str  # ok / failed / skipped
    stats: dict[str, Any] = field(default_factory=dict)
    complete: bool = True
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "job": self.job, "status": self.status,
                "stats": self.stats, "complete": self.complete, "error": self.error}


def lock_key(job_name: str) -> str:
    return f"memoryd.maintenance.{job_name}"


def run_job(store: MemoryStore, job_name: str, *, agent_id: str | None = None,
            dry_run: bool = False, params: Mapping[str, Any] | None = None,
            time_budget_s: float | None = None, llm: LLM | None = None) -> RunRecord:
    """Run one job under its advisory lock and record it. Never raises for a job failure
    except transient database errors, which the caller (a Celery task) retries."""
    _load_jobs()
    if job_name not in JOBS:
        raise ValidationError("job", f"unknown job {job_name!r}; one of {sorted(JOBS)}")
    if agent_id is not None:
        from memoryd.validation import agent_id as check_agent

        check_agent(agent_id)
    args = dict(params or {})
    budget = time_budget_s or store.settings.maintenance_time_budget_s
    with store.engine.connect() as lock_conn:
        got = lock_conn.execute(text("SELECT pg_try_advisory_lock(hashtext(:k))"),
                                {"k": lock_key(job_name)}).scalar_one()
        lock_conn.commit()
        if not got:
            return _record_skipped(store, job_name, agent_id, dry_run, args)
        try:
            return _run_locked(store, job_name, agent_id, dry_run, args, budget, llm)
        finally:
            lock_conn.execute(text("SELECT pg_advisory_unlock(hashtext(:k))"),
                              {"k": lock_key(job_name)})
            lock_conn.commit()



def run_to_completion(store: MemoryStore, job_name: str, *, agent_id: str | None = None,
                      dry_run: bool = False, params: Mapping[str, Any] | None = None,
                      llm: LLM | None = None) -> RunRecord:
    """Run ``job_name`` again and again until a run completes (or is not ok): what a
    one-off caller wants, where a Celery task would enqueue a follow-up instead."""
    while True:
        record = run_job(store, job_name, agent_id=agent_id, dry_run=dry_run,
                         params=params, llm=llm)
        if record.status != "ok" or record.complete:
            return record

def _run_locked(store: MemoryStore, job_name: str, agent_id: str | None, dry_run: bool,
                params: dict[str, Any], budget: float, llm: LLM | None) -> RunRecord:
    from sqlalchemy.exc import OperationalError

    run_id = _insert_run(store, job_name, agent_id, dry_run, params, "running")
    batch_size = int(params.pop("batch_size", store.settings.maintenance_batch_size))
    ctx = JobContext(store=store, run_id=run_id, agent_id=agent_id, dry_run=dry_run,
                     batch_size=batch_size,
                     deadline=time.monotonic() + budget, now=clock.now(), llm=llm)
    started = time.monotonic()
    bound = log.bind(job=job_name, run_id=run_id, agent_id=agent_id, dry_run=dry_run)
    try:
        outcome = JOBS[job_name].fn(ctx, **params)
    except OperationalError:
        _finish_run(store, run_id, "failed", {}, "transient database error; retried")
        raise
    except Exception as exc:  # recorded in the audit, then re-raised for the caller
        _finish_run(store, run_id, "failed", {}, "".join(
            traceback.format_exception_only(type(exc), exc)).strip())
        bound.exception("maintenance.failed")
        raise
    stats = {**outcome.stats, "duration_ms": round((time.monotonic() - started) * 1000)}
    _finish_run(store, run_id, "ok", stats, None)
    bound.info("maintenance.finished", complete=outcome.complete, **_loggable(stats))
    return RunRecord(run_id, job_name, "ok", stats, outcome.complete)


def _loggable(stats: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in stats.items() if isinstance(v, int | float | str | bool)}


def _insert_run(store: MemoryStore, job_name: str, agent_id: str | None, dry_run: bool,
                params: Mapping[str, Any], status: str) -> int:
    with store.session() as session:
        return int(session.execute(text("""
            INSERT INTO maintenance_runs (job, agent_id, params, dry_run, status, finished_at)
            VALUES (:job, :agent_id, CAST(:params AS jsonb), :dry_run, CAST(:status AS text),
                    CASE WHEN CAST(:status AS text) = 'running' THEN NULL ELSE now() END)
            RETURNING id
        """), {"job": job_name, "agent_id": agent_id, "params": json.dumps(params, default=str),
               "dry_run": dry_run, "status": status}).scalar_one())


def _finish_run(store: MemoryStore, run_id: int, status: str, stats: Mapping[str, Any],
                error: str | None) -> None:
    # Merged into, not replacing, what the job wrote: a failed run keeps its checkpoint.
    with store.session() as session:
        session.execute(text("""
            UPDATE maintenance_runs SET status = :status, finished_at = now(),
                   stats = stats || CAST(:stats AS jsonb), error = :error
            WHERE id = :id
        """), {"id": run_id, "status": status, "stats": json.dumps(stats, default=str),
               "error": error})


def _record_skipped(store: MemoryStore, job_name: str, agent_id: str | None, dry_run: bool,
                    params: Mapping[str, Any]) -> RunRecord:
    run_id = _insert_run(store, job_name, agent_id, dry_run, params, "skipped")
    log.info("maintenance.skipped", job=job_name, run_id=run_id, reason="lock held")
    return RunRecord(run_id, job_name, "skipped", {"reason": "another run holds the lock"})


def last_run_started(session: Session, job_name: str, agent_id: str | None) -> datetime | None:
    """When the last successful, non-dry run of ``job_name`` started (for incremental jobs)."""
    value = session.execute(text("""
        SELECT max(started_at) FROM maintenance_runs
        WHERE job = :job AND status = 'ok' AND NOT dry_run
          AND (agent_id IS NULL OR agent_id IS NOT DISTINCT FROM :agent_id)
    """), {"job": job_name, "agent_id": agent_id}).scalar_one()
    return value if isinstance(value, datetime) or value is None else None


def commit_without_waiting(session: Session) -> None:
    """Let the caller's transaction commit without waiting for its WAL to reach disk
    (``synchronous_commit = off`` for this transaction only).

    For batches that write their checkpoint in the same transaction: a crash can lose
    the last few of them (under a second's worth), but each batch and its checkpoint
    commit or vanish together, so the job resumes exactly where the surviving checkpoint
    says. Waiting for a disk flush at each of dozens of commits was a large part of a
    pass whose batches each write megabytes of WAL (first changes after a checkpoint log
    whole pages)."""
    session.execute(text("SET LOCAL synchronous_commit = off"))


# --- moving memories out, and back --------------------------------------------------

# A moved row as ``evicted_memories.data``: every column but the embedding (kept in its
# own column) and the generated tsv and content_norm_hash (restore regenerates them).
# They are nulled before the conversion: formatting 384 floats as JSON text only to
# drop them was most of the cost of moving a row.
_DATA = ("to_jsonb(jsonb_populate_record(gone.r, "
         "'{\"embedding\": null, \"tsv\": null, \"content_norm_hash\": null}'))"
         " - ARRAY['embedding', 'tsv', 'content_norm_hash']")
# (Links by = ANY: a join with the CTE would be planned as a scan of memory_links.)
_MOVE = f"""unlinked AS (
    DELETE FROM memory_links l
    WHERE l.source_id = ANY(ARRAY(SELECT gone.id FROM gone)) AND l.kind <> 'derived_from'
), moved AS (
    INSERT INTO evicted_memories (memory_id, agent_id, reason, run_id, data, embedding)
    SELECT gone.id, gone.agent_id, :reason, :run_id, {_DATA}, gone.embedding
    FROM gone
    RETURNING 1
)"""
_GONE = "RETURNING m.id, m.agent_id, m.embedding, m AS r"
# The tail of a statement whose CTE ``gone`` (id, agent_id, embedding, r) returns deleted
# memories: unlinks and moves them; ``moved`` counts them (binds :reason and :run_id).
MOVE_GONE = _MOVE

_EVICT = text(f"""
WITH gone AS (
    DELETE FROM memories m WHERE m.id = ANY(:ids) {_GONE}
), {_MOVE}
SELECT count(*) FROM moved
""")


def evict_ids(session: Session, ids: Sequence[Any], reason: str, run_id: int | None) -> int:
    """Move memories to ``evicted_memories`` with the reason; frees their dedup hashes."""
    if not ids:
        return 0
    return int(session.execute(_EVICT, {"ids": list(ids), "reason": reason,
                                        "run_id": run_id}).scalar_one())


# One batch, one statement: the ids never leave the server. (%-formatted: _MOVE holds braces.)
_EVICT_BATCH = f"""
WITH picked AS MATERIALIZED (%(select)s), gone AS (
    DELETE FROM memories m WHERE m.id IN (SELECT p.id FROM picked p) {_GONE}
), {_MOVE}
SELECT (SELECT count(*) FROM picked) AS picked, (SELECT count(*) FROM moved) AS moved,
       (SELECT p.%(key)s FROM picked p ORDER BY p.%(key)s DESC LIMIT 1) AS last"""


def evict_in_batches(ctx: JobContext, select_ids_sql: str, params: Mapping[str, Any],
                     reason: str) -> tuple[int, bool]:
    """Repeatedly select up to ``batch_size`` ids with ``select_ids_sql`` (which must
    bind ``:batch`` and name its column ``id``) and evict them, one short transaction
    per batch.

    A select that binds ``:after`` walks the ids in keyset order (``m.id > :after ...
    ORDER BY m.id``): each batch starts where the previous one ended instead of
    re-reading the rows it kept.

    In a dry run, counts the matching rows instead. Returns (rows, complete).
    """
    params = {**params, "after": NIL_UUID}
    if ctx.dry_run:
        return _count(ctx, select_ids_sql, params), True
    statement = text(_EVICT_BATCH % {"select": select_ids_sql, "key": "id"})
    total = 0
    while True:
        with ctx.store.session() as session:
            row = session.execute(statement, {**params, "batch": ctx.batch_size,
                                              "reason": reason, "run_id": ctx.run_id}).one()
        total += int(row.moved)
        if row.last is not None:
            params["after"] = str(row.last)
        if int(row.picked) < ctx.batch_size:
            return total, True
        if ctx.out_of_time():
            return total, False


# A heap walk's window holds about this many batches' worth of rows.
WINDOW_BATCHES = 4
# A heap walk's window is never smaller than this many pages (8 MB): a smaller table
# is one window, walked in plain id order.
HEAP_WINDOW_MIN_PAGES = 1024


def heap_window(ctx: JobContext, batches: int = WINDOW_BATCHES) -> tuple[int, int]:
    """(pages of memories now, pages per window of a heap walk, holding about ``batches``
    batches of rows; see evict_by_heap_walk)."""
    with ctx.store.session() as session:
        pages, per_page = session.execute(text("""
            SELECT pg_relation_size('memories') / current_setting('block_size')::int,
                   CASE WHEN relpages > 0 AND reltuples > 0 THEN reltuples / relpages END
            FROM pg_class WHERE oid = 'memories'::regclass""")).one()
    return int(pages), max(HEAP_WINDOW_MIN_PAGES,
                           math.ceil(batches * ctx.batch_size / float(per_page or 4)))


def evict_by_heap_walk(ctx: JobContext, steps: Sequence[tuple[str, str]],
                       params: Mapping[str, Any]) -> tuple[dict[str, int], bool]:
    """Evict the memories matching ``steps`` ((reason, SQL condition over alias ``m``),
    in order; no index needed) in one sequential walk of the table, at most
    ``batch_size`` rows per transaction.

    The walk reads windows of pages in physical order (TID range scans, holding about
    ``WINDOW_BATCHES`` batches of rows, or the whole of a small table). Each window is
    swept by each step in turn (while its pages are still cached), in batches in id
    order (a keyset on id). A keyset walk over the primary key alone would read the
    pages at random, many times slower than the bare statement's sequential scan when
    they are not cached; "the first batch_size matching rows" without a keyset re-reads
    every row it kept on each batch; and a walk per step would read the table once per
    step. A row a concurrent update moves behind the walk is left for the next run,
    like any row that starts matching later.
    Returns (rows per reason, complete); a dry run counts instead.
    """
    counts = dict.fromkeys((reason for reason, _ in steps), 0)
    if ctx.dry_run:
        for reason, where_sql in steps:
            counts[reason] = _count(ctx, f"SELECT m.id FROM memories m WHERE {where_sql}",
                                    params)
        return counts, True
    pages, window = heap_window(ctx)
    statements = [(reason, text(_EVICT_BATCH % {"select": f"""SELECT w.id FROM (
            SELECT m.id FROM memories m
            WHERE m.ctid >= CAST(:lo AS tid) AND m.ctid < CAST(:hi AS tid)
              AND m.id > CAST(:after AS uuid) AND ({where_sql})
            OFFSET 0  -- planned apart from the ORDER BY: a TID range scan, not the pkey
        ) w ORDER BY w.id LIMIT :batch""", "key": "id"})) for reason, where_sql in steps]
    first = 0
    while first < max(pages, 1):
        bounds = {"lo": f"({first},0)", "hi": f"({first + window},0)"}
        for reason, statement in statements:
            after = NIL_UUID
            while True:
                with ctx.store.session() as session:
                    row = session.execute(statement, {
                        **params, **bounds, "after": after, "batch": ctx.batch_size,
                        "reason": reason, "run_id": ctx.run_id}).one()
                counts[reason] += int(row.moved)
                if int(row.picked) < ctx.batch_size:
                    break
                after = str(row.last)  # the window may hold more
                if ctx.out_of_time():
                    return counts, False
        first += window
        if first < pages and ctx.out_of_time():
            return counts, False
    return counts, True


def _count(ctx: JobContext, select_ids_sql: str, params: Mapping[str, Any]) -> int:
    with ctx.store.session() as session:
        return int(session.execute(text(
            f"SELECT count(*) FROM ({select_ids_sql.replace('LIMIT :batch', '')}) s"),
            params).scalar_one())


def restore(store: MemoryStore, eviction_or_memory_id: int | str) -> Any:
    """Put an evicted memory back (same id). Raises NotFound or ValidationError when its
    content or key is in use again. Returns the restored memory's id."""
    from sqlalchemy.exc import IntegrityError

    from memoryd.errors import NotFound

    key_sql = ("eviction_id = :v" if isinstance(eviction_or_memory_id, int)
               else "memory_id = CAST(:v AS uuid)")
    with store.session() as session:
        row = session.execute(text(f"""
            SELECT eviction_id, memory_id FROM evicted_memories WHERE {key_sql}
            ORDER BY evicted_at DESC LIMIT 1 FOR UPDATE
        """), {"v": eviction_or_memory_id}).first()
        if row is None:
            raise NotFound(f"no evicted memory {eviction_or_memory_id}")
        try:
            with session.begin_nested():
                session.execute(text("""
                    INSERT INTO memories (id, agent_id, content, content_hash, role, session_id,
                        key, category, tags, source, metadata, importance, confidence, pinned,
                        access_count, last_accessed_at, created_at, updated_at, expires_at,
                        archived_at, embedding)
                    SELECT r.id, r.agent_id, r.content, r.content_hash, r.role, r.session_id,
                        r.key, r.category, r.tags, r.source, r.metadata, r.importance,
                        r.confidence, r.pinned, r.access_count, r.last_accessed_at,
                        r.created_at, now(), NULL, r.archived_at, e.embedding
                    FROM evicted_memories e,
                         jsonb_populate_record(NULL::memories, e.data) r
                    WHERE e.eviction_id = :eid
                """), {"eid": row.eviction_id})
        except IntegrityError:
            raise ValidationError("memory_id", "its content, key or id is in use again; "
                                  "forget the newer memory first") from None
        session.execute(text("DELETE FROM evicted_memories WHERE memory_id = :m"),
                        {"m": row.memory_id})
        return row.memory_id


@functools.cache
def _load_jobs() -> None:
    """Import every module of this package so their ``@job`` registrations run (once:
    every run_job calls this, and listing the package each time is wasted I/O)."""
    import importlib
    import pkgutil

    package = importlib.import_module("memoryd.memory.maintenance")
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"memoryd.memory.maintenance.{module.name}")
