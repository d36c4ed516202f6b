"""The columns of ``memories`` as memoryd's SQL names them, and rows mapped to results.

Every column list is derived from one of two definitions, so adding a column cannot
leave a statement behind: what callers see is ``types.Memory``'s fields, and what a
row stores is the ORM mirror of the schema (``db.models.MemoryRow``) minus the
columns PostgreSQL generates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memoryd.db.models import MemoryRow
from memoryd.types import Memory

# Every column a caller can see; the embedding and tsvector stay in the database.
MEMORY_COLUMNS: tuple[str, ...] = tuple(Memory.model_fields)

# Every column a row stores, in table order: what moving a memory out and back copies.
STORED_COLUMNS: tuple[str, ...] = tuple(
    column.name for column in MemoryRow.__table__.columns if column.computed is None)


# What ranking reads of a candidate's row (``scoring.components``, ``recall.adjacent``):
# all the candidate query returns of it. The whole row is read only for the hits a
# recall returns (``recall.touch``), a few of its dozens of candidates.
RANKED_COLUMNS: tuple[str, ...] = ("id", "session_id", "category", "importance", "confidence",
                                   "created_at", "about")


def select_list(alias: str = "m") -> str:
    """``m.id, m.agent_id, ...`` for raw SQL."""
    return ", ".join(f"{alias}.{col}" for col in MEMORY_COLUMNS)


def column_list(columns: tuple[str, ...], alias: str | None = None) -> str:
    """``columns`` comma-separated, each prefixed with ``alias.`` if given."""
    return ", ".join(f"{alias}.{col}" if alias else col for col in columns)


def to_memory(row: Mapping[Any, Any]) -> Memory:
    data = {col: row[col] for col in MEMORY_COLUMNS}
    data["tags"] = tuple(data["tags"] or ())
    data["metadata"] = data["metadata"] or {}
    # Rows written before validity existed became true when they were stored.
    data["valid_from"] = data["valid_from"] or data["created_at"]
    return Memory.model_validate(data)
