"""No slow first hour: an agent recalled past MEMORYD_AGENT_INDEX_MIN_MEMORIES without an
index of its own gets one soon after, through a real worker, not at the next hourly run."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import text

from memoryd.client import MemoryClient
from memoryd.memory.agent_indexes import IndexWatch, index_name
from memoryd.memory.store import MemoryStore
from tests.support.workers import redis_db_url

pytestmark = pytest.mark.slow

INDEX_DB = 7  # this file's own broker database
LINE, EXACT = 60, 50  # the index line and the exact-search threshold of this test's worker


def _has_index(store: MemoryStore, agent: str) -> bool:
    with store.session() as session:
        return bool(session.execute(text("SELECT to_regclass(:n) IS NOT NULL"),
                                    {"n": index_name(agent)}).scalar_one())


def _built(store: MemoryStore) -> int:
    """How many indexes the audited, finished index_agents runs built."""
    with store.session() as session:
        return int(session.execute(text(
            "SELECT coalesce(sum((stats->>'built')::int), 0) FROM maintenance_runs "
            "WHERE job = 'index_agents' AND status = 'ok'")).scalar_one())


def _notes(count: int) -> list[dict[str, Any]]:
    return [{"content": f"Field note {i}: a heron stood in the reeds at dawn."}
            for i in range(count)]


def test_a_large_agent_gets_its_index_soon_after_it_first_recalls(
        spawn_worker: Callable[..., Any], store: MemoryStore, redis_url: str) -> None:
    worker = spawn_worker(INDEX_DB, concurrency=2,
                          MEMORYD_AGENT_INDEX_MIN_MEMORIES=str(LINE),
                          MEMORYD_RECALL_EXACT_THRESHOLD=str(EXACT),
                          MEMORYD_PRELOAD_MODELS="false")
    worker.wait_ready()
    large, small = f"large-{uuid.uuid4()}", f"small-{uuid.uuid4()}"
    store.store_many(large, _notes(LINE + 10))
    store.store_many(small, _notes(20))
    with MemoryClient(broker_url=redis_db_url(redis_url, INDEX_DB), timeout=60) as client:
        for _ in range(4):
            assert client.recall(small, "herons at dawn")
            assert client.recall(large, "herons at dawn")
    # The index's name is in the catalog as soon as CREATE INDEX CONCURRENTLY starts;
    # the run is done, and audited, only once the audit row is there.
    deadline = time.monotonic() + 60
    while (built := _built(store)) == 0:
        assert time.monotonic() < deadline, f"no index within 60 s:\n{worker.log_tail()}"
        time.sleep(0.2)
    assert _has_index(store, large)
    assert not _has_index(store, small)
    assert built == 1  # requested by each pool process at most once; built once


@contextmanager
def _own_index(store: MemoryStore, agent: str) -> Iterator[None]:
    """A stand-in index under the name of ``agent``'s own (a btree: the watch looks at
    names only), dropped afterwards."""
    with store.engine.connect() as conn:
        conn.execute(text(f'CREATE INDEX "{index_name(agent)}" ON memories (id) '
                          f"WHERE agent_id = '{agent}'"))
        conn.commit()
    try:
        yield
    finally:
        with store.engine.connect() as conn:
            conn.execute(text(f'DROP INDEX "{index_name(agent)}"'))
            conn.commit()


def test_the_watch_asks_once_per_agent_and_never_for_an_indexed_or_small_one(
        store: MemoryStore) -> None:
    asked: list[str] = []
    # The recall plan counts up to its exact threshold, here past the line: its count decides.
    watch = IndexWatch(min_memories=LINE, exact_threshold=10 * LINE, request=asked.append)
    large = f"large-{uuid.uuid4()}"
    with store.session() as session:
        assert not watch.notice(session, f"small-{uuid.uuid4()}", LINE - 1)
        assert watch.notice(session, large, LINE)
        assert not watch.notice(session, large, LINE)  # again within RECHECK_S
    assert asked == [large]
    # An agent past the line that has its index is not asked for.
    indexed = f"indexed-{uuid.uuid4()}"
    store.store_many(indexed, _notes(3))
    with _own_index(store, indexed), store.session() as session:
        assert not watch.notice(session, indexed, LINE)
    # Above the exact threshold, where the plan's count stops, the watch counts itself.
    counting = IndexWatch(min_memories=5, exact_threshold=1, request=asked.append)
    with store.session() as session:
        assert counting.notice(session, indexed, 2) is False  # 3 memories < 5
    assert asked == [large]


def test_the_watch_asks_for_nothing_once_the_fleet_holds_its_cap_of_indexes(
        store: MemoryStore) -> None:
    """With the cap reached a run could only swap agents, the hourly run's work: a
    fleet of mid-sized agents does not each ask for a run that builds nothing."""
    asked: list[str] = []
    watch = IndexWatch(min_memories=LINE, exact_threshold=10 * LINE, request=asked.append,
                       cap=1)
    holder = f"holder-{uuid.uuid4()}"
    store.store_many(holder, _notes(3))
    with store.session() as session:
        assert watch.notice(session, f"first-{uuid.uuid4()}", LINE)  # room for one
    with _own_index(store, holder), store.session() as session:
        assert not watch.notice(session, f"second-{uuid.uuid4()}", LINE)
    assert len(asked) == 1
