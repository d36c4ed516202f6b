"""End to end through a real Celery worker process: client -> Redis -> worker ->
PostgreSQL -> result backend -> client.

The session ``worker`` fixture (conftest) runs ``python -m memoryd worker`` on its
own Redis database; the crash test starts and SIGKILLs its own workers. Nothing
here mocks the broker, the database or Celery, and no test runs tasks eagerly.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from celery import Celery
from sqlalchemy import text

from memoryd.client import MemoryClient, Pending
from memoryd.errors import MemorydTimeoutError, NotFound, ValidationError
from memoryd.memory.store import MemoryStore
from memoryd.types import Entity, Memory, Recalled, StoreResult
from tests.support.locks import lock_waiters

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("worker")]

CRASH_DB = 2         # the crash test's own broker database
UNCONSUMED_DB = 9    # a broker database no worker consumes


def _db_url(redis_url: str, db: int) -> str:
    return redis_url.rsplit("/", 1)[0] + f"/{db}"


def _rows(store: MemoryStore, agent: str) -> list[dict[str, Any]]:
    with store.session() as session:
        return [dict(r) for r in session.execute(text(
            "SELECT id, content, category, tags, importance, metadata FROM memories "
            "WHERE agent_id = :a ORDER BY content"), {"a": agent}).mappings()]


def _wait_until(predicate: Callable[[], bool], timeout: float, what: str,
                interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def _raw_app(broker: str) -> Celery:
    """A bare Celery app (not memoryd's), to hand-craft messages."""
    app = Celery("memoryd-test-raw", broker=broker, backend=broker, set_as_current=False)
    app.conf.update(accept_content=["json"], result_accept_content=["json"],
                    broker_connection_retry_on_startup=True)
    return app


@pytest.fixture
def unconsumed(redis_url: str) -> Iterator[tuple[MemoryClient, redis.Redis]]:
    """A client on a broker database no worker reads, and a Redis handle on it."""
    url = _db_url(redis_url, UNCONSUMED_DB)
    raw = redis.Redis.from_url(url)
    raw.flushdb()
    with MemoryClient(broker_url=url, timeout=5.0) as c:
        yield c, raw
    raw.flushdb()
    raw.close()


# --- the memory API through the worker -------------------------------------------------


def test_store_lands_in_postgres_and_recall_finds_it(client: MemoryClient, store: MemoryStore,
                                                     agent_id: str) -> None:
    result = client.store(agent_id, "The user prefers dark mode in every editor.",
                          category="preference", tags=["ui", "editor"], importance=0.8,
                          metadata={"origin": "e2e"}, role="user", session_id="s-1")
    assert isinstance(result, StoreResult)
    assert result.stored and not result.duplicate

    rows = _rows(store, agent_id)
    assert len(rows) == 1
    assert rows[0]["id"] == result.id
    assert rows[0]["content"] == "The user prefers dark mode in every editor."
    assert rows[0]["category"] == "preference"
    assert sorted(rows[0]["tags"]) == ["editor", "ui"]
    assert rows[0]["importance"] == pytest.approx(0.8)
    assert rows[0]["metadata"] == {"origin": "e2e"}

    client.store(agent_id, "The deploy pipeline runs on Thursdays.")
    hits = client.recall(agent_id, "which colour theme does the user like?", limit=5)
    assert hits and all(isinstance(h, Recalled) for h in hits)
    assert hits[0].memory.id == result.id
    assert hits[0].memory.agent_id == agent_id

    again = client.store(agent_id, "The user prefers dark mode in every editor.")
    assert isinstance(again, StoreResult)
    assert again.duplicate and again.id == result.id
    assert len(_rows(store, agent_id)) == 2

    fetched = client.get(agent_id, result.id)
    assert isinstance(fetched, Memory) and fetched.session_id == "s-1"
    assert [s.session_id for s in client.sessions(agent_id)] == ["s-1"]


def test_store_many_list_and_context(client: MemoryClient, store: MemoryStore,
                                     agent_id: str) -> None:
    results = client.store_many(agent_id, [
        {"content": "Alice is the tech lead of the payments team.", "category": "fact"},
        {"content": "We decided to use PostgreSQL for the ledger.", "category": "decision"},
        {"content": "Standup is at 09:30 Lisbon time.", "tags": ["meetings"]},
    ])
    assert isinstance(results, list) and len(results) == 3
    assert all(r.stored for r in results)
    assert len({r.id for r in results}) == 3
    assert {r["id"] for r in _rows(store, agent_id)} == {r.id for r in results}

    page = client.list(agent_id, limit=2)
    assert page.total == 3 and len(page.items) == 2
    decisions = client.list(agent_id, category="decision")
    assert [m.content for m in decisions.items] == [
        "We decided to use PostgreSQL for the ledger."]

    block = client.context(agent_id, "which database did we pick for the ledger?", limit=3)
    assert block.startswith("## Relevant memories")
    assert "We decided to use PostgreSQL for the ledger." in block


def test_forget_then_get_raises_not_found(client: MemoryClient, store: MemoryStore,
                                          agent_id: str) -> None:
    result = client.store(agent_id, "Temporary note to forget.")
    assert isinstance(result, StoreResult)
    assert client.forget(agent_id, result.id) is True
    assert _rows(store, agent_id) == []
    assert client.forget(agent_id, result.id) is False
    with pytest.raises(NotFound):
        client.get(agent_id, result.id)


def test_kg_add_and_query(client: MemoryClient, agent_id: str) -> None:
    assert client.kg_add(agent_id, Entity(id="alice", type="person",
                                           attributes={"role": "lead"},
                                           relations=[{"target": "payments",
                                                       "type": "leads"}])) is True
    client.kg_add(agent_id, {"id": "payments", "type": "team",
                             "relations": [{"target": "ledger", "type": "owns"}]})
    found = {e.id: e for e in client.kg_query(agent_id, "alice", depth=2)}
    assert set(found) == {"alice", "payments", "ledger"}
    assert found["alice"].attributes == {"role": "lead"}
    assert any(r.target == "payments" and r.type == "leads"
               for r in found["alice"].relations)
    assert {e.id for e in client.kg_query(agent_id, "alice", depth=0)} == {"alice"}
    with pytest.raises(NotFound):
        client.kg_query(agent_id, "nobody")


def test_wait_false_returns_a_handle(client: MemoryClient, store: MemoryStore,
                                     agent_id: str) -> None:
    handle = client.store(agent_id, "Queued without waiting.", wait=False)
    assert isinstance(handle, Pending)
    uuid.UUID(handle.id)
    result = handle.get(timeout=60)
    assert isinstance(result, StoreResult) and result.stored
    assert handle.ready()
    # A second get() returns the same result (it is not lost once fetched).
    assert handle.get(timeout=5) == result
    assert [r["id"] for r in _rows(store, agent_id)] == [result.id]

    batch = client.store_many(agent_id, [{"content": "one"}, {"content": "two"}], wait=False)
    assert isinstance(batch, Pending)
    assert [r.stored for r in batch.get()] == [True, True]


def test_a_store_that_outlives_its_timeout_is_followed_by_its_task_id(
        client: MemoryClient, store: MemoryStore, agent_id: str) -> None:
    """The worker is held up (the table locked) past the caller's wait: the store raises
    ``MemorydTimeoutError`` naming its task, lands once the lock goes, and
    ``pending(task_id)`` returns what the store would have."""
    blocker = store.engine.connect()
    try:
        blocker.execute(text("LOCK TABLE memories IN SHARE MODE"))
        with pytest.raises(MemorydTimeoutError) as caught:
            client.store(agent_id, "Written after its caller stopped waiting.", timeout=1.0)
        _wait_until(lambda: lock_waiters(store) > 0, 60, "the store to block on insert")
    finally:
        blocker.rollback()
        blocker.close()
    task_id = caught.value.task_id
    assert task_id is not None and task_id in str(caught.value)
    result = client.pending(task_id, "store").get(timeout=60)
    assert isinstance(result, StoreResult) and result.stored
    assert [r["id"] for r in _rows(store, agent_id)] == [result.id]

    batch = client.store_many(agent_id, [{"content": "three"}], wait=False)
    assert isinstance(batch, Pending)
    [one] = client.pending(batch.id, "store_many").get(timeout=60)
    assert isinstance(one, StoreResult) and one.stored


def test_a_result_landing_as_the_wait_times_out_is_kept_for_its_follower(
        unconsumed: tuple[MemoryClient, redis.Redis], redis_url: str) -> None:
    """The result is written after the caller's last look and before its deadline,
    unannounced (as one landing the instant after the wait gave up): the timed-out wait
    leaves it in the backend, and the task followed by its id reads it, once."""
    c, raw = unconsumed
    handle = c.store("agent-late", "Written as its caller gave up.", wait=False)
    assert isinstance(handle, Pending)
    key = f"celery-task-meta-{handle.id}"
    written = StoreResult(id=uuid.uuid4(), stored=True, duplicate=False)
    meta: dict[str, Any] = {
        "status": "SUCCESS", "result": written.model_dump(mode="json"), "traceback": None,
        "children": [], "task_id": handle.id, "date_done": datetime.now(UTC).isoformat()}
    watching, landed = threading.Event(), threading.Event()

    def land_after_the_callers_look() -> None:
        watcher = redis.Redis.from_url(_db_url(redis_url, UNCONSUMED_DB), socket_timeout=120)
        with watcher.monitor() as monitor:
            watching.set()
            while monitor.next_command()["command"] != f"GET {key}":
                pass
        raw.set(key, json.dumps(meta))  # no PUBLISH: the waiting caller is not woken
        landed.set()
        watcher.close()

    thread = threading.Thread(target=land_after_the_callers_look, daemon=True)
    thread.start()
    assert watching.wait(30)
    with pytest.raises(MemorydTimeoutError) as caught:
        handle.get(timeout=3.0)
    thread.join(120)
    assert landed.is_set()
    assert raw.exists(key), "the timed-out wait deleted a result nobody had read"
    assert caught.value.task_id == handle.id
    assert c.pending(handle.id, "store").get(timeout=30) == written
    assert not raw.exists(key)  # read and converted: then forgotten


# --- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(("call", "field"), [
    (lambda c: c.store("", "content"), "agent_id"),
    (lambda c: c.store("a", "   "), "content"),
    (lambda c: c.store("a", "x", category="gossip"), "category"),
    (lambda c: c.store("a", "x", importance=2), "importance"),
    (lambda c: c.store("a", "x", colour="red"), "colour"),
    (lambda c: c.store("a", "x", wait=False, expires_at="tomorrow"), "expires_at"),
    (lambda c: c.store_many("a", [{"content": "ok"}, {"content": ""}]), "items[1].content"),
    (lambda c: c.recall("a", "q", limit=0), "limit"),
    (lambda c: c.recall("a", "q", mode="slow"), "mode"),
    (lambda c: c.forget("a", "not-a-uuid"), "memory_id"),
    (lambda c: c.run_job("vacuum"), "job"),
])
def test_validation_errors_are_raised_before_anything_is_enqueued(
        unconsumed: tuple[MemoryClient, redis.Redis],
        call: Callable[[MemoryClient], object], field: str) -> None:
    c, raw = unconsumed
    with pytest.raises(ValidationError) as caught:
        call(c)
    assert caught.value.field == field
    # No worker reads this database: anything sent would still be sitting here.
    assert raw.llen("memory") == 0
    assert raw.llen("maintenance") == 0
    assert raw.dbsize() == 0


