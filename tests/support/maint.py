"""Helpers shared by the maintenance job tests (decay, eviction, dedup, sessions, cortex,
summarize).

Rows are written through ``MemoryStore.store_many`` (real embeddings) or, for bulk
data whose meaning does not matter, one set-based INSERT reusing a single embedding.
Fields the store API does not take (pinned, confidence, access times) are set with
plain UPDATEs, the way agents' activity and earlier jobs would have left them.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from memoryd import clock
from memoryd.errors import LLMUnavailable
from memoryd.memory.embeddings import configured_model
from memoryd.memory.llm import set_llm
from memoryd.memory.maintenance import RunRecord, run_job
from memoryd.memory.store import MemoryStore


def days_ago(days: float) -> datetime:
    return datetime.now(UTC) - timedelta(days=days)


def add(store: MemoryStore, agent: str, content: str, **fields: Any) -> uuid.UUID:
    """Store one memory; ``fields`` the store does not take are applied afterwards."""
    store_fields = {k: fields.pop(k) for k in ("category", "importance", "tags", "key",
                                               "created_at", "expires_at", "metadata")
                    if k in fields}
    store_fields.setdefault("category", "fact")
    store_fields.setdefault("importance", 0.5)
    result = store.store(agent, content, **store_fields)
    assert result.stored, content
    if fields:
        update(store, [result.id], **fields)
    return result.id


def update(store: MemoryStore, ids: Sequence[uuid.UUID], **columns: Any) -> None:
    sets = ", ".join(f"{col} = :{col}" for col in columns)
    with store.session() as session:
        session.execute(text(f"UPDATE memories SET {sets} WHERE id = ANY(:ids)"),
                        {**columns, "ids": list(ids)})


def bulk_insert(store: MemoryStore, agent: str, n: int, *, prefix: str = "note",
                importance: float = 0.1, age_days: float = 60,
                confidence: float = 1.0) -> None:
    """``n`` distinct memories in one INSERT. Their embeddings are random directions
    (nearly orthogonal in 384 dimensions), so no two are near-duplicates."""
    with store.session() as session:
        session.execute(text("""
            INSERT INTO memories (agent_id, content, content_hash, category, importance,
                                  confidence, created_at, updated_at, embedding,
                                  embedding_model)
            SELECT CAST(:agent AS text), CAST(:prefix AS text) || ' number ' || i,
                   md5(CAST(:agent AS text) || CAST(:prefix AS text) || i), 'fact',
                   :importance, :confidence, now() - make_interval(days => :age), now(),
                   (SELECT CAST(array_agg(random() - 0.5) AS vector)
                    FROM generate_series(1, 384) WHERE i > 0),  -- correlated: one per row
                   CAST(:model AS text)
            FROM generate_series(1, :n) AS i
        """), {"agent": agent, "prefix": prefix, "importance": importance,
               "model": configured_model(store.settings),
               "confidence": confidence, "age": age_days, "n": n})


Snapshot = dict[uuid.UUID, tuple[Any, ...]]


def snapshot(store: MemoryStore) -> Snapshot:
    """What the jobs may change, per memory."""
    with store.session() as session:
        rows = session.execute(text(
            "SELECT id, agent_id, confidence, importance, access_count, tags, updated_at "
            "FROM memories")).all()
    return {r.id: (r.agent_id, r.confidence, r.importance, r.access_count, tuple(r.tags),
                   r.updated_at) for r in rows}


def memory(store: MemoryStore, memory_id: uuid.UUID) -> Any:
    with store.session() as session:
        return session.execute(text("SELECT * FROM memories WHERE id = :id"),
                               {"id": memory_id}).one_or_none()


def evicted(store: MemoryStore) -> dict[uuid.UUID, tuple[str, int | None]]:
    """memory_id -> (reason, run_id) of everything in evicted_memories."""
    with store.session() as session:
        rows = session.execute(text(
            "SELECT memory_id, reason, run_id FROM evicted_memories")).all()
    return {r.memory_id: (r.reason, r.run_id) for r in rows}


def links(store: MemoryStore) -> set[tuple[uuid.UUID, uuid.UUID, str]]:
    with store.session() as session:
        rows = session.execute(text("SELECT source_id, target_id, kind FROM memory_links")).all()
    return {(r.source_id, r.target_id, r.kind) for r in rows}


def count(store: MemoryStore, table: str = "memories") -> int:
    with store.session() as session:
        return int(session.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


def run(store: MemoryStore, job: str, **kwargs: Any) -> RunRecord:
    """Run ``job`` through the framework and check its audit row agrees."""
    record = run_job(store, job, **kwargs)
    assert record.status == "ok", record
    with store.session() as session:
        row = session.execute(text(
            "SELECT job, status, stats, dry_run, agent_id, finished_at "
            "FROM maintenance_runs WHERE id = :id"), {"id": record.run_id}).one()
    assert (row.job, row.status, row.dry_run) == (job, "ok", kwargs.get("dry_run", False))
    assert row.agent_id == kwargs.get("agent_id")
    assert row.finished_at is not None
    assert row.stats == json.loads(json.dumps(record.stats))  # all of it JSON as returned
    return record


@contextmanager
def clock_at(moment: datetime) -> Iterator[None]:
    """Run the jobs' clock at ``moment`` (the database keeps its own)."""
    clock.set_clock(lambda: moment)
    try:
        yield
    finally:
        clock.set_clock(None)


