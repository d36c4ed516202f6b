"""Mapping database rows to memoryd's result types."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memoryd.types import Memory

# Every column a caller can see; the embedding and tsvector stay in the database.
MEMORY_COLUMNS = (
    "id", "agent_id", "content", "role", "session_id", "key", "category", "tags", "source",
    "metadata", "importance", "confidence", "pinned", "access_count", "last_accessed_at",
    "created_at", "updated_at", "expires_at", "archived_at",
)


def select_list(alias: str = "m") -> str:
    """``m.id, m.agent_id, ...`` for raw SQL."""
    return ", ".join(f"{alias}.{col}" for col in MEMORY_COLUMNS)


def to_memory(row: Mapping[Any, Any]) -> Memory:
    data = {col: row[col] for col in MEMORY_COLUMNS}
    data["tags"] = tuple(data["tags"] or ())
    data["metadata"] = data["metadata"] or {}
    return Memory.model_validate(data)