def test_the_unconsumed_queue_really_would_show_a_sent_message(
        unconsumed: tuple[MemoryClient, redis.Redis]) -> None:
    """The control for the test above: a valid call does leave a message behind."""
    c, raw = unconsumed
    handle = c.store("agent-control", "a valid memory", wait=False)
    assert isinstance(handle, Pending)
    assert raw.llen("memory") == 1


def test_messages_name_the_agent_but_carry_no_content_in_their_headers(
        unconsumed: tuple[MemoryClient, redis.Redis]) -> None:
    """Flower and task events show a message's ``kwargsrepr``: the agent (by its hash)
    and the sizes, never the memory's content (the body, which the worker reads, has it
    all)."""
    import base64
    import hashlib
    import json

    c, raw = unconsumed
    c.store("agent-headers", "the launch code is 0000", tags=["a", "b"], wait=False)
    message = json.loads(raw.lindex("memory", 0))
    headers = message["headers"]
    digest = hashlib.sha256(b"agent-headers").hexdigest()
    assert headers["kwargsrepr"] == (f"{{'agent_sha256': '{digest}', 'content': <23 chars>, "
                                     "'tags': <2 items>}")
    assert headers["argsrepr"] == "()"
    assert "launch code" not in json.dumps(headers)
    body = json.loads(base64.b64decode(message["body"]))
    assert body[1]["content"] == "the launch code is 0000"


