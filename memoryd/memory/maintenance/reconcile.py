"""The ``reconcile`` job (daily): replaced facts that store time missed are superseded.

Store time judges each new memory against the agent's memories it may replace
(``memoryd.memory.detection``), but not every memory was judged there: a bulk import
stored with judging off, a store while the LLM was down, memories from before validity
existed. This job judges them the same way, with cause ``reconcile``: a replacement
judged at or above ``judging.SUPERSEDE_AT`` is applied, an unsure one waits in the
review queue, and each decision names the run (``run:<id>``) as its actor.

The sweep walks current, unarchived memories new or changed since the previous sweep
began (by ``updated_at``, which every insert sets, whatever ``created_at`` a bulk import
gives; the first sweep walks them all) in (updated_at, id) keyset order, in batches of
at most ``batch_size`` and ``MAX_BATCH`` memories. Each batch's memories are judged
agent by agent, each agent's decisions written in one transaction of its own (a failure
of one agent's step is recorded and the others go on); the sweep's position is
checkpointed after each batch, so a follow-up run resumes there. A pair already decided
(applied, in review, rejected or undone by an operator) is never judged again, so a
rejected replacement does not come back to the queue.

Judges: as store time's (``settings.judge``): the LLM beside the offline judge when one
is configured, else the offline judge. With ``judge = off`` (nothing judged at store
time, for the fastest stores) this job still judges, offline: it is how such a
deployment finds its replaced facts; ``MEMORYD_SCHEDULE_RECONCILE=off`` turns it off.
A dry run walks the same memories, judges them and writes nothing; its counts are what
a run would apply and queue.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd.memory import detection, versions
from memoryd.memory.detection import Judges, Said
from memoryd.memory.maintenance.checkpoints import load_checkpoint, save_checkpoint, valid_state
from memoryd.memory.maintenance.context import JobContext, JobOutcome
from memoryd.memory.maintenance.params import check_batch_size
from memoryd.memory.maintenance.sql import NIL_UUID, current
from memoryd.memory.supersession import Decision

CAUSE = "reconcile"
# Memories per batch: each is a candidate search and up to ``detection.CANDIDATES``
# judgements, and a batch is what the time budget and the checkpoint see.
MAX_BATCH = 200
PAIRS_PER_LLM_CALL = 40  # one prompt stays short however many pairs a batch finds
# A new sweep starts this long before the previous one did: a memory written by a
# transaction that began before that sweep but committed after the sweep passed its
# updated_at would otherwise never be judged.
SWEEP_OVERLAP = timedelta(minutes=10)

_BATCH = f"""
SELECT m.id, m.agent_id, m.updated_at, m.content,
       coalesce(m.valid_from, m.created_at) AS valid_from
FROM memories m
WHERE (m.updated_at, m.id) > (CAST(:after_ts AS timestamptz), CAST(:after_id AS uuid))
  -- implied by the line above, but a range the updated_at index can use
  AND m.updated_at >= CAST(:after_ts AS timestamptz)
  AND m.updated_at <= CAST(:until AS timestamptz)
  AND m.archived_at IS NULL AND {current()} AND {{scope}}
ORDER BY m.updated_at, m.id LIMIT :batch"""
# Pairs of the agent already decided one way or another, in either direction.
_DECIDED = text("""
SELECT old_id, new_id FROM memory_supersessions
WHERE agent_id = :a AND (old_id = ANY(CAST(:ids AS uuid[])) OR new_id = ANY(CAST(:ids AS uuid[])))
""")
_STILL_CURRENT = text(f"""
SELECT m.id FROM memories m WHERE m.agent_id = :a AND m.id = ANY(CAST(:ids AS uuid[]))
  AND m.archived_at IS NULL AND {current()}""")


@dataclass
class _Tally:
    """What the run judged and did (or, dry, would do)."""

    scanned: int = 0
    judged: int = 0
    superseded: int = 0
    queued: int = 0
    # A dry run writes nothing, so a pair found again from its other side is counted once here.
    would_supersede: set[uuid.UUID] = field(default_factory=set)
    would_queue: set[frozenset[uuid.UUID]] = field(default_factory=set)

    def stats(self) -> dict[str, Any]:
        return {"scanned": self.scanned, "judged": self.judged,
                "superseded": self.superseded + len(self.would_supersede),
                "queued": self.queued + len(self.would_queue)}


def reconcile(ctx: JobContext) -> JobOutcome:
    """Supersede replaced facts that store time did not judge (bulk imports, an LLM that
    was down, memories from before validity); unsure ones go to the review queue."""
    check_batch_size(ctx)
    previous = valid_state(load_checkpoint(ctx, "reconcile").get("sweep"),
                           ("since", "started", "after_ts", "after_id", "done"))
    resumed = previous is not None and not previous["done"]
    sweep = previous if previous is not None and resumed else _new_sweep(ctx, previous)
    judges = judges_for(ctx)
    tally = _Tally()
    complete = _walk(ctx, judges, sweep, tally)
    stats = {**tally.stats(), "judge": _label(judges), "resumed": resumed,
             "checkpoint": {"sweep": sweep}}
    return JobOutcome(stats, complete)


def judges_for(ctx: JobContext) -> Judges:
    """Store time's judges; the offline judge where store time judges nothing. The run's
    own LLM (``run_job(llm=...)``) stands in for the configured one."""
    return Judges.configured(ctx.store.settings, ctx.llm) or Judges()


def _label(judges: Judges) -> str:
    return "offline" if judges.llm is None else "offline+llm"


def _new_sweep(ctx: JobContext, previous: dict[str, Any] | None) -> dict[str, Any]:
    """A sweep over what changed since the previous one began (everything, the first
    time), up to now."""
    with ctx.store.session() as session:
        # The database clock, because updated_at is written with it.
        started: datetime = session.execute(text("SELECT now()")).scalar_one()
    since = ("-infinity" if previous is None else
             (datetime.fromisoformat(str(previous["started"])) - SWEEP_OVERLAP).isoformat())
    return {"since": since, "started": started.isoformat(), "after_ts": since,
            "after_id": NIL_UUID, "done": False}


def _walk(ctx: JobContext, judges: Judges, sweep: dict[str, Any], tally: _Tally) -> bool:
    """Judge the sweep's batches from its position on; whether it finished."""
    batch = min(ctx.batch_size, MAX_BATCH)
    statement = text(_BATCH.format(scope=ctx.agent_clause()))
    while True:
        with ctx.store.session() as session:
            rows = session.execute(statement, {
                "after_ts": sweep["after_ts"], "after_id": sweep["after_id"],
                "until": sweep["started"], "agent_id": ctx.agent_id, "batch": batch}).all()
        tally.scanned += len(rows)
        for agent_id, fresh in _by_agent(rows).items():
            ctx.apart("reconcile", partial(_reconcile_agent, ctx, judges, agent_id, fresh,
                                           tally), agent_id=agent_id)
        if rows:
            sweep["after_ts"], sweep["after_id"] = rows[-1].updated_at.isoformat(), str(rows[-1].id)
        sweep["done"] = len(rows) < batch
        with ctx.store.session() as session:
            save_checkpoint(session, ctx, {"sweep": sweep})
        if sweep["done"]:
            return True
        # A dry run has no checkpoint to resume from, so it never stops half-way.
        if ctx.out_of_time() and not ctx.dry_run:
            return False


