"""How ``memoryd worker`` uses a machine: which Celery nodes it runs, and a small
supervisor when it runs more than one.

The memory queue (store, recall and the other calls agents wait on) is served by one
consumer process per core, each taking its own messages from the broker and running
them inline (Celery's solo pool). A prefork node funnels every message of the machine
through one main process (taking, counting deliveries, events, acknowledgements, and
the pipe to its pool processes): that process, not the cores, set the node's ceiling.
Consumers share nothing, so throughput grows with cores and with machines. The
maintenance queue keeps a prefork node: its jobs run for minutes and need Celery's time
limits, which only a pool can enforce. An explicit ``--concurrency`` asks for one
prefork node for all the queues given, as before.

The supervisor restarts a node that dies (a native crash, an out-of-memory kill) after a
pause that grows while it keeps dying; its messages come back to the queue when their
leases run out, and the delivery guard sets a message aside that keeps killing nodes.
SIGTERM, SIGINT or SIGHUP stop every node with Celery's warm shutdown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import structlog

from memoryd.celery_config import MAINTENANCE_QUEUE, MEMORY_QUEUE
from memoryd.process import STOP_SIGNALS

log = structlog.get_logger(__name__)

STOP_GRACE_S = 60.0
RESTART_PAUSE_S = (1.0, 30.0)  # first pause, longest pause, between restarts of a node
STABLE_AFTER_S = 30.0  # a node that ran this long before dying restarts after the first pause
# ``memoryd up`` stops when one of its children dies this often within this many seconds:
# restarting it again would not help (a broken configuration, a port taken for good).
CRASH_LOOP = (5, 60.0)


@dataclass
class Restarts:
    """When a child that died starts again: after a pause that doubles while it keeps
    dying soon after it started, back to the first once it ran ``STABLE_AFTER_S``."""

    pause: float = RESTART_PAUSE_S[0]
    deaths: deque[float] = field(default_factory=lambda: deque(maxlen=CRASH_LOOP[0]))

    def died(self, lived: float, now: float) -> float:
        """Record a death after ``lived`` seconds of running; the pause before the next
        start."""
        self.deaths.append(now)
        self.pause = (RESTART_PAUSE_S[0] if lived >= STABLE_AFTER_S
                      else min(self.pause * 2, RESTART_PAUSE_S[1]))
        return self.pause

    def looping(self) -> bool:
        """Whether the last ``CRASH_LOOP[0]`` deaths all came within ``CRASH_LOOP[1]`` s."""
        count, window = CRASH_LOOP
        return len(self.deaths) == count and self.deaths[-1] - self.deaths[0] <= window


@dataclass(frozen=True)
class Node:
    """One Celery node to start: its name (before the @) and ``memoryd worker`` options."""

    name: str
    queues: tuple[str, ...]
    pool: str  # "solo" or "prefork"
    concurrency: int = 1


def plan_nodes(queues: Sequence[str], *, concurrency: int | None, processes: int | None,
               name: str | None = None) -> list[Node]:
    """The nodes for ``memoryd worker``: an explicit ``concurrency`` gives one prefork
    node named after its queues (``memory-maintenance``); otherwise ``processes``
    consumers (default: one per core) for the memory queue, named ``memory-1``,
    ``memory-2``, ... (``memory`` for an explicit single one), and one prefork
    process for the maintenance queue, named ``maintenance``. ``name`` replaces the
    stem (``NAME``, ``NAME-1``, ``NAME-maintenance``)."""
    if concurrency:
        return [Node(name or "-".join(queues), tuple(queues), "prefork", concurrency)]
    nodes: list[Node] = []
    if MEMORY_QUEUE in queues:
        count = processes or os.cpu_count() or 1
        stem = name or MEMORY_QUEUE
        numbered = processes is None or count > 1  # memory-1 names a default node anywhere
        nodes += [Node(f"{stem}-{i}" if numbered else stem, (MEMORY_QUEUE,), "solo")
                  for i in range(1, count + 1)]
    if MAINTENANCE_QUEUE in queues:
        alone = MEMORY_QUEUE not in queues or not name
        nodes.append(Node((name or MAINTENANCE_QUEUE) if alone
                          else f"{name}-{MAINTENANCE_QUEUE}", (MAINTENANCE_QUEUE,),
                          "prefork", 1))
    return nodes


def node_command(node: Node, *, log_level: str, quiet: bool) -> list[str]:
    """The command line that runs ``node`` alone (already migrated)."""
    argv = [sys.executable, "-m", "memoryd", "--log-level", log_level, "worker",
            "--queues", ",".join(node.queues), "--name", node.name, "--no-migrate"]
    argv += (["--concurrency", str(node.concurrency)] if node.pool == "prefork"
             else ["--processes", "1"])
    return [*argv, "--quiet"] if quiet else argv


def node_env(nodes: Sequence[Node]) -> dict[str, str]:
    """The nodes' environment: each memory consumer embeds on its share of the cores
    (an operator's MEMORYD_EMBED_THREADS wins)."""
    env = dict(os.environ)
    consumers = sum(1 for n in nodes if n.pool == "solo")
    if consumers and "MEMORYD_EMBED_THREADS" not in env:
        env["MEMORYD_EMBED_THREADS"] = str(max(1, (os.cpu_count() or 1) // consumers))
    return env


@dataclass
class _Running:
    command: list[str]
    proc: subprocess.Popen[bytes]
    started: float = field(default_factory=time.monotonic)
    restarts: Restarts = field(default_factory=Restarts)
    restart_at: float | None = None


class NodeGroup:
    """Runs several nodes as child processes until told to stop; restarts those that die."""

    def __init__(self, commands: Sequence[list[str]], env: dict[str, str]) -> None:
        self._commands = list(commands)
        self._env = env
        self._stop = threading.Event()
        self._running: list[_Running] = []

    def run(self) -> int:
        for sig in STOP_SIGNALS:
            signal.signal(sig, lambda *_: self._stop.set())
        self._running = [_Running(c, self._start(c)) for c in self._commands]
        try:
            while not self._stop.wait(0.5):
                for node in self._running:
                    self._look_after(node)
        finally:
            self._stop_all()
        return 0

    def _start(self, command: list[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(command, env=self._env, stdin=subprocess.DEVNULL)

    def _look_after(self, node: _Running) -> None:
        now = time.monotonic()
        if node.restart_at is not None:
            if now >= node.restart_at:
                node.proc, node.started, node.restart_at = self._start(node.command), now, None
            return
        code = node.proc.poll()
        if code is None:
            return
        pause = node.restarts.died(now - node.started, now)
        node.restart_at = now + pause
        log.warning("worker.node_exited", pid=node.proc.pid, code=code,
                    restart_in_s=round(pause, 1))

    def _stop_all(self) -> None:
        alive = [n.proc for n in self._running if n.proc.poll() is None]
        for proc in alive:
            proc.send_signal(signal.SIGTERM)  # Celery's warm shutdown: finish current tasks
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in alive:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