def test_get_of_a_missing_memory_raises_not_found(client: MemoryClient,
                                                  agent_id: str) -> None:
    with pytest.raises(NotFound) as caught:
        client.get(agent_id, uuid.uuid4())
    assert "not found" in str(caught.value)


def test_worker_side_validation_error_arrives_as_memoryd_type(worker_broker_url: str) -> None:
    app = _raw_app(worker_broker_url)
    try:
        # Through the client's Pending wrapper.
        sent = app.send_task("memoryd.store", kwargs={"agent_id": "", "content": "x"},
                             queue="memory")
        with pytest.raises(ValidationError) as caught:
            Pending(sent, dict, 60.0).get()
        assert caught.value.field == "agent_id"

        # Through a plain AsyncResult.
        sent = app.send_task("memoryd.store", kwargs={"agent_id": "", "content": "x"},
                             queue="memory")
        with pytest.raises(ValidationError) as caught:
            sent.get(timeout=60)
        assert caught.value.field == "agent_id"
        assert type(caught.value).__module__ == "memoryd.errors"

        sent = app.send_task("memoryd.kg.query", kwargs={"agent_id": "a", "start_id": "x",
                                                         "depth": 99}, queue="memory")
        with pytest.raises(ValidationError) as caught:
            sent.get(timeout=60)
        assert caught.value.field == "depth"
    finally:
        app.close()


