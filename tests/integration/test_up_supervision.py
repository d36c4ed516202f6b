"""``memoryd up`` keeps its stack up: every child and embedded server killed with SIGKILL
comes back on its port, and a client made before keeps working; only a crash loop stops
the stack. One stack serves both tests (starting one is slow): the crash loop ends it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from memoryd.cli.nodes import CRASH_LOOP
from memoryd.config import Settings
from memoryd.embedded._proc import port_open
from tests.integration.test_up import (
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    _clean_env,
    _nothing_left,
    _port,
    _wait_until_up,
    reachable_data_dir,
    stop_leftovers,
)

pytestmark = pytest.mark.slow

BACK_WITHIN_S = 30.0  # a killed child runs again (its serving is waited for apart)
SERVED_WITHIN_S = 180.0  # a call through the client made before the kill


@dataclass
class Up:
    proc: subprocess.Popen[bytes]
    data_dir: Path
    log: Path
    gateway_port: int
    flower_port: int

    def runtime(self) -> dict[str, Any]:
        found: dict[str, Any] = json.loads((self.data_dir / "runtime.json").read_text())
        return found

    def pid(self, name: str) -> int | None:
        try:
            runtime = self.runtime()
        except FileNotFoundError:  # the stack stopped
            return None
        found = {**runtime["children"], **runtime["servers"]}.get(name)
        return int(found) if found else None


@pytest.fixture(scope="module")
def up() -> Iterator[Up]:
    data_dir = reachable_data_dir()
    log = data_dir.parent / "up.log"
    gateway_port, flower_port = _port(), _port()
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "memoryd", "up", "--gateway-port",
                                 str(gateway_port), "--flower-port", str(flower_port)],
                                env=_clean_env(MEMORYD_DATA_DIR=str(data_dir)),
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        _wait_until_up(proc, log, time.monotonic() + 2 * START_TIMEOUT_S)
        yield Up(proc, data_dir, log, gateway_port, flower_port)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        stop_leftovers(data_dir)


def _kill_and_see_it_back(up: Up, name: str) -> int:
    """SIGKILL ``name``; its new pid, once it runs again."""
    killed = up.pid(name)
    assert killed is not None, up.runtime()
    os.kill(killed, signal.SIGKILL)
    deadline = time.monotonic() + BACK_WITHIN_S
    while True:
        assert up.proc.poll() is None, up.log.read_text()[-4000:]
        pid = up.pid(name)
        if pid not in (None, killed) and psutil.pid_exists(pid):
            return pid
        assert time.monotonic() < deadline, (name, up.log.read_text()[-4000:])
        time.sleep(0.2)


def _served(client: Any, agent: str, what: str, up: Up) -> None:
    """The client stores and recalls once the stack serves again: it may fail while a
    killed server is down, never for good."""
    from memoryd.errors import MemorydError

    deadline = time.monotonic() + SERVED_WITHIN_S
    while True:
        try:
            stored = client.store(agent, f"Stored after {what} came back.", timeout=30)
            hits = client.recall(agent, f"after {what} came back", limit=50, timeout=30)
            break
        except MemorydError as exc:
            assert time.monotonic() < deadline, (what, exc, up.log.read_text()[-4000:])
            time.sleep(1.0)
    assert stored.id in [hit.memory.id for hit in hits], what


def _gateway_and_flower_answer(up: Up) -> None:
    import httpx

    deadline = time.monotonic() + SERVED_WITHIN_S
    for url, wanted in ((f"http://127.0.0.1:{up.gateway_port}/readyz", 200),
                        (f"http://127.0.0.1:{up.flower_port}/", 401)):  # behind its login
        while True:
            try:
                if httpx.get(url, timeout=10).status_code == wanted:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (url, up.log.read_text()[-4000:])
            time.sleep(0.5)


def test_each_child_killed_comes_back_on_its_port_and_a_client_made_before_works_again(
        up: Up) -> None:
    from memoryd.client import MemoryClient

    before = up.runtime()
    redis_port = int(before["broker_url"].rsplit(":", 1)[1].split("/")[0])
    postgres_port = int((up.data_dir / "postgres" / "port").read_text())
    agent = f"supervised-{uuid.uuid4()}"
    with MemoryClient(settings=Settings(data_dir=up.data_dir), timeout=60) as client:
        _served(client, agent, "the start", up)
        for name in ("worker-memory", "worker-maintenance", "beat", "gateway", "flower",
                     "redis", "postgres"):
            _kill_and_see_it_back(up, name)
            _served(client, agent, name, up)
            _gateway_and_flower_answer(up)
            after = up.runtime()
            # Same URLs, ports and all: nothing that reached the stack needs telling.
            assert (after["broker_url"], after["database_url"]) == (
                before["broker_url"], before["database_url"]), name
            assert port_open(redis_port) and port_open(postgres_port), name
    log = up.log.read_text()
    assert '"process": "redis"' in log and "SIGKILL" in log


def test_a_child_that_keeps_dying_stops_the_whole_stack_naming_it(up: Up) -> None:
    """Killed each time it is back (the first test killed it once already, within the
    minute or not), beat stops the stack at its fifth death within a minute."""
    everything = {p.pid for p in psutil.Process(up.proc.pid).children(recursive=True)}
    kills = 0
    while up.proc.poll() is None:
        pid = up.pid("beat")
        if pid is not None and psutil.pid_exists(pid):
            os.kill(pid, signal.SIGKILL)
            kills += 1
            while up.pid("beat") == pid and up.proc.poll() is None:
                time.sleep(0.1)
        assert kills <= CRASH_LOOP[0], up.log.read_text()[-4000:]
        time.sleep(0.1)
    assert up.proc.wait(STOP_TIMEOUT_S) == 2, up.log.read_text()[-4000:]
    log = up.log.read_text()
    assert ("memoryd: error: EmbeddedServiceError: beat was killed by SIGKILL, its 5th exit "
            "within 60 s; stopping memoryd") in log, log[-4000:]
    assert not (up.data_dir / "runtime.json").exists()
    _nothing_left(up.data_dir, everything)
