"""Reads served by a real streaming standby (``MEMORYD_DATABASE_REPLICA_URLS``), with
read-your-writes through marks in the real Redis.

The module runs its own embedded primary and a hot standby made from it with
``pg_basebackup``, so pausing, delaying or stopping replay never touches the shared
server. A read proves where it was served by what it sees: with replay paused, a row
deleted on the primary behind the store's back is still there on the standby only.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from bench.common import start_standby
from memoryd.config import Settings
from memoryd.db import replicas
from memoryd.embedded.postgres import EmbeddedPostgres
from memoryd.errors import NotFound
from memoryd.memory.store import MemoryStore
from memoryd.process import SLOTS
from tests.support.service_user import opened_for_service_user
from tests.support.wire import round_trips, wire
from tests.support.workers import redis_db_url

MARKS_DB = 11
WORKER_DB = 12


class Cluster:
    """The module's primary and standby, and the superuser's view of both."""

    def __init__(self, primary: EmbeddedPostgres, standby: EmbeddedPostgres) -> None:
        self.primary = primary
        self.standby = standby

    def on_primary(self, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
        with self.primary.connect_owner() as conn:
            cursor = conn.execute(sql, params or {})
            return cursor.fetchall() if cursor.description else []

    def on_standby(self, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
        with self.standby.connect_owner() as conn:
            cursor = conn.execute(sql, params or {})
            return cursor.fetchall() if cursor.description else []

    def caught_up(self, timeout: float = 20.0) -> None:
        """Wait until the standby has replayed everything the primary has written."""
        target = self.on_primary("SELECT pg_current_wal_lsn()")[0][0]
        deadline = time.monotonic() + timeout
        while not self.on_standby("SELECT pg_last_wal_replay_lsn() >= %(t)s::pg_lsn",
                                  {"t": target})[0][0]:
            assert time.monotonic() < deadline, "the standby did not catch up"
            time.sleep(0.05)

    @contextmanager
    def replay_paused(self) -> Iterator[None]:
        self.on_standby("SELECT pg_wal_replay_pause()")
        deadline = time.monotonic() + 10
        while self.on_standby("SELECT pg_get_wal_replay_pause_state()")[0][0] != "paused":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        try:
            yield
        finally:
            self.on_standby("SELECT pg_wal_replay_resume()")

    def delete_behind_the_store(self, memory_id: Any) -> None:
        """A change no mark covers: only a read on the primary misses the row after it."""
        self.on_primary("DELETE FROM memories WHERE id = %(i)s", {"i": memory_id})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = opened_for_service_user(tmp_path_factory.mktemp("replicated"))
    primary = EmbeddedPostgres(root / "primary")
    primary.ensure_running()
    try:
        migrating = MemoryStore(primary.url())
        migrating.migrate()
        migrating.close()
        standby = start_standby(primary, root / "standby")
        try:
            yield Cluster(primary, standby)
        finally:
            standby.stop()
    finally:
        primary.stop()


@pytest.fixture
def make_store(cluster: Cluster, redis_url: str) -> Iterator[Callable[..., MemoryStore]]:
    """Stores on the module's primary reading from its standby (``**settings``: more),
    each starting from empty tables that the standby has replayed."""
    made: list[MemoryStore] = []
    cluster.on_standby("SELECT pg_wal_replay_resume()")
    cluster.on_primary("TRUNCATE memories, sessions, kg_entities, kg_relations, memory_links")
    cluster.caught_up()

    def make(**settings: Any) -> MemoryStore:
        chosen = {"database_replica_urls": cluster.standby.url(),
                  "broker_url": redis_db_url(redis_url, MARKS_DB),
                  "replica_check_interval_s": 0.2,
                  # Paused replay makes the standby lag for real: loading the embedding
                  # models on a busy machine must not push it past the bound.
                  "replica_max_lag_s": 30.0, **settings}
        store = MemoryStore(cluster.primary.url(), settings=Settings(**chosen))
        assert store.replicas is not None
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()
    SLOTS["replicas"].clear()  # the replica sets' engines, closed


def served(store: MemoryStore) -> dict[str, int]:
    assert store.replicas is not None
    return dict(store.replicas.served)


def replica_reads(store: MemoryStore) -> int:
    assert store.replicas is not None
    return sum(n for where, n in store.replicas.served.items()
               if not where.startswith("primary"))


def wait_for(check: Callable[[], bool], timeout: float = 15.0, every: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(every)


def seeded(store: MemoryStore, cluster: Cluster, agent: str, n: int = 3) -> list[Any]:
    """``n`` memories of ``agent``, replayed by the standby and seen healthy by the store."""
    ids = [r.id for r in store.store_many(agent, [
        {"content": f"{agent} likes hiking in the Alps, note {i}"} for i in range(n)])]
    cluster.caught_up()
    assert store.replicas is not None
    store.replicas.refresh(store.engine)
    return ids


def test_without_replica_urls_every_read_uses_the_primary_and_writes_record_no_marks(
        cluster: Cluster) -> None:
    store = MemoryStore(cluster.primary.url(), settings=Settings(database_replica_urls=""))
    try:
        assert store.replicas is None and store.access is None
        stored = store.store("plain-agent", "a memory on the primary only")
        with store.read_session("plain-agent") as session:
            assert session.execute(text("SELECT pg_is_in_recovery()")).scalar_one() is False
        assert store.get("plain-agent", stored.id).content == "a memory on the primary only"
    finally:
        store.close()


def test_recall_list_get_and_the_other_reads_are_served_by_the_replica(
        cluster: Cluster, make_store: Callable[..., MemoryStore]) -> None:
    store = make_store()
    agent = "reader"
    ids = seeded(store, cluster, agent)
    store.kg_add(agent, {"id": "alps", "type": "place", "attributes": {"name": "Alps"}})
    cluster.caught_up()
    with cluster.replay_paused():
        cluster.delete_behind_the_store(ids[0])
        before = replica_reads(store)
        assert store.get(agent, ids[0]).id == ids[0]
        assert store.list(agent).total == 3
        hits = store.recall(agent, "hiking in the Alps note 0", limit=5)
        assert ids[0] in [h.id for h in hits]
        assert store.context(agent, "hiking in the Alps")
        assert store.kg_query(agent, "alps")[0].attributes == {"name": "Alps"}
        store.sessions(agent)
        store.metadata_values(agent, "none")
        store.related(agent, ids[1])
        # context reads twice: its recall, then the memories naming the query's
        # entities ("Alps"), each on the replica.
        assert replica_reads(store) - before == 9, served(store)
        with store.read_session(agent) as session:
            assert session.info["replica"] is not None
            assert session.execute(text("SELECT pg_is_in_recovery()")).scalar_one() is True
    cluster.caught_up()
    with pytest.raises(NotFound):  # replayed now: gone on the replica too
        store.get(agent, ids[0])


def test_a_recall_served_by_the_replica_takes_four_round_trips_there(
        cluster: Cluster, make_store: Callable[..., MemoryStore], tmp_path: Path) -> None:
    """The replay check, the keyword side (with the BEGIN), the vector side (with the
    COMMIT) and the read of the hits' rows; no ROLLBACK when the session closes. (The
    access counts go to the primary later, in a flush of their own.)"""
    store = make_store(replica_check_interval_s=60.0)
    agent = "counted"
    seeded(store, cluster, agent)
    store.recall(agent, "hiking in the Alps", limit=3)  # sizes counted
    assert store.replicas is not None
    before = replica_reads(store)
    with wire(store.replicas.replicas[0].engine, tmp_path) as on_replica:
        assert len(store.recall(agent, "hiking in the Alps", limit=3)) == 3
    assert replica_reads(store) == before + 1
    assert round_trips(on_replica) == 4, "\n".join(on_replica)


def test_an_agents_own_write_is_read_back_while_replay_is_paused_and_others_stay_on_the_replica(
        cluster: Cluster, make_store: Callable[..., MemoryStore]) -> None:
    store = make_store()
    other_ids = seeded(store, cluster, "other")
    seeded(store, cluster, "writer")
    with cluster.replay_paused():
        new = store.store("writer", "writer moved to Lisbon last spring")
        behind = served(store).get("primary:behind_mark", 0)
        assert store.get("writer", new.id).content == "writer moved to Lisbon last spring"
        assert store.list("writer", limit=1).items[0].id == new.id
        assert new.id in [h.id for h in store.recall("writer", "moved to Lisbon", limit=3)]
        assert served(store).get("primary:behind_mark", 0) - behind == 3
        # Not on the standby yet: without the mark these reads would have missed it.
        assert cluster.on_standby("SELECT count(*) FROM memories WHERE id = %(i)s",
                                  {"i": new.id})[0][0] == 0
        # The other agent wrote nothing since the standby replayed it: still the replica.
        cluster.delete_behind_the_store(other_ids[0])
        assert store.get("other", other_ids[0]).id == other_ids[0]
        # A forget is marked too.
        assert store.forget("writer", new.id) is True
        with pytest.raises(NotFound):
            store.get("writer", new.id)


def test_a_stopped_replica_is_skipped_and_used_again_once_it_is_back(
        cluster: Cluster, make_store: Callable[..., MemoryStore]) -> None:
    store = make_store()
    ids = seeded(store, cluster, "steady")
    before = replica_reads(store)
    store.get("steady", ids[0])
    assert replica_reads(store) == before + 1
    cluster.standby.stop()
    try:
        for _ in range(10):
            assert store.get("steady", ids[0]).id == ids[0]
            assert store.list("steady").total == 3
            assert len(store.recall("steady", "hiking", limit=3)) == 3
        assert replica_reads(store) == before + 1
        assert store.replicas is not None
        assert [r.health.state for r in store.replicas.replicas] == ["down"]
    finally:
        cluster.standby._start()
    cluster.caught_up()

    def replica_again() -> bool:
        store.get("steady", ids[0])
        return replica_reads(store) > before + 1

    wait_for(replica_again)


def test_a_replica_lagging_past_the_bound_is_skipped_until_it_catches_up(
        cluster: Cluster, make_store: Callable[..., MemoryStore]) -> None:
    store = make_store(replica_max_lag_s=1.0)
    ids = seeded(store, cluster, "patient")
    assert store.replicas is not None
    with cluster.replay_paused():
        cluster.delete_behind_the_store(ids[0])  # the primary moves on; the standby not
        store.get("patient", ids[0])  # within the bound: the replica, row and all
        time.sleep(1.5)
        store.replicas.refresh(store.engine)
        health = store.replicas.replicas[0].health
        assert health.state == "lagging" and health.lag_s is not None and health.lag_s > 1.0
        with pytest.raises(NotFound):  # the primary answers
            store.get("patient", ids[0])
        assert served(store).get("primary:no_healthy_replica", 0) >= 1
    cluster.caught_up()
    before = replica_reads(store)

    def replica_again() -> bool:
        with pytest.raises(NotFound):
            store.get("patient", ids[0])
        return replica_reads(store) > before

    wait_for(replica_again)


def test_a_mixed_run_across_agents_never_misses_an_own_write(
        cluster: Cluster, make_store: Callable[..., MemoryStore]) -> None:
    """Replay runs, but each commit is applied 300 ms late on the standby, so a read
    routed there right after its agent's store would miss it every time."""
    import random

    cluster.on_standby("ALTER SYSTEM SET recovery_min_apply_delay = '300ms'")
    cluster.on_standby("SELECT pg_reload_conf()")
    try:
        store = make_store()
        agents = [f"mixed-{i}" for i in range(6)]
        latest: dict[str, tuple[Any, str]] = {}
        rng = random.Random(7)
        missed = 0
        for agent in agents:
            seeded(store, cluster, agent, n=2)
        cluster.caught_up()
        time.sleep(0.5)
        for step in range(300):
            agent = rng.choice(agents)
            if agent not in latest or rng.random() < 0.3:
                content = f"{agent} note {step}: {uuid.uuid4().hex[:8]} about gardening"
                latest[agent] = (store.store(agent, content).id, content)
                continue
            mid, content = latest[agent]
            kind = rng.choice(["get", "list", "recall"])
            if kind == "get":
                try:
                    store.get(agent, mid)
                except NotFound:
                    missed += 1
            elif kind == "list":
                missed += store.list(agent, limit=1).items[0].id != mid
            else:
                missed += mid not in [h.id for h in store.recall(agent, content, limit=5)]
        assert missed == 0
        counts = served(store)
        assert replica_reads(store) > 0, counts
        assert counts.get("primary:behind_mark", 0) > 0, counts
    finally:
        cluster.on_standby("ALTER SYSTEM RESET recovery_min_apply_delay")
        cluster.on_standby("SELECT pg_reload_conf()")


