"""The phases of ``repair_sessions`` as pure functions over one session's list: no
database. (The phases on a real session, and the writes, are in test_maint_sessions.)"""

from __future__ import annotations

import uuid
from typing import Any

from memoryd.memory.maintenance.repair_phases import (
    TRUNCATION_MARKER,
    MemoryInfo,
    drop_duplicates,
    drop_missing_ids,
    drop_orphans,
    merge_runs,
    sort_by_ts,
    truncate_text,
    without_ids,
)

A, B, C, D = (str(uuid.UUID(int=i)) for i in range(1, 5))


def ref(memory_id: str, role: str | None = "user", ts: str | None = None) -> dict[str, Any]:
    return {"id": memory_id, "role": role, "ts": ts}


def info(protected: bool = False) -> MemoryInfo:
    return MemoryInfo(size=10, content_hash="h", protected=protected)


def test_references_without_a_usable_id_are_dropped() -> None:
    kept, dropped = drop_missing_ids([ref(A), {"role": "user"}, ref(""), "text", ref(B)])
    assert kept == [ref(A), ref(B)] and dropped == 3


def test_a_repeated_id_is_dropped_whatever_its_spelling_and_the_first_stays() -> None:
    kept, dropped = drop_duplicates([ref(A, ts="1"), ref(B), ref(A.upper(), ts="2")])
    assert kept == [ref(A, ts="1"), ref(B)] and dropped == 1


def test_references_to_memories_that_do_not_exist_are_orphans() -> None:
    kept, dropped = drop_orphans([ref(A), ref(B), ref("not-a-uuid")], {A: info()})
    assert kept == [ref(A)] and dropped == 2


def test_sort_is_stable_and_keeps_unreadable_timestamps_with_their_predecessor() -> None:
    refs = [{"id": "1", "ts": "2026-01-01T10:00:00+00:00"}, {"id": "2", "ts": "garbage"},
            {"id": "3", "ts": "2026-01-01T09:00:00Z"}, {"id": "4", "ts": "2026-01-01T09:00:00"}]
    ordered, moved = sort_by_ts(refs)
    assert [r["id"] for r in ordered] == ["3", "4", "1", "2"] and moved == 4


def test_runs_are_consecutive_messages_of_one_role() -> None:
    refs = [ref(A), ref(B), ref(C, "assistant"), ref(D, "assistant")]
    existing = {i: info() for i in (A, B, C, D)}
    assert merge_runs(refs, existing) == [[A, B], [C, D]]


def test_system_messages_messages_without_a_role_and_protected_ones_break_runs() -> None:
    existing = {A: info(), B: info(protected=True), C: info(), D: info()}
    assert merge_runs([ref(A), ref(B), ref(C), ref(D, "system")], existing) == []
    assert merge_runs([ref(A, None), ref(C, None)], existing) == []


def test_merged_away_references_leave_the_list() -> None:
    assert without_ids([ref(A), ref(B.upper()), ref(C)], {B}) == [ref(A), ref(C)]


def test_truncate_text_respects_utf8_boundaries() -> None:
    cut = truncate_text("é" * 2000, 1024)
    assert len(cut.encode()) <= 1024 and cut.endswith(TRUNCATION_MARKER)
    assert cut.startswith("é")
