"""Every task's message shape, fuzzed against a real worker: hand-crafted messages with
one argument replaced by junk, one left out, or one unknown added. The task either runs
(the junk happened to be valid) or fails with memoryd's ``ValidationError`` naming the
argument (or ``NotFound``), never another exception, and a refused message writes
nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from memoryd.celery_config import MEMORY_QUEUE, celery_config
from memoryd.config import get_settings
from memoryd.errors import NotFound, ValidationError
from memoryd.memory.store import MemoryStore
from memoryd.schedules.names import JOB_NAMES
from tests.support.fuzz import JSON_JUNK, TABLES

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("worker")]

AGENT = "fuzz-tasks"
MEMORY_ID = str(uuid.UUID(int=1))


def _valid() -> dict[str, dict[str, Any]]:
    maintenance = {"agent_id": AGENT, "dry_run": True, "params": {}}
    return {
        "memoryd.store": {"agent_id": AGENT, "content": "A fuzzed memory.",
                          "category": "fact"},
        "memoryd.store_many": {"agent_id": AGENT, "items": [{"content": "Fuzz item."}]},
        "memoryd.recall": {"agent_id": AGENT, "query": "fuzz", "limit": 3, "mode": "fast"},
        "memoryd.context": {"agent_id": AGENT, "query": "fuzz", "limit": 3},
        "memoryd.forget": {"agent_id": AGENT, "memory_id": MEMORY_ID},
        "memoryd.get": {"agent_id": AGENT, "memory_id": MEMORY_ID},
        "memoryd.list": {"agent_id": AGENT, "category": "fact", "limit": 5, "offset": 0,
                         "order": "key"},
        "memoryd.metadata_values": {"agent_id": AGENT, "field": "project", "limit": 5,
                                    "offset": 0, "metadata": {"team": "x"}},
        "memoryd.kg.add": {"agent_id": AGENT, "entity": {"id": "Alice"}},
        "memoryd.kg.query": {"agent_id": AGENT, "start_id": "Alice", "depth": 1},
        "memoryd.sessions": {"agent_id": AGENT},
        "memoryd.session_messages": {"agent_id": AGENT, "session_id": "s", "limit": 5},
        "memoryd.admin.job_runs": {"job": "expire", "limit": 5},
        "memoryd.admin.stats": {"limit": 5},
        "memoryd.admin.embeddings": {},
        "memoryd.admin.restore": {"target": MEMORY_ID},
        **{f"memoryd.maintenance.{job}": dict(maintenance) for job in JOB_NAMES},
        # Fleet-wide: refuses an agent.
        "memoryd.maintenance.index_agents": {**maintenance, "agent_id": None},
    }


CASES = [(task, arg) for task, kwargs in _valid().items() for arg in [*kwargs, "+unknown"]]


@pytest.fixture
def raw_app(worker_broker_url: str) -> Iterator[Celery]:
    app = Celery("memoryd-fuzz", set_as_current=False)
    app.conf.update(celery_config(get_settings(), broker_url=worker_broker_url))
    yield app
    app.close()


def _counts(store: MemoryStore) -> dict[str, int]:
    with store.session() as session:
        return {t: int(session.execute(text(f"SELECT count(*) FROM {t}")).scalar_one())
                for t in TABLES}


def _send(app: Celery, task: str, kwargs: dict[str, Any]) -> Any:
    """Every message goes to the memory queue, maintenance ones included: the worker
    runs a task by its name whatever the queue, and it looks at its second queue only
    once a second when the first is idle (``broker.redis_leases``), which would cost
    the few hundred maintenance messages here a second each."""
    result = app.send_task(task, kwargs=kwargs, queue=MEMORY_QUEUE)
    try:
        result.get(timeout=120, propagate=True, disable_sync_subtasks=False)
    finally:
        result.forget()


@pytest.mark.parametrize(("task", "argument"), CASES, ids=[f"{t}-{a}" for t, a in CASES])
def test_a_hand_crafted_message_is_refused_by_name_or_accepted(
        raw_app: Celery, store: MemoryStore, task: str, argument: str) -> None:
    valid = _valid()[task]

    @settings(max_examples=8, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(junk=JSON_JUNK, drop=st.booleans())
    def check(junk: Any, drop: bool) -> None:
        if argument == "+unknown":
            kwargs, blamed = {**valid, "surprise": junk}, "surprise"
        elif drop:
            kwargs = {k: v for k, v in valid.items() if k != argument}
            blamed = argument
        else:
            kwargs, blamed = {**valid, argument: junk}, argument
        before = _counts(store)
        try:
            _send(raw_app, task, kwargs)
        except ValidationError as exc:
            named = exc.field.split(".")[0].split("[")[0]
            assert named in (blamed, "entity", "items", "id", "job"), (
                f"{task}({blamed}) blamed {exc.field!r}: {exc}")
            assert _counts(store) == before, f"{task} wrote despite refusing {kwargs!r:.120}"
        except NotFound:
            assert _counts(store) == before

    check()
