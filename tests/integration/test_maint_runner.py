"""Running jobs: ``run_to_completion`` repeats ``run_job`` until a run completes, and
an unknown job is refused before anything is recorded."""

from __future__ import annotations

import pytest

from memoryd.errors import ValidationError
from memoryd.memory.maintenance import run_to_completion
from memoryd.memory.store import MemoryStore
from tests.support.maint import bulk_insert, count, scalar


def test_run_to_completion_runs_until_the_work_is_done(store: MemoryStore) -> None:
    bulk_insert(store, "a", 10)
    # A budget spent at once: every run does one batch of 3 and asks for a follow-up.
    record = run_to_completion(store, "evict", params={"batch_size": 3}, time_budget_s=1e-6)
    assert record.status == "ok" and record.complete
    assert count(store) == 0
    runs = scalar(store, "SELECT count(*) FROM maintenance_runs WHERE job = 'evict'")
    assert runs == 4  # 3 + 3 + 3 + 1


def test_run_to_completion_of_a_dry_run_changes_nothing(store: MemoryStore) -> None:
    bulk_insert(store, "a", 5)
    record = run_to_completion(store, "evict", dry_run=True)
    assert record.complete and record.stats["age"] == 5
    assert count(store) == 5


def test_an_unknown_job_is_refused_before_anything_is_recorded(store: MemoryStore) -> None:
    with pytest.raises(ValidationError, match="unknown job 'evicts'"):
        run_to_completion(store, "evicts")
    assert scalar(store, "SELECT count(*) FROM maintenance_runs") == 0
