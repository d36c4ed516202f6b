"""A real ``python -m memoryd gateway`` process for the integration tests, and API keys
made the way ``memoryd keys create`` makes them."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from memoryd.embedded._proc import free_port

GATEWAY_START_TIMEOUT_S = 60.0


class GatewayProcess:
    def __init__(self, env: dict[str, str], log_path: Path, port: int | None = None,
                 *extra_args: str) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "--log-level", "INFO", "gateway",
             "--port", str(self.port), "--access-log", *extra_args],
            env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_ready(self, timeout: float = GATEWAY_START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited with {self.proc.returncode}:\n"
                                   f"{self.log_text()[-4000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"gateway not up within {timeout:g} s:\n"
                                   f"{self.log_text()[-4000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        terminate(self.proc)
        self._log.close()


def terminate(proc: subprocess.Popen[bytes], grace: float = 15.0) -> None:
    """SIGTERM, then SIGKILL if ``proc`` is still there after ``grace`` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def make_key(store: Any, *, agents: tuple[str, ...] = (), prefixes: tuple[str, ...] = (),
             read_only: bool = False, admin: bool = False, expires_at: Any = None) -> str:
    """A new key's secret, stored as ``memoryd keys create`` stores it."""
    from memoryd.auth import keys, scope

    with store.session() as session:
        made = keys.create(session, name="test", agents=agents, prefixes=prefixes,
                           permissions=scope.permissions(read_only=read_only, admin=admin),
                           expires_at=expires_at)
    return made.key


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}
