"""``memoryd up``: the all-in-one start for a newcomer.

Uses MEMORYD_DATABASE_URL / MEMORYD_BROKER_URL when set; otherwise starts the
embedded PostgreSQL and an embedded Redis on 127.0.0.1. Then migrates and runs
the memory worker, the maintenance worker, beat and Flower as child processes,
and stops all of it on Ctrl-C (or SIGTERM).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from memoryd.config import get_settings
from memoryd.errors import EmbeddedServiceError

if TYPE_CHECKING:
    from memoryd.embedded.postgres import EmbeddedPostgres
    from memoryd.embedded.redis import EmbeddedRedis

log = structlog.get_logger(__name__)
STOP_GRACE_S = 30.0


@dataclass
class Stack:
    flower_port: int | None = 5555
    log_level: str = "INFO"
    children: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    # Set before they start, so whatever got started is stopped whatever fails later.
    _postgres: EmbeddedPostgres | None = None
    _redis: EmbeddedRedis | None = None

    def run(self) -> int:
        settings = get_settings()
        runtime = settings.runtime_file()
        # Until the stack is up, SIGTERM stops it like Ctrl-C: through the cleanup below.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            database_url = self._database()
            broker_url = self._broker()
            env = {**os.environ, "MEMORYD_DATABASE_URL": database_url,
                   "MEMORYD_BROKER_URL": broker_url}
            self._migrate(env)
            self._start_children(env)
            self._write_runtime(runtime, database_url, broker_url)
            self._announce(database_url, broker_url)
            self._wait()
        finally:
            self._stop_children()
            runtime.unlink(missing_ok=True)
            if self._redis is not None:
                self._redis.stop()
            if self._postgres is not None and self._postgres.started_here:
                self._postgres.stop()
        return 0

    # --- services -------------------------------------------------------------
    def _database(self) -> str:
        settings = get_settings()
        if settings.database_url:
            return settings.database_url
        from memoryd.embedded.postgres import EmbeddedPostgres

        self._postgres = EmbeddedPostgres.from_settings()
        return self._postgres.ensure_running()

    def _broker(self) -> str:
        settings = get_settings()
        if settings.broker_url:
            return settings.broker_url
        from memoryd.embedded.redis import EmbeddedRedis

        self._redis = EmbeddedRedis(settings.data_dir / "redis", settings.embedded_redis_port)
        return self._redis.start()

    def _migrate(self, env: dict[str, str]) -> None:
        subprocess.run([sys.executable, "-m", "memoryd", "migrate"], env=env, check=True,
                       stdout=subprocess.DEVNULL)

    def _commands(self) -> dict[str, list[str]]:
        py = [sys.executable, "-m", "memoryd", "--log-level", self.log_level]
        commands = {
            "worker-memory": [*py, "worker", "--queues", "memory", "--concurrency", "2",
                              "--no-migrate"],
            "worker-maintenance": [*py, "worker", "--queues", "maintenance",
                                   "--concurrency", "1", "--no-migrate"],
            "beat": [*py, "beat"],
        }
        if self.flower_port:
            commands["flower"] = [sys.executable, "-m", "celery", "-A", "memoryd.worker",
                                  "flower", "--address=127.0.0.1", f"--port={self.flower_port}"]
        return commands

    def _start_children(self, env: dict[str, str]) -> None:
        for name, command in self._commands().items():
            self.children[name] = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)
            log.info("up.started", process=name, pid=self.children[name].pid)

    def _write_runtime(self, path: Path, database_url: str, broker_url: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({
            "pid": os.getpid(), "database_url": database_url, "broker_url": broker_url,
            "flower_url": f"http://127.0.0.1:{self.flower_port}" if self.flower_port else None,
            "children": {name: proc.pid for name, proc in self.children.items()},
        }, indent=2))

    def _announce(self, database_url: str, broker_url: str) -> None:
        lines = ["", "memoryd is up:", f"  database   {database_url}",
                 f"  broker     {broker_url}"]
        if self.flower_port:
            lines.append(f"  flower     http://127.0.0.1:{self.flower_port}")
        lines += [f"  {name:<10} pid {proc.pid}" for name, proc in self.children.items()]
        lines += ["", "Try:  memoryd store agent-1 'User prefers dark mode'",
                  "      memoryd recall agent-1 'what theme does the user like?'",
                  "Press Ctrl-C to stop.", ""]
        print("\n".join(lines), flush=True)

    # --- lifecycle --------------------------------------------------------------
    def _wait(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: self._stop.set())
        while not self._stop.wait(1.0):
            dead = [name for name, proc in self.children.items() if proc.poll() is not None]
            if dead:
                raise EmbeddedServiceError(f"{', '.join(dead)} exited; stopping memoryd")

    def _stop_children(self) -> None:
        for proc in self.children.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # Celery: warm shutdown, finish current tasks
        deadline = time.monotonic() + STOP_GRACE_S
        for name, proc in self.children.items():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("up.kill", process=name)
                proc.kill()
                proc.wait()
        self.children.clear()
