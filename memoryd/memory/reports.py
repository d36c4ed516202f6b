"""Operator reports read from the database: recent maintenance runs, memories per
agent, memories per embedding model, and what maintenance evicted. Shared by the CLI
(``memoryd jobs history``, ``memoryd stats``, ``memoryd status``, ``memoryd evicted
list``) and the worker tasks behind the gateway's admin endpoints."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd.types import AgentStats, EmbeddingProgress, JobRun


def job_runs(session: Session, job: str | None = None, limit: int = 20) -> list[JobRun]:
    """The newest ``limit`` runs (of ``job``, if given), newest first."""
    rows = session.execute(text("""
        SELECT id, job, agent_id, status, dry_run, started_at, finished_at, stats, error
        FROM maintenance_runs WHERE (CAST(:job AS text) IS NULL OR job = :job)
        ORDER BY started_at DESC, id DESC LIMIT :n
    """), {"job": job, "n": limit}).mappings()
    return [JobRun.model_validate(dict(r)) for r in rows]


def last_runs(session: Session) -> dict[str, dict[str, Any]]:
    """The latest run of each job that ever ran, by job name."""
    rows = session.execute(text("""
        SELECT DISTINCT ON (job) job, status, started_at, finished_at, stats
        FROM maintenance_runs ORDER BY job, started_at DESC, id DESC
    """)).mappings()
    return {r["job"]: dict(r) for r in rows}


def agent_stats(session: Session, limit: int = 50) -> list[AgentStats]:
    """Memories per category of the ``limit`` agents with the most memories."""
    rows = session.execute(text("""
        WITH top AS (SELECT agent_id, count(*) AS n FROM memories GROUP BY agent_id
                     ORDER BY n DESC, agent_id LIMIT :n)
        SELECT m.agent_id, top.n AS total, jsonb_object_agg(m.category, m.count) AS categories
        FROM (SELECT agent_id, category, count(*) AS count FROM memories
              WHERE agent_id IN (SELECT agent_id FROM top) GROUP BY agent_id, category) m
        JOIN top USING (agent_id)
        GROUP BY m.agent_id, top.n ORDER BY top.n DESC, m.agent_id
    """), {"n": limit}).mappings()
    return [AgentStats.model_validate(dict(r)) for r in rows]


def embedding_progress(session: Session, target: str) -> EmbeddingProgress:
    """How far the store is on ``target``: memories per embedding model, and the share
    already on ``target`` (``memoryd status``, ``GET /v1/embeddings``)."""
    counts = {str(model): int(n) for model, n in session.execute(text(
        "SELECT embedding_model, count(*) FROM memories GROUP BY embedding_model "
        "ORDER BY embedding_model")).all()}
    total = sum(counts.values())
    done = counts.get(target, 0)
    return EmbeddingProgress(model=target, memories_by_model=counts,
                             done_percent=round(100.0 * done / total, 1) if total else 100.0)


@dataclass(frozen=True)
class Eviction:
    """One row of ``evicted_memories`` as an operator lists it: its number (what
    ``restore`` takes), and the memory that absorbed it when it was merged. Content
    only when asked for: listings reach terminals and logs."""

    eviction_id: int
    memory_id: str
    agent_id: str
    reason: str
    evicted_at: datetime
    survivor_id: str | None
    content: str | None = None


def evictions(session: Session, *, agent_id: str | None = None, reason: str | None = None,
              limit: int = 50, with_content: bool = False) -> list[Eviction]:
    """The newest ``limit`` evictions (of ``agent_id``, for ``reason``), newest first.
    A merged memory's survivor is the memory holding a ``derived_from`` link to it."""
    rows = session.execute(text("""
        SELECT e.eviction_id, CAST(e.memory_id AS text) AS memory_id, e.agent_id, e.reason,
               e.evicted_at,
               (SELECT CAST(l.source_id AS text) FROM memory_links l
                WHERE l.target_id = e.memory_id AND l.kind = 'derived_from'
                ORDER BY l.created_at LIMIT 1) AS survivor_id,
               CASE WHEN :content THEN e.data ->> 'content' END AS content
        FROM evicted_memories e
        WHERE (CAST(:agent AS text) IS NULL OR e.agent_id = :agent)
          AND (CAST(:reason AS text) IS NULL OR e.reason = :reason)
        ORDER BY e.eviction_id DESC LIMIT :n
    """), {"agent": agent_id, "reason": reason, "n": limit,
           "content": with_content}).mappings()
    return [Eviction(**r) for r in rows]
