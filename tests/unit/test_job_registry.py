"""The jobs are listed once (``memoryd.memory.maintenance.jobs``): the schedule table,
the Celery tasks and the thin client's names are derived from it or kept equal to it."""

from __future__ import annotations

import inspect

from memoryd.memory.maintenance.jobs import JOBS as JOB_FUNCTIONS
from memoryd.schedules.names import JOB_NAMES
from memoryd.schedules.table import DEFAULT_SCHEDULE, JOBS


def test_every_job_of_the_table_is_registered_under_its_function_name() -> None:
    assert list(JOBS) == [entry.job for entry in DEFAULT_SCHEDULE]
    for name, entry in JOBS.items():
        assert entry.fn.__name__ == name
        assert entry.fn.__module__ == f"memoryd.memory.maintenance.{name}"


def test_the_table_times_every_job_once_in_the_jobs_order() -> None:
    assert [(job, entry.fn) for job, entry in JOBS.items()] == list(JOB_FUNCTIONS.items())
    assert len(DEFAULT_SCHEDULE) == len(JOB_FUNCTIONS)


def test_the_thin_clients_job_names_are_the_tables_in_order() -> None:
    assert tuple(JOBS) == JOB_NAMES


def test_every_job_has_one_celery_task_named_after_it() -> None:
    from memoryd.tasks.maintenance import TASKS

    assert list(TASKS) == list(JOBS)
    assert [task.name for task in TASKS.values()] == [f"memoryd.maintenance.{j}" for j in JOBS]


def test_each_description_is_the_first_paragraph_of_the_jobs_docstring() -> None:
    for entry in DEFAULT_SCHEDULE:
        doc = inspect.getdoc(entry.fn)
        assert doc is not None, entry.job
        assert entry.description == " ".join(doc.split("\n\n")[0].split())
        assert entry.description.endswith("."), entry.job


def test_deduplicate_is_described_as_merging_identical_content() -> None:
    # It once read "near-duplicate", which is consolidate's merge by embedding.
    assert "identical" in JOBS["deduplicate"].description
    assert "near-duplicate" in JOBS["consolidate"].description
