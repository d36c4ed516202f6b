"""A real Flower process (``celery flower`` on memoryd's app, as ``memoryd up`` starts it)
for the integration tests, behind a basic-auth login."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from memoryd.embedded._proc import free_port
from tests.support.gateway import terminate


class FlowerProcess:
    """``celery flower`` as ``memoryd up`` runs it, behind a login, logging to a file."""

    def __init__(self, env: dict[str, str], log_path: Path,
                 auth: tuple[str, str] = ("operator", "flower-test-password")) -> None:
        self.auth = auth
        self.url = f"http://127.0.0.1:{free_port()}"
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "memoryd.worker", "flower",
             "--address=127.0.0.1", f"--port={self.url.rsplit(':', 1)[1]}",
             f"--basic-auth={':'.join(self.auth)}"],
            env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)

    def get(self, path: str, **params: Any) -> httpx.Response:
        return httpx.get(f"{self.url}{path}", params=params, auth=self.auth, timeout=30)

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, "flower exited"
            with contextlib.suppress(httpx.HTTPError):
                if self.get("/api/workers").status_code == 200:
                    return
            assert time.monotonic() < deadline, "flower did not answer"
            time.sleep(0.5)

    def tasks(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = self.get("/api/tasks").json()
        return found

    def stop(self) -> None:
        terminate(self.proc)
        self._log.close()
