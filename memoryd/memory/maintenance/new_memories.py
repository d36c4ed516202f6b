"""Memories a job creates (summaries, facts, session gists), written through the one
write path (``memory.writes``) inside the job's own transaction, each linked
``derived_from`` to every memory it came from (``link_derived``): history, recall credit
and erasure follow those links row by row."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd import validation as check
from memoryd.memory import versions, writes
from memoryd.memory.maintenance.context import JobContext


def bounded(value: str, limit: int = check.MAX_KEY,
            max_bytes: int = check.MAX_TEXT_BYTES) -> str:
    """``value`` if it fits a key/source column (in characters and in UTF-8 bytes), else
    its head plus a hash of the whole, so derived keys stay unique and stable for any
    agent-supplied id."""
    encoded = value.encode("utf-8")
    if len(value) <= limit and len(encoded) <= max_bytes:
        return value
    digest = hashlib.sha256(encoded).hexdigest()[:16]
    head = value[:limit - len(digest) - 1].encode("utf-8")[:max_bytes - len(digest) - 1]
    return f"{head.decode('utf-8', 'ignore')}#{digest}"


def prepare_memories(ctx: JobContext, agent_id: str,
                     items: Sequence[Mapping[str, Any]]) -> list[writes.PreparedRow]:
    """Validate and embed memories outside any transaction (embedding is the slow part),
    so the job can then write them with ``writes.write`` in the same short transaction
    as its own bookkeeping: the same checks and dedup as ``MemoryStore.store``."""
    # LLM text can carry a NUL, which validation rightly rejects; failing the whole job
    # on every retry over it would stall maintenance, so it is dropped here.
    cleaned = [{**item, "content": str(item["content"]).replace("\x00", "")} for item in items]
    checked = check.store_items(cleaned, ctx.store.settings.max_content_bytes)
    return writes.prepare(ctx.store.embedder, [(agent_id, item) for item in checked],
                          actor=versions.actor_of_run(ctx.run_id))


_LINK = text("""
INSERT INTO memory_links (agent_id, source_id, target_id, kind)
SELECT :agent_id, p.derived, p.origin, 'derived_from'
FROM unnest(CAST(:derived AS uuid[]), CAST(:origins AS uuid[])) AS p(derived, origin)
WHERE p.derived <> p.origin
ON CONFLICT DO NOTHING
""")


def link_derived(session: Session, agent_id: str,
                 pairs: Iterable[tuple[uuid.UUID, uuid.UUID]]) -> None:
    """Link each (derived, origin) pair ``derived_from`` (source: the derived memory,
    target: the one it came from) in the caller's transaction; a memory never derives
    from itself, and a link made before stays as it is."""
    derived, origins = [], []
    for one, origin in pairs:
        derived.append(one)
        origins.append(origin)
    if derived:
        session.execute(_LINK, {"agent_id": agent_id, "derived": derived, "origins": origins})
