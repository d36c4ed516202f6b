"""Memories a job creates (summaries, facts, session gists), written through the one
write path (``memory.writes``) inside the job's own transaction."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from memoryd import validation as check
from memoryd.memory import writes
from memoryd.memory.maintenance.context import JobContext


def bounded(value: str, limit: int = check.MAX_KEY) -> str:
    """``value`` if it fits a key/source column, else its head plus a hash of the whole,
    so derived keys stay unique and stable for any agent-supplied id."""
    if len(value) <= limit:
        return value
    digest = hashlib.sha256(value.encode("utf-8")).hexdigest()[:16]
    return f"{value[:limit - len(digest) - 1]}#{digest}"


def prepare_memories(ctx: JobContext, agent_id: str,
                     items: Sequence[Mapping[str, Any]]) -> list[writes.PreparedRow]:
    """Validate and embed memories outside any transaction (embedding is the slow part),
    so the job can then write them with ``writes.write`` in the same short transaction
    as its own bookkeeping: the same checks and dedup as ``MemoryStore.store``."""
    # LLM text can carry a NUL, which validation rightly rejects; failing the whole job
    # on every retry over it would stall maintenance, so it is dropped here.
    cleaned = [{**item, "content": str(item["content"]).replace("\x00", "")} for item in items]
    checked = check.store_items(cleaned, ctx.store.settings.max_content_bytes)
    return writes.prepare(ctx.store.embedder, [(agent_id, item) for item in checked])