def _by_agent(rows: Sequence[Any]) -> dict[str, list[Said]]:
    grouped: dict[str, list[Said]] = {}
    for row in rows:
        grouped.setdefault(row.agent_id, []).append(Said(row.id, row.content, row.valid_from))
    return grouped


def _reconcile_agent(ctx: JobContext, judges: Judges, agent_id: str, fresh: Sequence[Said],
                     tally: _Tally) -> None:
    """Judge one agent's memories of the batch against their candidates, then apply and
    queue what the judges decided in one transaction. The judges (an LLM call, maybe)
    work outside any transaction."""
    with ctx.store.session() as session:
        pairs = _undecided(session, agent_id, detection.candidate_pairs(
            session, agent_id, fresh, offline=judges.llm is None))
    tally.judged += len(pairs)
    applied, queued = _decide(pairs, judges)
    if not applied and not queued:
        return
    if ctx.dry_run:
        tally.would_supersede.update(d.old_id for d in applied)
        tally.would_queue.update(frozenset((d.old_id, d.new_id)) for d in queued)
        return
    actor = versions.actor_of_run(ctx.run_id)
    with ctx.store.write_session(agent_id) as session:
        applied, queued = _still_current(session, agent_id, applied, queued)
        outcome = detection.record(session, agent_id, applied, queued, actor=actor)
    tally.superseded += sum(len(olds) for olds in outcome.superseded.values())
    tally.queued += outcome.queued


def _decide(pairs: Sequence[tuple[Said, Said]], judges: Judges
            ) -> tuple[list[Decision], list[Decision]]:
    """``detection.decide`` over ``pairs``, a few dozen per LLM call."""
    applied: list[Decision] = []
    queued: list[Decision] = []
    for start in range(0, len(pairs), PAIRS_PER_LLM_CALL):
        more_applied, more_queued = detection.decide(
            pairs[start:start + PAIRS_PER_LLM_CALL], judges, CAUSE)
        applied += more_applied
        queued += more_queued
    return applied, queued


def _undecided(session: Session, agent_id: str, pairs: list[tuple[Said, Said]]
               ) -> list[tuple[Said, Said]]:
    """``pairs`` less those decided before: applied, waiting for review, rejected or
    undone, whichever way round."""
    if not pairs:
        return []
    ids = sorted({str(s.id) for pair in pairs for s in pair})
    decided = {frozenset((r.old_id, r.new_id))
               for r in session.execute(_DECIDED, {"a": agent_id, "ids": ids})}
    return [(a, b) for a, b in pairs if frozenset((a.id, b.id)) not in decided]


def _still_current(session: Session, agent_id: str, applied: list[Decision],
                   queued: list[Decision]) -> tuple[list[Decision], list[Decision]]:
    """The decisions whose two memories are both still current: while the judges
    worked, a store may have replaced one or an agent forgotten it."""
    ids = sorted({str(i) for d in (*applied, *queued) for i in (d.old_id, d.new_id)})
    held = set(session.execute(_STILL_CURRENT, {"a": agent_id, "ids": ids}).scalars())
    keep = [d for d in applied if {d.old_id, d.new_id} <= held]
    return keep, [d for d in queued if {d.old_id, d.new_id} <= held]
