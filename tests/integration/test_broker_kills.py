"""The Redis transport under SIGKILL: consumers of memoryd's transport
(``tests/support/lease_consumer.py``: kombu, no Celery, no models) killed at random
moments under a stream of messages, and killed at the one moment kombu's own transport
cannot survive, between taking a message and recording it as held; and the sweep that
brings a dead consumer's messages back. Real Redis, real processes; every message is
accounted for by id."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from queue import Empty
from typing import Any

import pytest
import redis
from kombu import Connection, Producer, Queue

from tests.support.workers import redis_db_url

pytestmark = pytest.mark.slow

KILL_DB = 12  # the random-kill test's broker database
STOP_DB = 6   # the stop-at-take tests' broker database
KILLS = 50
VISIBILITY_S = 3  # the smallest visibility timeout the settings allow
CONSUMER_START_S = 60.0
DRAIN_S = 120.0


class Consumers:
    """Starts ``lease_consumer`` processes and kills every one still running at the end."""

    def __init__(self, url: str, log_dir: Path) -> None:
        self.url = url
        self.log_dir = log_dir
        self.marks = redis.Redis.from_url(url)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.killed_at: dict[int, float] = {}
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
        self.env.update(MEMORYD_DATA_DIR=os.environ["MEMORYD_DATA_DIR"],
                        MEMORYD_VISIBILITY_TIMEOUT_S=str(VISIBILITY_S))

    def start(self, *flags: str) -> subprocess.Popen[bytes]:
        log = (self.log_dir / f"consumer-{len(self.procs)}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.lease_consumer", self.url, *flags],
            env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.procs.append(proc)
        return proc

    def wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        if self.marks.blpop([f"ready:{proc.pid}"], timeout=CONSUMER_START_S) is None:
            raise AssertionError(f"consumer {proc.pid} did not start (exit {proc.poll()})")

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        proc.kill()
        proc.wait()
        self.killed_at[proc.pid] = time.time()

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                self.kill(proc)


@pytest.fixture
def consumers(redis_url: str, tmp_path: Path) -> Iterator[Callable[[int], Consumers]]:
    made: list[Consumers] = []

    def make(db: int) -> Consumers:
        made.append(Consumers(redis_db_url(redis_url, db), tmp_path))
        made[-1].marks.flushdb()
        return made[-1]

    yield make
    for group in made:
        group.kill_all()
        group.marks.flushdb()
        group.marks.close()


def publish(url: str, ids: Iterator[int] | range, pause: float = 0.0) -> None:
    """Publish ``{"id": N}`` messages with kombu's own transport, as memoryd's client does."""
    with Connection(url) as conn:
        producer = Producer(conn)
        for mid in ids:
            producer.publish({"id": mid}, routing_key="memory", declare=[Queue("memory")])
            time.sleep(pause)


def wait_until(predicate: Callable[[], bool], timeout: float,
               what: str | Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            said = what if isinstance(what, str) else what()
            raise AssertionError(f"timed out after {timeout:g} s waiting for {said}")
        time.sleep(0.1)


def redelivery_delays(group: Consumers) -> list[float]:
    """For each delivery after the first of a message: how long after the previous
    holder was killed it came. A previous holder never killed fails the test: a live
    consumer's message was given to another."""
    last: dict[str, tuple[int, float]] = {}
    delays = []
    for entry in group.marks.lrange("log", 0, -1):
        mid, pid, at = entry.decode().split()
        if mid in last:
            holder = last[mid][0]
            assert holder in group.killed_at, f"message {mid} taken from live consumer {holder}"
            delays.append(float(at) - group.killed_at[holder])
        last[mid] = (int(pid), float(at))
    return delays


def ids(marks: redis.Redis, key: str) -> set[int]:
    return {int(m) for m in marks.smembers(key)}


