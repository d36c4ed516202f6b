"""Crash recovery: how long a killed worker's message waits before it is back in work.

For each broker (the embedded Redis on memoryd's defaults; RabbitMQ on 127.0.0.1:5672 if
one answers), ``--trials`` times: a memory worker takes stores from a stream of 60 and
blocks inside one (a table lock held by the benchmark), a second worker runs beside it,
the first is killed with SIGKILL (its whole process group), and the benchmark times how
long the message it held takes to be back in its queue for the live worker. Then the lock
is released and every store must land exactly once.

    .venv/bin/python -m bench.recovery [--trials N] [--out PATH] [--no-rabbitmq]

Wrap runs in ``flock /tmp/memoryd-bench.lock``. See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from sqlalchemy import text

from bench.common import (
    OUT_DIR,
    embedded_postgres,
    format_table,
    let_service_user_in,
    machine_info,
    now_iso,
    write_json,
)

DEFAULT_OUT = OUT_DIR / "recovery.json"
AMQP_URL = os.environ.get("MEMORYD_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
STORES = 60


def wait_for(predicate: Callable[[], bool], timeout: float, what: str,
             interval: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


class Worker:
    """``python -m memoryd worker --queues memory --concurrency 1`` in its own group."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self._log = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "worker", "--no-migrate", "--queues", "memory",
             "--concurrency", "1", "--name", f"memory-{log.stem}"], env=env,
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)

    def kill(self) -> None:
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._log.close()


class Broker:
    """Where messages wait, and how to see the killed worker's message come back."""

    def __init__(self, name: str, url: str, results: str) -> None:
        self.name, self.url, self.results = name, url, results

    def held(self) -> set[str]:
        """Identifiers of the messages workers hold now (Redis: delivery tags)."""
        if self.name != "redis":
            return set()
        import redis

        with redis.Redis.from_url(self.url) as client:
            return {tag.decode() for tag in client.hkeys("unacked")}

    def back(self, held: set[str], ready_before: int) -> bool:
        if self.name == "redis":
            import redis

            with redis.Redis.from_url(self.url) as client:
                return not any(client.hexists("unacked", tag) for tag in held)
        return self.ready() > ready_before

    def ready(self) -> int:
        if self.name == "redis":
            import redis

            with redis.Redis.from_url(self.url) as client:
                return int(client.llen("memory"))
        from kombu import Connection

        with Connection(self.url) as conn:
            return int(conn.default_channel.queue_declare(queue="memory", passive=True)
                       .message_count)

    def reset(self) -> None:
        if self.name == "redis":
            import redis

            with redis.Redis.from_url(self.url) as client:
                client.flushdb()
            return
        from kombu import Connection

        # Emptied, not deleted: this process's Celery remembers what it declared and
        # would publish to a deleted exchange without declaring it again.
        with Connection(self.url) as conn:
            for queue in ("memory", "maintenance", "memoryd.dead"):
                try:
                    conn.default_channel.queue_purge(queue)
                except Exception:  # not declared yet
                    conn.close()
                    conn.connect()


def trial(broker: Broker, db_url: str, workdir: Path, number: int) -> dict[str, Any]:
    from memoryd.client import MemoryClient
    from memoryd.memory.store import MemoryStore

    broker.reset()
    env = {**os.environ, "MEMORYD_DATABASE_URL": db_url, "MEMORYD_BROKER_URL": broker.url,
           "MEMORYD_RESULT_BACKEND": broker.results, "MEMORYD_PRELOAD_MODELS": "false",
           "MEMORYD_DATA_DIR": str(workdir / "data")}
    agent = f"recovery-{uuid.uuid4()}"
    store = MemoryStore(db_url)
    first = Worker(env, workdir / f"{broker.name}-{number}-a.log")
    second: Worker | None = None
    try:
        def landed() -> int:
            with store.session() as session:
                return int(session.execute(text(
                    "SELECT count(*) FROM memories WHERE agent_id = :a"), {"a": agent}
                ).scalar_one())

        with MemoryClient(broker_url=broker.url, result_backend=broker.results,
                          timeout=300.0) as client:
            handles = [client.store(agent, f"recovery fact {i}: {uuid.uuid4()}", wait=False)
                       for i in range(STORES)]
            wait_for(lambda: landed() >= 5, 120, "the first stores")
            lock = store.engine.connect()
            try:
                lock.execute(text("LOCK TABLE memories IN SHARE MODE"))
                wait_for(lambda: _lock_waiters(store) >= 1, 30, "the worker to block")
                held = broker.held()
                second = Worker(env, workdir / f"{broker.name}-{number}-b.log")
                wait_for(lambda: _lock_waiters(store) >= 2, 60, "the second worker to block")
                ready = broker.ready()
                first.kill()
                killed = time.monotonic()
                wait_for(lambda: broker.back(held, ready), 300, "the message to come back")
                recovered_s = time.monotonic() - killed
            finally:
                lock.rollback()
                lock.close()
            ids = {handle.get(timeout=300).id for handle in handles}
        return {"trial": number, "recovered_s": round(recovered_s, 2),
                "stores": STORES, "landed": landed(), "distinct_results": len(ids)}
    finally:
        for worker in (first, second):
            if worker is not None and worker.proc.poll() is None:
                worker.kill()
        store.close()


def _lock_waiters(store: Any) -> int:
    with store.session() as session:
        return int(session.execute(text(
            "SELECT count(*) FROM pg_locks WHERE NOT granted "
            "AND relation = 'memories'::regclass")).scalar_one())


@contextmanager
def brokers(workdir: Path, rabbitmq: bool) -> Iterator[list[Broker]]:
    from memoryd.embedded.redis import EmbeddedRedis

    redis_server = EmbeddedRedis(workdir / "redis")
    url = redis_server.start()
    base = url.rsplit("/", 1)[0]
    found = [Broker("redis", f"{base}/0", f"{base}/1")]
    if rabbitmq and _reachable(AMQP_URL):
        found.append(Broker("rabbitmq", AMQP_URL, f"{base}/2"))
    elif rabbitmq:
        print(f"RabbitMQ not reachable at {AMQP_URL}: not measured", file=sys.stderr)
    try:
        yield found
    finally:
        redis_server.stop()


def _reachable(url: str) -> bool:
    from urllib.parse import urlparse

    where = urlparse(url)
    try:
        socket.create_connection((where.hostname, where.port or 5672), timeout=2).close()
    except OSError:
        return False
    return True


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.recovery", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--no-rabbitmq", action="store_true")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    from memoryd.config import get_settings
    from memoryd.memory.store import MemoryStore

    args = parse_args(argv)
    report: dict[str, Any] = {"benchmark": "recovery", "date": now_iso(),
                              "machine": machine_info(),
                              "visibility_timeout_s": get_settings().visibility_timeout_s,
                              "results": {}}
    with tempfile.TemporaryDirectory(prefix="memoryd-bench-recovery-") as tmp, \
            embedded_postgres() as db_url, \
            brokers(let_service_user_in(Path(tmp)), not args.no_rabbitmq) as found:
        migrated = MemoryStore(db_url)
        migrated.migrate()
        migrated.close()
        for broker in found:
            report["results"][broker.name] = [trial(broker, db_url, Path(tmp), n)
                                              for n in range(1, args.trials + 1)]
    rows = [(name, r["trial"], r["recovered_s"], f"{r['landed']}/{r['stores']}",
             r["distinct_results"]) for name, runs in report["results"].items() for r in runs]
    print(format_table(["broker", "trial", "back in queue after kill (s)", "landed",
                        "distinct results"], rows))
    write_json(args.out, report)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
