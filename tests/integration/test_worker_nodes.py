"""``memoryd worker`` with several memory consumers: each takes and runs its own
messages, a consumer that dies is started again, and a stop reaches every one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.service_user import opened_for_service_user
from tests.support.workers import memoryd_env

pytestmark = pytest.mark.slow


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[str]:
    from memoryd.embedded.redis import EmbeddedRedis

    server = EmbeddedRedis(opened_for_service_user(tmp_path) / "redis")
    try:
        yield server.start()
    finally:
        server.stop()


def _nodes(broker: str, timeout: float = 1.0) -> dict[str, Any]:
    from celery import Celery

    app = Celery("memoryd-test-nodes", broker=broker, set_as_current=False)
    app.conf.update(broker_connection_retry_on_startup=True, accept_content=["json"])
    try:
        return app.control.inspect(timeout=timeout).stats() or {}
    finally:
        app.close()


def _wait_for(condition: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout:g} s: {what}")


def _by_name(stats: dict[str, Any]) -> dict[str, int]:
    return {node.partition("@")[0]: int(reply["pid"]) for node, reply in stats.items()}


def test_two_memory_consumers_serve_calls_restart_after_a_kill_and_stop_together(
        pg_url: str, own_redis: str, tmp_path: Path) -> None:
    from memoryd.client import MemoryClient

    env = memoryd_env(pg_url, own_redis)
    log = (tmp_path / "worker.log").open("ab")
    group = subprocess.Popen(
        [sys.executable, "-m", "memoryd", "worker", "--queues", "memory", "--processes", "2"],
        env=env, stdin=subprocess.DEVNULL, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True)
    try:
        names = _wait_for(lambda: (found := _by_name(_nodes(own_redis)))
                          and set(found) == {"memory-1", "memory-2"} and found, 120,
                          "both consumers answer")
        # Each consumer is a child of the worker command and runs tasks itself (no pool).
        children = {c.pid for c in psutil.Process(group.pid).children()}
        assert set(names.values()) == children
        assert all(not psutil.Process(pid).children() for pid in children)

        agent = f"agent-nodes-{os.getpid()}"
        with MemoryClient(broker_url=own_redis, timeout=60) as client:
            client.store(agent, "The staging database moved to the Oslo region")
            with ThreadPoolExecutor(8) as callers:
                found = list(callers.map(
                    lambda _: client.recall(agent, "where is the staging database?"),
                    range(40)))
            assert all(hits[0].memory.content.startswith("The staging database")
                       for hits in found)
        served = {node.partition("@")[0]: reply["total"].get("memoryd.recall", 0)
                  for node, reply in _nodes(own_redis).items()}
        assert sum(served.values()) == 40 and all(served.values()), served

        os.kill(names["memory-2"], signal.SIGKILL)
        restarted = _wait_for(lambda: (pid := _by_name(_nodes(own_redis)).get("memory-2"))
                              and pid != names["memory-2"] and pid, 120,
                              "memory-2 comes back with a new process")
        assert restarted in {c.pid for c in psutil.Process(group.pid).children()}
        with MemoryClient(broker_url=own_redis, timeout=60) as client:
            assert client.recall(agent, "staging database region")

        group.send_signal(signal.SIGTERM)
        assert group.wait(90) == 0
        consumers = [names["memory-1"], restarted]
        assert not [pid for pid in consumers if psutil.pid_exists(pid)
                    and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    finally:
        if group.poll() is None:
            os.killpg(group.pid, signal.SIGKILL)
            group.wait()
        log.close()
