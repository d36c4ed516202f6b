"""Real memoryd worker processes for the integration tests.

``python -m memoryd worker`` subprocesses on the session's PostgreSQL and Redis, each in
its own process group (so a kill reaches the prefork children too). Each worker gets
its own Redis database number, so tests cannot see each other's queues.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

WORKER_START_TIMEOUT_S = 120.0


def redis_db_url(redis_url: str, db: int) -> str:
    """``redis_url`` pointed at database number ``db``."""
    return redis_url.rsplit("/", 1)[0] + f"/{db}"


def memoryd_env(pg_url: str, broker_url: str, **extra: str) -> dict[str, str]:
    """The environment of a memoryd subprocess: the test database and broker only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
    env.update({
        "MEMORYD_DATABASE_URL": pg_url,
        "MEMORYD_BROKER_URL": broker_url,
        "MEMORYD_DATA_DIR": os.environ["MEMORYD_DATA_DIR"],
    })
    env.update(extra)
    return env


class WorkerProcess:
    """One `python -m memoryd worker` in its own process group (so a kill reaches the
    prefork children too), logging to a file."""

    def __init__(self, env: dict[str, str], log_path: Path, *,
                 queues: str = "memory,maintenance", concurrency: int = 2,
                 module: str = "memoryd") -> None:
        self.env = env
        self.broker_url = env["MEMORYD_BROKER_URL"]
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, "--log-level", "INFO", "worker",
             "--queues", queues, "--concurrency", str(concurrency)],
            env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def wait_ready(self, timeout: float = WORKER_START_TIMEOUT_S) -> None:
        """Until the worker answers a control ping (then it consumes its queues)."""
        from celery import Celery

        app = Celery("memoryd-test-ping", broker=self.broker_url, set_as_current=False)
        app.conf.update(broker_connection_retry_on_startup=True, accept_content=["json"])
        deadline = time.monotonic() + timeout
        try:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"worker exited with {self.proc.returncode}:\n"
                                       f"{self.log_tail()}")
                if app.control.ping(timeout=0.5):
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"worker did not answer within {timeout:g} s:\n"
                                       f"{self.log_tail()}")
        finally:
            app.close()

    def kill(self) -> None:
        """SIGKILL the whole process group: the worker and its pool children die at once."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._log.close()

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM (Celery's warm shutdown), wait, then SIGKILL the group."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace)
        self.kill()
