"""Maintenance as the schedule runs it, for the benchmarks that measure memory before and
after it (bench/knowledge.py, bench/locomo.py --maintain)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.common import progress, timer
from memoryd.errors import ValidationError


def scheduled_jobs() -> list[str]:
    """Every job of the effective schedule, in table order."""
    from memoryd.config import get_settings
    from memoryd.schedules.table import effective_schedule

    return [entry.job for entry in effective_schedule(get_settings())]


def run_job_for(store: Any, agent: str, job: str) -> dict[str, Any]:
    """One job to completion for the agent; a job that covers only the whole fleet
    (``index_agents``) runs fleet-wide, as the schedule runs it."""
    from memoryd.memory.maintenance.runner import run_to_completion

    with timer() as clock:
        try:
            record = run_to_completion(store, job, agent_id=agent)
            scope = "agent"
        except ValidationError as exc:
            if exc.field != "agent_id":
                raise
            record, scope = run_to_completion(store, job), "fleet"
    return {"job": job, "scope": scope, "status": record.status,
            "seconds": round(clock.seconds, 3), "stats": record.stats}


def run_maintenance(store: Any, agent: str, jobs: Sequence[str]) -> list[dict[str, Any]]:
    """Each job to completion for the agent, in order (``run_job_for``)."""
    return [run_job_for(store, agent, job)
            for job in progress(jobs, desc="maintenance", unit="job")]