def test_recall_times_out_with_memoryd_error(agent_id: str,
                                             unconsumed: tuple[MemoryClient, redis.Redis]
                                             ) -> None:
    # A queue nobody consumes: the call gives up after its timeout, not later. (Celery
    # checks the deadline between waits for messages, so a result that arrives during the
    # first wait is returned even past a tiny timeout: only a job that does not finish
    # can be relied on to time out.)
    c, raw = unconsumed
    started = time.monotonic()
    with pytest.raises(MemorydTimeoutError) as caught:
        c.recall(agent_id, "anything", timeout=1.0)
    assert 0.9 <= time.monotonic() - started < 10
    assert "did not finish within 1 s" in str(caught.value)
    assert raw.llen("memory") == 1
    assert isinstance(caught.value, TimeoutError)


def test_an_unreachable_broker_is_memoryds_unavailable_error(agent_id: str) -> None:
    from memoryd.embedded._proc import free_port
    from memoryd.errors import Unavailable

    with MemoryClient(broker_url=f"redis://127.0.0.1:{free_port()}/0") as c, \
            pytest.raises(Unavailable) as caught:
        c.recall(agent_id, "anything")
    assert "unreachable" in str(caught.value)


def test_asyncio_astore_and_arecall(client: MemoryClient, agent_id: str) -> None:
    async def scenario() -> tuple[list[StoreResult], list[Recalled], str]:
        stored = await asyncio.gather(
            client.astore(agent_id, "The cat is called Miso.", category="fact"),
            client.astore(agent_id, "The dog is called Pixel.", category="fact"))
        hits = await client.arecall(agent_id, "what is the cat's name?", limit=2)
        block = await client.acontext(agent_id, "pets", limit=2)
        return list(stored), hits, block

    stored, hits, block = asyncio.run(scenario())
    assert all(isinstance(s, StoreResult) and s.stored for s in stored)
    assert hits[0].memory.content == "The cat is called Miso."
    assert "Miso" in block and "Pixel" in block


# --- JSON only --------------------------------------------------------------------------


def test_a_pickled_message_is_never_executed(worker_broker_url: str, store: MemoryStore,
                                             client: MemoryClient, agent_id: str,
                                             worker: Any) -> None:
    raw = redis.Redis.from_url(worker_broker_url)
    app = _raw_app(worker_broker_url)
    try:
        pickled = app.send_task("memoryd.store", queue="memory", serializer="pickle",
                                kwargs={"agent_id": agent_id, "content": "smuggled by pickle"})
        # A JSON canary sent after it; once it is done, the worker has seen the pickle.
        canary = client.store(f"{agent_id}-canary", "canary after the pickle")
        assert isinstance(canary, StoreResult) and canary.stored
        _wait_until(lambda: raw.llen("memory") == 0, 10, "the memory queue to drain")
        time.sleep(2)
        assert _rows(store, agent_id) == []
        assert pickled.state == "PENDING"  # no result, not even a failure
        assert "ContentDisallowed" in worker.log_tail(200_000) or \
            "untrusted content" in worker.log_tail(200_000)
    finally:
        app.close()
        raw.close()


# --- maintenance: one run at a time, fleet-wide -----------------------------------------


def _runs(store: MemoryStore, agent: str) -> list[str]:
    with store.session() as session:
        return list(session.execute(text(
            "SELECT status FROM maintenance_runs WHERE job = 'expire' AND agent_id = :a "
            "ORDER BY id"), {"a": agent}).scalars())