def test_access_counts_of_recalls_served_by_the_replica_reach_the_primary(
        cluster: Cluster, make_store: Callable[..., MemoryStore]) -> None:
    store = make_store()
    ids = seeded(store, cluster, "counted")
    before = replica_reads(store)
    first = store.recall("counted", "hiking in the Alps note 1", limit=1)
    second = store.recall("counted", "hiking in the Alps note 1", limit=1)
    assert replica_reads(store) == before + 2
    # The three notes score alike (the query's "1" is no keyword): whichever comes first
    # comes first both times.
    top = first[0].id
    assert second[0].id == top and top in ids
    # Each shows its own access, as a recall on the primary would (the replica has not
    # replayed the first bump when the second reads).
    assert first[0].memory.access_count == 1 and first[0].memory.last_accessed_at is not None

    def counted() -> bool:
        return cluster.on_primary("SELECT access_count FROM memories WHERE id = %(i)s",
                                  {"i": top})[0][0] == 2

    wait_for(counted, timeout=5.0)
    rows = cluster.on_primary("SELECT id, access_count, last_accessed_at FROM memories "
                              "WHERE agent_id = 'counted' AND id <> %(i)s", {"i": top})
    assert all(count == 0 and at is None for _, count, at in rows)


def test_without_a_reachable_redis_reads_stay_on_the_primary_and_writes_are_not_acknowledged(
        cluster: Cluster, make_store: Callable[..., MemoryStore]) -> None:
    from memoryd.embedded._proc import free_port
    from memoryd.errors import Unavailable

    good = make_store()
    ids = seeded(good, cluster, "lonely")
    store = make_store(broker_url=f"redis://127.0.0.1:{free_port()}/0")
    with cluster.replay_paused():
        cluster.delete_behind_the_store(ids[0])
        with pytest.raises(NotFound):  # marks unknown: the primary answers
            store.get("lonely", ids[0])
        assert served(store).get("primary:marks_unreachable", 0) == 1
        with pytest.raises(Unavailable, match="retry"):
            store.store("lonely", "written, but its mark could not be recorded")
    assert store.get("lonely", ids[1]).id == ids[1]


