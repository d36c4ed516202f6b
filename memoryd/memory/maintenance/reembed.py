"""The ``reembed`` job: memories embedded by another model than the store's are embedded
again with the store's, in bounded batches (every agent's, or one agent's).

A batch reads up to ``batch_size`` (at most ``MAX_BATCH``) rows of one other model in
(agent, id) order, embeds their contents outside any transaction, then writes vectors
and model in one statement that skips rows edited meanwhile (an edit embeds with the
store's model already). The position in that order is checkpointed with the batch, so a
run resumes where the last one stopped and never walks back over the index entries its
own updates left behind.
When the walk reaches the end it starts over once, for rows that came back behind it
(a restored eviction keeps its old model); a run that finds nothing left is complete.

Recall keeps working throughout: an agent with memories of two models is searched once
per model, each with the query embedded by that model (``MemoryStore._candidates``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text

from memoryd.memory import writes
from memoryd.memory.maintenance.checkpoints import load_checkpoint, save_checkpoint, valid_state
from memoryd.memory.maintenance.context import JobContext, JobOutcome
from memoryd.memory.maintenance.params import check_batch_size
from memoryd.memory.recall import store_models

_START = ("", "00000000-0000-0000-0000-000000000000")  # before every (agent, id)
# Rows per batch at most, whatever the maintenance batch size: a batch is embedded before
# the time budget is checked again, so one batch must stay seconds of work, not the tens
# of seconds a default-sized maintenance batch would take to embed.
MAX_BATCH = 500

_WRITE = text("""
UPDATE memories m SET embedding = CAST(v.vector AS vector), embedding_model = :target
FROM unnest(CAST(:ids AS uuid[]), CAST(:hashes AS text[]), CAST(:vectors AS text[]))
     AS v(id, hash, vector)
WHERE m.id = v.id AND m.content_hash = v.hash AND m.embedding_model = :model""")


@dataclass
class _Position:
    """Where the walk stands: after (agent, id) among ``model``'s rows."""

    model: str
    agent: str
    id: str

    def as_dict(self, target: str) -> dict[str, str]:
        return {"target": target, "model": self.model, "agent": self.agent, "id": self.id}


def reembed(ctx: JobContext) -> JobOutcome:
    """Embed memories of other models again with the store's model."""
    check_batch_size(ctx)
    target = ctx.store.embedder.name
    if ctx.dry_run:
        return JobOutcome({"model": target, "would_reembed": _count_others(ctx, target)})
    stats: dict[str, Any] = {"model": target, "reembedded": 0, "edited_meanwhile": 0}
    position = _resume(ctx, target)
    restarted = position is None
    while not ctx.out_of_time():
        if position is None:
            position = _first(ctx, target, after=None)
        batch = _batch(ctx, position) if position is not None else []
        if position is not None and batch:
            position = _write(ctx, target, position.model, batch, stats)
            continue
        position = _first(ctx, target, after=position.model) if position else None
        if position is None:  # at the end of the last model
            if restarted:  # done: the next run starts afresh
                return JobOutcome({**stats, "checkpoint": _save_end(ctx, target)})
            restarted = True  # once more from the start, for rows that came back behind
    checkpoint = position.as_dict(target) if position else None
    return JobOutcome({**stats, "checkpoint": checkpoint}, complete=False)


def _resume(ctx: JobContext, target: str) -> _Position | None:
    state = valid_state(load_checkpoint(ctx, "reembed"), ("target", "model", "agent", "id"))
    if state is None or state["target"] != target:
        return None
    return _Position(state["model"], state["agent"], state["id"])


def _first(ctx: JobContext, target: str, after: str | None) -> _Position | None:
    """The start of the first model other than ``target`` (after ``after``), if any."""
    with ctx.store.session() as session:
        models = [m for m in store_models(session) if m != target]
    following = [m for m in models if after is None or m > after]
    return _Position(following[0], *_START) if following else None


def _batch(ctx: JobContext, position: _Position) -> list[Any]:
    with ctx.store.session() as session:
        return list(session.execute(text(f"""
            SELECT m.id, m.agent_id, m.content, m.content_hash FROM memories m
            WHERE m.embedding_model = :model AND {ctx.agent_clause()}
              AND (m.agent_id, m.id) > (:agent, CAST(:id AS uuid))
            ORDER BY m.agent_id, m.id LIMIT :batch
        """), {"model": position.model, "agent_id": ctx.agent_id, "agent": position.agent,
               "id": position.id, "batch": min(ctx.batch_size, MAX_BATCH)}).all())


def _write(ctx: JobContext, target: str, model: str, batch: Sequence[Any],
           stats: dict[str, Any]) -> _Position:
    """Embed the batch (outside any transaction), then write it with its checkpoint."""
    vectors = writes.embed_texts(ctx.store.embedder, [row.content for row in batch])
    last = _Position(model, str(batch[-1].agent_id), str(batch[-1].id))
    with ctx.store.session() as session:
        result: Any = session.execute(_WRITE, {
            "ids": [row.id for row in batch], "hashes": [row.content_hash for row in batch],
            "vectors": vectors, "model": model, "target": target})
        written = int(result.rowcount)
        save_checkpoint(session, ctx, last.as_dict(target))
    stats["reembedded"] += written
    stats["edited_meanwhile"] += len(batch) - written
    return last


def _save_end(ctx: JobContext, target: str) -> dict[str, str]:
    """A checkpoint without a position: the next run starts from the beginning."""
    checkpoint = {"target": target}
    with ctx.store.session() as session:
        save_checkpoint(session, ctx, checkpoint)
    return checkpoint


def _count_others(ctx: JobContext, target: str) -> int:
    with ctx.store.session() as session:
        return int(session.execute(text(f"""
            SELECT count(*) FROM memories m
            WHERE m.embedding_model <> :target AND {ctx.agent_clause()}
        """), {"target": target, "agent_id": ctx.agent_id}).scalar_one())
