"""A real Flower process (memoryd's monitor-only Flower, ``python -m
memoryd.cli.flower_monitor``, as ``memoryd up`` starts it) for the integration tests,
behind a basic-auth login handed over in its environment."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from memoryd.embedded._proc import free_port
from tests.support.gateway import terminate


class FlowerProcess:
    """Flower as ``memoryd up`` runs it, behind a login, logging to a file."""

    def __init__(self, env: dict[str, str], log_path: Path,
                 auth: tuple[str, str] = ("operator", "flower-test-password")) -> None:
        self.auth = auth
        self.url = f"http://127.0.0.1:{free_port()}"
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memoryd.cli.flower_monitor", "--address=127.0.0.1",
             f"--port={self.url.rsplit(':', 1)[1]}"],
            env={**env, "FLOWER_BASIC_AUTH": ":".join(self.auth)}, stdin=subprocess.DEVNULL,
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def get(self, path: str, **params: Any) -> httpx.Response:
        return httpx.get(f"{self.url}{path}", params=params, auth=self.auth, timeout=30)

    def request(self, method: str, path: str, *, login: bool = True,
                **options: Any) -> httpx.Response:
        """A request with the login, or without (``login=False``: none, or ``auth``)."""
        auth = options.pop("auth", self.auth if login else None)
        return httpx.request(method, f"{self.url}{path}", auth=auth, timeout=30, **options)

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


def until(check: Callable[[], Any], what: str, timeout: float = 180.0) -> Any:
    """What ``check`` returns once it is truthy, asked every half second for ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)
    return found


def every_page(flower: FlowerProcess) -> list[httpx.Response]:
    """Flower's task list, its data table and the page of every task it knows, each 200."""
    tasks = flower.tasks()
    pages = [flower.get("/api/tasks"), flower.get("/tasks"), flower.get(
        "/tasks/datatable", draw=1, start=0, length=100, **{
            "order[0][column]": 0, "columns[0][data]": "name", "order[0][dir]": "desc"})]
    pages += [flower.get(f"/task/{task_id}") for task_id in tasks]
    assert all(page.status_code == 200 for page in pages)
    return pages