def test_marks_only_rise_and_name_agents_by_a_hash(redis_url: str) -> None:
    import redis as redis_lib

    url = redis_db_url(redis_url, MARKS_DB)
    marks = replicas.Marks(url, ttl_s=60)
    agent = f"alice@example.com-{uuid.uuid4()}"
    marks.record([agent], replicas.parse_lsn("1/00000010"))
    marks.record([agent], replicas.parse_lsn("0/FFFFFFFF"))  # lower: ignored
    assert marks.get(agent) == (True, replicas.parse_lsn("1/10"))
    marks.record([agent], replicas.parse_lsn("1/11"))
    assert marks.get(agent) == (True, (1 << 32) + 0x11)
    assert marks.get(f"nobody-{uuid.uuid4()}") == (True, None)
    client = redis_lib.Redis.from_url(url)
    assert not [k for k in client.keys("memoryd:wal-mark:*") if agent.encode() in k]
    assert 0 < client.ttl(marks.key(agent)) <= 60
    marks.close()
    client.close()


def test_a_worker_serves_reads_from_the_replica_and_its_clients_read_their_own_writes(
        cluster: Cluster, make_store: Callable[..., MemoryStore], redis_url: str,
        spawn_worker: Callable[..., Any]) -> None:
    from memoryd.client import MemoryClient

    store = make_store()  # empties the tables
    ids = seeded(store, cluster, "remote")
    worker = spawn_worker(WORKER_DB, queues="memory", MEMORYD_DATABASE_URL=cluster.primary.url(),
                          MEMORYD_DATABASE_REPLICA_URLS=cluster.standby.url(),
                          MEMORYD_REPLICA_CHECK_INTERVAL_S="0.2",
                          MEMORYD_REPLICA_MAX_LAG_S="60")
    worker.wait_ready()
    with MemoryClient(broker_url=worker.broker_url, timeout=60.0) as client:
        client.get("remote", str(ids[0]))  # warm: the worker has checked the standby
        with cluster.replay_paused():
            cluster.delete_behind_the_store(ids[0])
            assert str(client.get("remote", str(ids[0])).id) == str(ids[0])  # the replica
            new = client.store("remote", "remote agent adopted a cat named Miso")
            assert client.get("remote", str(new.id)).content.endswith("Miso")
            assert str(new.id) in [str(h.id) for h in client.recall("remote", "cat Miso")]
