"""Running a job: its fleet-wide advisory lock, its row in ``maintenance_runs`` (the
audit, which also holds its checkpoint), its batch size and time budget.

``run_job`` is the single entry point of the Celery tasks, APScheduler and the CLI;
``run_to_completion`` repeats it for callers with no follow-up task to enqueue. A job
over the whole fleet takes each agent's step apart (``JobContext.apart``): the agents
whose step failed alone are listed in the run's stats, and the run is ok.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from memoryd import clock
from memoryd import validation as check
from memoryd.db import faults
from memoryd.errors import ValidationError
from memoryd.memory.maintenance.context import JobContext, JobFn
from memoryd.memory.maintenance.jobs import JOBS
from memoryd.redaction import describe_error

if TYPE_CHECKING:
    from memoryd.memory.llm import LLM
    from memoryd.memory.store import MemoryStore

log = structlog.get_logger(__name__)


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


def job_function(job_name: str) -> JobFn:
    """The function of the job named ``job_name``."""
    if job_name not in JOBS:
        raise ValidationError("job", f"unknown job {job_name!r}; one of {sorted(JOBS)}")
    return JOBS[job_name]


def run_job(store: MemoryStore, job_name: str, *, agent_id: str | None = None,
            dry_run: bool = False, params: Mapping[str, Any] | None = None,
            time_budget_s: float | None = None, llm: LLM | None = None) -> RunRecord:
    """Run one job under its advisory lock and record it. Never raises for a job failure
    except transient database errors, which the caller (a Celery task) retries."""
    fn = job_function(job_name)
    if agent_id is not None:
        check.agent_id(agent_id)
    check.boolean("dry_run", dry_run)
    args = dict(check.json_object("params", params if params is not None else {}))
    _check_params(job_name, fn, args)
    budget = time_budget_s or store.settings.maintenance_time_budget_s
    with store.engine.connect() as lock_conn:
        got = lock_conn.execute(text("SELECT pg_try_advisory_lock(hashtext(:k))"),
                                {"k": lock_key(job_name)}).scalar_one()
        lock_conn.commit()
        if not got:
            return _record_skipped(store, job_name, agent_id, dry_run, args)
        try:
            return _run_locked(store, job_name, fn, agent_id, dry_run, args, budget, llm)
        finally:
            lock_conn.execute(text("SELECT pg_advisory_unlock(hashtext(:k))"),
                              {"k": lock_key(job_name)})
            lock_conn.commit()


# Taken by the runner itself, for every job.
RUNNER_PARAMS = frozenset({"batch_size"})
MAX_BATCH_SIZE = 1_000_000


@dataclass(frozen=True)
class JobParameter:
    """One parameter a job takes: its name, its type as written, its default."""

    name: str
    type: str
    default: Any


def job_parameters(job_name: str, batch_size: int | None = None) -> list[JobParameter]:
    """The parameters job ``job_name`` takes, read from its function's signature, then
    the runner's own (``batch_size``, whose default is the store's setting, passed in).
    A job that takes ``**params`` checks them itself and lists none of them."""
    found = [JobParameter(p.name, str(p.annotation), p.default)
             for p in inspect.signature(job_function(job_name)).parameters.values()
             if p.name != "ctx" and p.kind is not inspect.Parameter.VAR_KEYWORD]
    return [*found, JobParameter("batch_size", "int", batch_size)]


def _check_params(job_name: str, fn: JobFn, params: Mapping[str, Any]) -> None:
    """Refuse a parameter the job does not take, naming it and the ones it takes,
    before anything runs."""
    if "batch_size" in params:
        check.limit(params["batch_size"], "params.batch_size", MAX_BATCH_SIZE)
    accepted = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values()):
        return
    for name in params:
        if (name not in accepted and name not in RUNNER_PARAMS) or name == "ctx":
            valid = [p.name for p in job_parameters(job_name)]
            raise ValidationError(f"params.{name}", f"is not a parameter of job {job_name!r}; "
                                                    f"its parameters: {', '.join(valid)}")


def run_to_completion(store: MemoryStore, job_name: str, *, agent_id: str | None = None,
                      dry_run: bool = False, params: Mapping[str, Any] | None = None,
                      llm: LLM | None = None, time_budget_s: float | None = None) -> RunRecord:
    """Run ``job_name`` again and again until a run completes (or is not ok): what a
    one-off caller wants, where a Celery task would enqueue a follow-up instead."""
    while True:
        record = run_job(store, job_name, agent_id=agent_id, dry_run=dry_run,
                         params=params, time_budget_s=time_budget_s, llm=llm)
        if record.status != "ok" or record.complete:
            return record


def _run_locked(store: MemoryStore, job_name: str, fn: JobFn, agent_id: str | None,
                dry_run: bool, params: dict[str, Any], budget: float,
                llm: LLM | None) -> RunRecord:
    interrupted = _close_interrupted(store, job_name)
    run_id = _insert_run(store, job_name, agent_id, dry_run, params, "running")
    batch_size = int(params.pop("batch_size", store.settings.maintenance_batch_size))
    ctx = JobContext(store=store, run_id=run_id, agent_id=agent_id, dry_run=dry_run,
                     batch_size=batch_size,
                     deadline=time.monotonic() + budget, now=clock.now(), llm=llm)
    started = time.monotonic()
    bound = log.bind(job=job_name, run_id=run_id, agent_id=agent_id, dry_run=dry_run)
    if interrupted:
        bound.warning("maintenance.interrupted_runs_closed", runs=interrupted)
    try:
        outcome = fn(ctx, **params)
    except ValidationError as exc:
        if _refused(exc, fn, params):
            _forget_run(store, run_id)
        else:
            _failed(store, run_id, exc, bound, ctx)
        raise
    except DBAPIError as exc:
        if faults.transient(exc):
            _finish_run(store, run_id, "failed", ctx.failure_stats(),
                        "transient database error; retried")
        else:
            _failed(store, run_id, faults.refusal(exc), bound, ctx)
        raise
    except Exception as exc:  # recorded in the audit, then re-raised for the caller
        _failed(store, run_id, exc, bound, ctx)
        raise
    # The agents whose step failed alone (``JobContext.apart``) are listed; the run is ok.
    stats = {**outcome.stats, **ctx.failure_stats(),
             "duration_ms": round((time.monotonic() - started) * 1000)}
    _finish_run(store, run_id, "ok", stats, None)
    bound.info("maintenance.finished", complete=outcome.complete, **_loggable(stats))
    return RunRecord(run_id, job_name, "ok", stats, outcome.complete)


def _failed(store: MemoryStore, run_id: int, exc: BaseException, bound: Any,
            ctx: JobContext) -> None:
    _finish_run(store, run_id, "failed", ctx.failure_stats(), describe_error(exc))
    bound.exception("maintenance.failed")


def _refused(exc: ValidationError, fn: JobFn, params: Mapping[str, Any]) -> bool:
    """A job checks its request (its parameters, the agent) before it touches anything:
    a ValidationError naming one of them refused the request, and no run took place."""
    named = exc.field.removeprefix("params.")
    return (named in {"params", "agent_id", *params}
            or named in inspect.signature(fn).parameters)


def _loggable(stats: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in stats.items() if isinstance(v, int | float | str | bool)}


# --- the audit: one maintenance_runs row per run ---------------------------------------


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


INTERRUPTED = ("interrupted: its process or the database stopped before it finished; "
               "the next run resumed from its checkpoint")


def _close_interrupted(store: MemoryStore, job_name: str) -> list[int]:
    """Runs of this job still 'running' although we hold the job's fleet-wide lock: their
    process died (or lost the database) mid-run. Recorded as failed, saying so; their
    checkpoints stay, for this run to resume from."""
    with store.session() as session:
        return [int(i) for i in session.execute(text("""
            UPDATE maintenance_runs SET status = 'failed', finished_at = now(), error = :error
            WHERE job = :job AND status = 'running' RETURNING id
        """), {"job": job_name, "error": INTERRUPTED}).scalars()]


def _forget_run(store: MemoryStore, run_id: int) -> None:
    """A refused request leaves no audit row."""
    with store.session() as session:
        session.execute(text("DELETE FROM maintenance_runs WHERE id = :id"), {"id": run_id})


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
