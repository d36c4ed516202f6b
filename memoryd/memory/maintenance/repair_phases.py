"""The phases of ``repair_sessions``, as pure functions over one session's list.

Each returns the repaired list and how many references it changed, so the job can
count every kind of damage separately and tests need no database.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from memoryd.memory.maintenance.session_lists import as_uuid, ref_id

TRUNCATION_MARKER = "… [truncated by memoryd repair; full text in evicted_memories]"


@dataclass
class MemoryInfo:
    """What repair needs to know about a referenced memory."""

    size: int  # bytes of content
    content_hash: str
    protected: bool  # pinned or a decision: never merged away or rewritten


def norm_id(memory_id: str) -> str:
    parsed = as_uuid(memory_id)
    return str(parsed) if parsed is not None else memory_id


def drop_missing_ids(messages: Sequence[Any]) -> tuple[list[dict[str, Any]], int]:
    """Phase 1: references that are not objects, or have no (or an empty) id."""
    kept = [ref for ref in messages if ref_id(ref) is not None]
    return kept, len(messages) - len(kept)


def drop_duplicates(refs: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Phase 2: later references to an id already in the list (the first one stays)."""
    seen: set[str] = set()
    kept = []
    for ref in refs:
        key = norm_id(str(ref["id"]))
        if key not in seen:
            seen.add(key)
            kept.append(ref)
    return kept, len(refs) - len(kept)


def drop_orphans(refs: Sequence[dict[str, Any]],
                 existing: Mapping[str, MemoryInfo]) -> tuple[list[dict[str, Any]], int]:
    """Phase 4: references to memories that no longer exist (or never could: not a UUID)."""
    kept = [ref for ref in refs if norm_id(str(ref["id"])) in existing]
    return kept, len(refs) - len(kept)


def _parse_ts(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def sort_by_ts(refs: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Phase 5: stable sort by timestamp; returns how many references moved.

    A reference without a readable ts sorts with its predecessor, so it is never thrown
    to one end of the list on a guess.
    """
    keys: list[datetime] = []
    last = datetime.min.replace(tzinfo=UTC)
    for ref in refs:
        parsed = _parse_ts(ref.get("ts"))
        if parsed is not None:
            last = parsed
        keys.append(last)
    order = sorted(range(len(refs)), key=keys.__getitem__)
    return [refs[i] for i in order], sum(1 for pos, i in enumerate(order) if pos != i)


def merge_runs(refs: Sequence[dict[str, Any]],
               existing: Mapping[str, MemoryInfo]) -> list[list[str]]:
    """Phase 3 (planning): runs of two or more consecutive messages of the same role.

    System messages (summaries) and messages without a role are never merged; pinned
    memories and decisions break a run, because they must not be merged away or edited.
    """
    runs: list[list[str]] = []
    current: list[str] = []
    role: object = None
    for ref in refs:
        memory_id = norm_id(str(ref["id"]))
        this_role = ref.get("role")
        mergeable = (isinstance(this_role, str) and this_role != "system"
                     and not existing[memory_id].protected)
        if mergeable and current and this_role == role:
            current.append(memory_id)
            continue
        if len(current) > 1:
            runs.append(current)
        current, role = ([memory_id] if mergeable else []), this_role
    if len(current) > 1:
        runs.append(current)
    return runs


def without_ids(refs: Sequence[dict[str, Any]], gone: Set[str]) -> list[Any]:
    """The list without the references to ``gone`` (memories merged away)."""
    return [ref for ref in refs if norm_id(str(ref["id"])) not in gone]


def truncate_text(content: str, max_bytes: int) -> str:
    """``content`` cut to at most ``max_bytes`` UTF-8 bytes including the marker line."""
    marker = f"\n{TRUNCATION_MARKER}"
    budget = max_bytes - len(marker.encode("utf-8"))
    head = content.encode("utf-8")[:budget].decode("utf-8", errors="ignore")
    return head.rstrip() + marker