def test_consumers_killed_at_random_moments_lose_and_double_no_message(
        consumers: Callable[[int], Consumers]) -> None:
    """Two consumer slots, each killed 25 times at a random moment after it started
    consuming and replaced, while messages keep arriving; then two consumers drain.
    Every message is processed, none is handed out again after its acknowledgement,
    and nothing is left queued or held."""
    group = consumers(KILL_DB)
    marks = group.marks
    published = [0]
    stop = threading.Event()

    def stream() -> None:
        def upto() -> Iterator[int]:
            while not stop.is_set():
                published[0] += 1
                yield published[0]
        publish(group.url, upto(), pause=0.01)

    def slot(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(KILLS // 2):
            proc = group.start()
            group.wait_ready(proc)
            time.sleep(rng.uniform(0, 0.4))
            group.kill(proc)

    publisher = threading.Thread(target=stream)
    publisher.start()
    slots = [threading.Thread(target=slot, args=(seed,)) for seed in range(2)]
    try:
        for thread in slots:
            thread.start()
        for thread in slots:
            thread.join()
    finally:
        stop.set()
        publisher.join()
    assert len(group.procs) == KILLS
    assert all(proc.returncode == -9 for proc in group.procs)

    for _ in range(2):
        group.wait_ready(group.start())
    everything = set(range(1, published[0] + 1))
    wait_until(lambda: ids(marks, "processed") == everything
               and marks.llen("memory") == 0 and marks.hlen("unacked") == 0,
               DRAIN_S, lambda: f"every message processed and nothing left held: "
               f"{len(everything - ids(marks, 'processed'))} of {len(everything)} missing, "
               f"{marks.hlen('unacked')} held")

    acks = {int(k): int(v) for k, v in marks.hgetall("acks").items()}
    deliveries = {int(k): int(v) for k, v in marks.hgetall("deliveries").items()}
    assert ids(marks, "processed") == everything  # none lost
    assert marks.lrange("after_ack", 0, -1) == []  # none given out again once acknowledged
    assert all(count == 1 for count in acks.values())  # none acknowledged twice
    assert marks.zcard("unacked_index") == 0
    # The kills hit messages in hand: some came back to a later consumer, and only
    # those of killed consumers did.
    assert any(count > 1 for count in deliveries.values())
    delays = redelivery_delays(group)
    print(f"{len(delays)} redeliveries after {KILLS} kills, {len(everything)} messages; "
          f"back {min(delays):.1f}-{max(delays):.1f} s after the kill "
          f"(visibility {VISIBILITY_S} s, sweeps every second)")


def stopped(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the process stopped itself (state T in /proc)."""
    stat = Path(f"/proc/{proc.pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def kill_between_take_and_record(group: Consumers, *flags: str) -> float:
    """One message; a consumer stops itself as the message reaches its transport's
    hands and is killed there; a normal consumer (memoryd's transport) starts."""
    publish(group.url, range(1, 2))
    victim = group.start("--stop-at-take", *flags)
    wait_until(lambda: stopped(victim), CONSUMER_START_S, "the consumer to stop at its take")
    assert group.marks.llen("memory") == 0  # taken from the queue
    group.kill(victim)
    group.wait_ready(group.start())
    return group.killed_at[victim.pid]


def test_a_consumer_killed_right_after_its_take_loses_no_message(
        consumers: Callable[[int], Consumers]) -> None:
    """On memoryd's transport the take recorded the message as held, so it comes back
    once its lease runs out and is processed once."""
    group = consumers(STOP_DB)
    victim_killed_at = kill_between_take_and_record(group)
    # The consumer marks a message processed, then acknowledges it, then counts the ack.
    wait_until(lambda: ids(group.marks, "processed") == {1}
               and group.marks.hexists("acks", "1"), DRAIN_S,
               "the killed consumer's message to be processed and acknowledged")
    assert group.marks.hget("acks", "1") == b"1"
    assert group.marks.hget("deliveries", "1") == b"1"  # the killed one never handled it
    (entry,) = group.marks.lrange("log", 0, -1)
    print(f"back {float(entry.split()[2]) - victim_killed_at:.1f} s after the kill")
    wait_until(lambda: group.marks.hlen("unacked") == 0, DRAIN_S, "its acknowledgement")


def test_kombus_own_transport_loses_a_message_killed_between_pop_and_record(
        consumers: Callable[[int], Consumers]) -> None:
    """Why memoryd takes atomically: on kombu's transport the same kill loses the
    message for good; nothing holds it, so no sweep ever brings it back."""
    group = consumers(STOP_DB)
    kill_between_take_and_record(group, "--kombu")
    assert group.marks.hlen("unacked") == 0 and group.marks.llen("memory") == 0
    time.sleep(VISIBILITY_S * 3)  # three leases' worth of sweeps by the live consumer
    assert group.marks.smembers("processed") == set()
    assert group.marks.hlen("unacked") == 0 and group.marks.llen("memory") == 0


def test_a_sweep_restores_a_lapsed_lease_once_and_a_renewed_one_never(redis_url: str) -> None:
    """The sweep's restore re-checks the lease inside its transaction: a message renewed
    after the scan stays held, and restoring a lapsed one twice puts it back once."""
    from memoryd.broker.redis_leases import Transport

    url = redis_db_url(redis_url, STOP_DB)
    raw = redis.Redis.from_url(url)
    raw.flushdb()
    publish(url, range(1, 2))
    held = []
    with Connection(url, transport=Transport,
                    transport_options={"visibility_timeout": VISIBILITY_S}) as conn, \
            conn.Consumer([Queue("memory")], prefetch_count=1,
                          callbacks=[lambda body, message: held.append(message)]):
        conn.drain_events(timeout=10)
        (message,) = held
        qos = message.channel.qos
        qos.leases.release(message.delivery_tag)  # no renewals from here on
        tag = message.delivery_tag.encode()
        assert raw.hexists("unacked", tag) and raw.llen("memory") == 0

        ceil = time.time() - VISIBILITY_S
        raw.zadd("unacked_index", {tag: time.time()})  # renewed after the scan
        qos.restore_expired(tag, ceil, raw)
        assert raw.hexists("unacked", tag) and raw.llen("memory") == 0

        raw.zadd("unacked_index", {tag: ceil - 1})  # lapsed
        qos.restore_expired(tag, ceil, raw)
        qos.restore_expired(tag, ceil, raw)
        assert raw.llen("memory") == 1
        assert not raw.hexists("unacked", tag) and raw.zcard("unacked_index") == 0
        restored = json.loads(raw.lindex("memory", 0))
        assert restored["properties"]["delivery_tag"] == message.delivery_tag
        assert restored["headers"]["redelivered"] is True
    raw.flushdb()
    raw.close()


def waiting_channel(conn: Connection, delivered: list[Any]) -> Any:
    """A consumer's channel on memoryd's transport with its idle wait on the queue sent."""
    consumer = conn.Consumer([Queue("memory")], prefetch_count=1,
                             callbacks=[lambda body, message: delivered.append(message)])
    consumer.consume()
    channel = consumer.channel
    client = channel.client  # connected as kombu's poller connects it
    client.connection = client.connection or client.connection_pool.get_connection()
    channel._waiting = True  # its last take found nothing: the next command waits
    channel._brpop_start(timeout=3)
    return channel


def test_one_message_wakes_one_waiting_consumer_which_then_takes_it(redis_url: str) -> None:
    """Three consumers wait on the queue; one message wakes one of them (the others go
    on waiting), and that one's next take delivers it, recorded as held."""
    from memoryd.broker.redis_leases import Transport

    url = redis_db_url(redis_url, STOP_DB)
    raw = redis.Redis.from_url(url)
    raw.flushdb()
    delivered: list[Any] = []
    conns = [Connection(url, transport=Transport) for _ in range(3)]
    try:
        channels = [waiting_channel(conn, delivered) for conn in conns]
        time.sleep(0.3)  # every wait has reached Redis
        publish(url, range(1, 2))
        time.sleep(0.5)
        woken = [ch for ch in channels if ch.client.connection.can_read(timeout=0)]
        assert len(woken) == 1
        (channel,) = woken
        with pytest.raises(Empty):
            channel._brpop_read()  # the wait's reply: the message claimed, not yet taken
        claimed = channel.claimed_key("memory")
        assert raw.llen(claimed) == 1 and raw.llen("memory") == 0
        channel._brpop_start()
        assert channel._brpop_read() is True
        (message,) = delivered
        assert message.payload == {"id": 1}
        assert raw.hexists("unacked", message.delivery_tag) and raw.llen(claimed) == 0
        for other in channels:
            if other is not channel:
                with pytest.raises(Empty):
                    other._brpop_read()  # its wait ran out: nothing came for it
    finally:
        for conn in conns:
            conn.release()
        raw.flushdb()
        raw.close()


def test_a_message_claimed_by_a_consumer_killed_before_its_take_goes_to_the_next_take(
        redis_url: str) -> None:
    """A consumer killed between its wait's move and its take leaves the message on the
    claimed list; another consumer's take delivers it, byte for byte, recorded as held.
    The queue's size counts it while it waits there, and a purge removes it."""
    from memoryd.broker.redis_leases import Transport

    url = redis_db_url(redis_url, STOP_DB)
    raw = redis.Redis.from_url(url)
    raw.flushdb()
    publish(url, range(1, 3))
    held: list[Any] = []
    with Connection(url, transport=Transport) as conn:
        claimed = conn.default_channel.claimed_key("memory")
        raw.blmove("memory", claimed, 1, "RIGHT", "LEFT")  # what the killed one's wait did
        moved = raw.lindex(claimed, 0)
        assert conn.default_channel._size("memory") == 2
        with conn.Consumer([Queue("memory")], prefetch_count=1,
                           callbacks=[lambda body, message: held.append(message)]):
            conn.drain_events(timeout=10)
        (message,) = held
        assert message.payload == {"id": 1}  # the claimed one, the queue's oldest
        assert json.loads(raw.hget("unacked", message.delivery_tag))[0] == json.loads(moved)
        assert raw.llen(claimed) == 0 and raw.llen("memory") == 1

        raw.rpush(claimed, moved)
        assert conn.default_channel._purge("memory") == 2
        assert raw.llen(claimed) == 0 and raw.llen("memory") == 0
    raw.flushdb()
    raw.close()