def test_two_concurrent_runs_of_a_job_one_runs_one_is_skipped(
        client: MemoryClient, store: MemoryStore, agent_id: str) -> None:
    past = datetime.now(UTC) - timedelta(hours=1)
    gone = store.store(agent_id, "A reminder that has expired.", expires_at=past)
    kept = store.store(agent_id, "A memory without expiry.")

    # Block the first run inside its eviction (it waits for this table lock), so the
    # second run finds the job's advisory lock taken.
    with store.engine.connect() as blocker:
        blocker.execute(text("LOCK TABLE memories IN SHARE MODE"))
        first = client.run_job("expire", agent_id=agent_id, wait=False)
        _wait_until(lambda: _runs(store, agent_id) == ["running"], 30, "the first run")
        second = client.run_job("expire", agent_id=agent_id, wait=False)
        _wait_until(lambda: _runs(store, agent_id) == ["running", "skipped"], 30,
                    "the second run to be skipped")
        blocker.rollback()
    assert isinstance(first, Pending) and isinstance(second, Pending)
    one, two = first.get(timeout=60), second.get(timeout=60)
    assert one["status"] == "ok" and one["stats"]["expired"] == 1
    assert two["status"] == "skipped"
    assert _runs(store, agent_id) == ["ok", "skipped"]
    assert [r["id"] for r in _rows(store, agent_id)] == [kept.id]
    with store.session() as session:
        assert session.execute(text(
            "SELECT memory_id, reason FROM evicted_memories WHERE agent_id = :a"),
            {"a": agent_id}).all() == [(gone.id, "expired")]