def run_evict_in_child(pg_url: str, batch_size: int) -> None:
    """Target of the crash test's child process (spawned, so importable by name)."""
    store = MemoryStore(pg_url)
    try:
        run_job(store, "evict", params={"batch_size": batch_size})
    finally:
        store.engine.dispose()


# --- shared by the LLM-driven job tests (sessions, cortex, summarize) --------------------


@dataclass
class FakeLLM:
    """Implements the LLM protocol; records every call in ``prompts`` and ``calls``
    (system, prompt).

    The reply to call number n (1-based): ``facts`` when set and the system prompt asks for
    durable facts; else ``gist`` when set; else ``reply(prompt, n)`` when given; else
    ``f"{word} {n}."``. From call number ``fail_on`` (0-based) on it raises
    ``LLMUnavailable(error, retry_after=retry_after)``. ``during`` runs inside each call
    (to interleave an agent's writes deterministically), then it sleeps ``delay_s``.
    """

    name: str = "fake-model"
    word: str = "Chunk summary"
    reply: Callable[[str, int], str] | None = None
    facts: str | None = None
    gist: str | None = None
    fail_on: int | None = None
    error: str = "overloaded"
    retry_after: float = 5.0
    during: Callable[[], None] | None = None
    delay_s: float = 0.0
    prompts: list[str] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)

    def complete(self, system: str, prompt: str, max_tokens: int) -> str:
        if self.fail_on is not None and len(self.prompts) >= self.fail_on:
            raise LLMUnavailable(self.error, retry_after=self.retry_after)
        self.prompts.append(prompt)
        self.calls.append((system, prompt))
        if self.during is not None:
            self.during()
        if self.delay_s:
            time.sleep(self.delay_s)
        n = len(self.prompts)
        if self.facts is not None and "durable facts" in system:
            return self.facts
        if self.gist is not None:
            return self.gist
        if self.reply is not None:
            return self.reply(prompt, n)
        return f"{self.word} {n}."


def frozen_clock() -> Iterator[datetime]:
    """The body of the autouse ``frozen_now`` fixtures: the jobs' clock stopped at the
    current time (yielded), no LLM override; the clock is restored afterwards."""
    now = datetime.now(UTC)
    clock.set_clock(lambda: now)
    set_llm(None)
    yield now
    clock.set_clock(None)


def memory_row(store: MemoryStore, memory_id: str) -> Any:
    """The memory's row as a mapping, or None when there is no such memory."""
    with store.session() as session:
        return session.execute(text("SELECT * FROM memories WHERE id = :id"),
                               {"id": memory_id}).mappings().first()


def scalar(store: MemoryStore, sql: str, **params: Any) -> Any:
    with store.session() as session:
        return session.execute(text(sql), params).scalar_one()