def test_a_run_while_another_node_holds_the_lock_is_skipped(
        client: MemoryClient, store: MemoryStore, agent_id: str) -> None:
    from memoryd.memory.maintenance import run_job

    key = "memoryd.maintenance.expire"
    with store.engine.connect() as other_node:
        assert other_node.execute(text("SELECT pg_try_advisory_lock(hashtext(:k))"),
                                  {"k": key}).scalar_one()
        try:
            through_worker = client.run_job("expire", agent_id=agent_id, timeout=60)
            assert isinstance(through_worker, dict)
            assert through_worker["status"] == "skipped"

            results: list[str] = []
            threads = [threading.Thread(target=lambda: results.append(
                run_job(store, "expire", agent_id=agent_id).status)) for _ in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            assert results == ["skipped", "skipped"]
        finally:
            other_node.execute(text("SELECT pg_advisory_unlock(hashtext(:k))"), {"k": key})
            other_node.commit()
    done = client.run_job("expire", agent_id=agent_id, timeout=60)
    assert isinstance(done, dict) and done["status"] == "ok"
    assert _runs(store, agent_id) == ["skipped", "skipped", "skipped", "ok"]


# --- crash: SIGKILL a worker mid-task; every message lands exactly once ------------------

CRASH_STORES = 300
RECOVERY_BOUND_S = 60.0  # the promise: a dead worker's message is back in work within this


def test_stores_survive_a_killed_worker_exactly_once_and_soon_on_the_defaults(
        spawn_worker: Callable[..., Any], store: MemoryStore, redis_url: str) -> None:
    """No tuning: the default visibility timeout, renewed by live workers only."""
    from memoryd.celery_config import restore_interval_s
    from memoryd.config import get_settings

    visibility = get_settings().visibility_timeout_s
    broker = _db_url(redis_url, CRASH_DB)
    raw = redis.Redis.from_url(broker)
    raw.flushdb()
    first = spawn_worker(CRASH_DB, concurrency=1)
    first.wait_ready()

    agent = f"crash-{uuid.uuid4()}"
    contents = [f"crash fact {i:03d}: {uuid.uuid4()}" for i in range(CRASH_STORES)]
    with MemoryClient(broker_url=broker, timeout=120.0) as c:
        handles = [c.store(agent, content, wait=False) for content in contents]

        def landed() -> int:
            return len(_rows(store, agent))

        _wait_until(lambda: landed() >= 10, 60, "the first stores to land", interval=0.01)
        # Stop further inserts mid-stream: the worker blocks inside its next store's
        # transaction, holding that message unacknowledged, and is killed there.
        blocker = store.engine.connect()
        try:
            blocker.execute(text("LOCK TABLE memories IN SHARE MODE"))
            _wait_until(lambda: lock_waiters(store) > 0, 30, "the worker to block on insert")
            before_kill = landed()
            in_flight = raw.zrange("unacked_index", 0, -1, withscores=True)
            first.kill()
            killed_at = time.time()
        finally:
            blocker.rollback()
            blocker.close()
        assert 10 <= before_kill < CRASH_STORES
        assert len(in_flight) == 1  # the one message being worked on (prefetch 1, acks late)
        tag, renewed_at = in_flight[0]  # its lease: delivery or last renewal
        assert raw.hexists("unacked", tag)
        assert raw.llen("memory") == CRASH_STORES - before_kill - 1

        second = spawn_worker(CRASH_DB, concurrency=1)
        second.wait_ready()
        _wait_until(lambda: not raw.hexists("unacked", tag), RECOVERY_BOUND_S,
                    "the killed worker's message to be restored", interval=0.1)
        restored_at = time.time()
        _wait_until(lambda: landed() >= CRASH_STORES, 120, "every store to land", interval=0.2)

        results = [h.get(timeout=120) for h in handles]
    rows = _rows(store, agent)
    assert len(rows) == CRASH_STORES  # none lost, none duplicated
    assert sorted(r["content"] for r in rows) == sorted(contents)
    assert {r.id for r in results} == {r["id"] for r in rows}
    assert all(isinstance(r, StoreResult) for r in results)
    assert raw.hlen("unacked") == 0 and raw.llen("memory") == 0

    # The documented bound: back on its queue within one sweep interval after its lease
    # ran out (the visibility timeout after its last renewal); 3 s of slack for polling.
    assert restored_at - killed_at <= RECOVERY_BOUND_S
    assert restored_at - (renewed_at + visibility) <= restore_interval_s(visibility) + 3, (
        restored_at - killed_at, killed_at - renewed_at)
    raw.flushdb()
    raw.close()


LEASE_DB = 3  # the lease test's own broker database


def test_a_live_worker_keeps_a_message_past_the_visibility_timeout(
        spawn_worker: Callable[..., Any], store: MemoryStore, redis_url: str) -> None:
    """A task running four times the visibility timeout is not handed to the idle second
    worker: its worker renews the lease. Delivered once, stored once."""
    broker = _db_url(redis_url, LEASE_DB)
    raw = redis.Redis.from_url(broker)
    raw.flushdb()
    short = {"MEMORYD_VISIBILITY_TIMEOUT_S": "3"}
    holder = spawn_worker(LEASE_DB, concurrency=1, **short)
    holder.wait_ready()
    agent = f"lease-{uuid.uuid4()}"
    blocker = store.engine.connect()
    try:
        blocker.execute(text("LOCK TABLE memories IN SHARE MODE"))
        with MemoryClient(broker_url=broker, timeout=60.0) as c:
            handle = c.store(agent, "A store that waits on a lock.", wait=False)
            _wait_until(lambda: lock_waiters(store) > 0, 30, "the store to block on insert")
            idle = spawn_worker(LEASE_DB, concurrency=1, **short)
            idle.wait_ready()
            time.sleep(12)  # four visibility timeouts; the idle worker sweeps every second
            assert raw.zcard("unacked_index") == 1
            blocker.rollback()
            result = handle.get(timeout=60)
    finally:
        blocker.rollback()
        blocker.close()
    assert result.duplicate is False
    assert len(_rows(store, agent)) == 1
    assert raw.get(f"memoryd:deliveries:{handle.id}:0") == b"1"
    raw.flushdb()
    raw.close()



PRELOAD_MEMORY_DB, PRELOAD_MAINTENANCE_DB = 10, 11  # the preload test's broker databases


def test_memory_workers_load_the_models_as_their_processes_start(
        spawn_worker: Callable[..., Any]) -> None:
    """Each pool process of a worker consuming the memory queue loads the embedding
    models before its first task; a maintenance-only worker does not."""
    memory = spawn_worker(PRELOAD_MEMORY_DB, concurrency=2, queues="memory")
    maintenance = spawn_worker(PRELOAD_MAINTENANCE_DB, concurrency=1, queues="maintenance")
    for process in (memory, maintenance):
        process.wait_ready()
    deadline = time.monotonic() + 60
    while memory.log_tail(100_000).count("worker.models_loaded") < 2:
        assert time.monotonic() < deadline, memory.log_tail()
        time.sleep(0.2)
    assert "worker.models_loaded" not in maintenance.log_tail(100_000)
