"""``memoryd up``: the all-in-one start for a newcomer.

Uses MEMORYD_DATABASE_URL / MEMORYD_BROKER_URL when set; otherwise starts the
embedded PostgreSQL and an embedded Redis on 127.0.0.1. Then migrates and runs
the memory worker, the maintenance worker, beat and Flower (behind a login) as child
processes, and stops all of it on Ctrl-C (or SIGTERM). One stack per data directory:
a second start there is refused before it starts anything.

This module starts the stack, waits until it answers, and stops it. Once up, what is
printed and written is ``memoryd.cli.announce``'s, and keeping the children and servers
running is ``memoryd.cli.watch``'s, until a signal or a crash loop stops everything.
"""

from __future__ import annotations

import functools
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

from memoryd.cli import flower_login, stack_dir
from memoryd.cli.announce import Endpoints, announce, write_runtime
from memoryd.cli.ready import await_ready
from memoryd.cli.watch import Watch, end_leftovers, how
from memoryd.config import get_settings
from memoryd.embedded._proc import (
    SERVICE_USER,
    hand_over_tree,
    open_install_parents,
    port_open,
    run_as_service_user,
    running_as_root,
    server_dir,
    service_user,
)
from memoryd.errors import EmbeddedServiceError
from memoryd.private_files import private_dir
from memoryd.process import STOP_SIGNALS

if TYPE_CHECKING:
    from memoryd.embedded.postgres import EmbeddedPostgres
    from memoryd.embedded.redis import EmbeddedRedis

log = structlog.get_logger(__name__)
STOP_GRACE_S = 30.0


@dataclass
class Stack:
    """One ``memoryd up``: what it started, kept so that whatever fails later stops all
    of it, and so that a child that dies starts again as it first did."""

    flower_port: int | None = 5555
    gateway_port: int | None = 8765
    log_level: str = "INFO"
    children: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    # Set before they start, so whatever got started is stopped whatever fails later.
    _postgres: EmbeddedPostgres | None = None
    _redis: EmbeddedRedis | None = None
    _run_as: dict[str, object] = field(default_factory=dict)  # as root: the service user
    _env: dict[str, str] = field(default_factory=dict)  # the children's, for restarts
    _flower_auth: str | None = None
    _endpoints: Endpoints | None = None  # for runtime.json's rewrites

    def run(self) -> int:
        settings = get_settings()
        runtime = settings.runtime_file()
        # Until the stack is up, SIGTERM or SIGHUP stops it like Ctrl-C: through the cleanup
        # below.
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.default_int_handler)
        if running_as_root():  # refused before anything changes: nothing to undo
            server_dir(settings.data_dir)  # the service user's, before its servers start
        # Held before anything starts: a second stack on this directory is refused
        # without touching this one's services or runtime.json.
        with stack_dir.hold(settings, "up"):
            self._check_ports()
            try:
                database_url = self._database()
                broker_url = self._broker()
                self._run_as = self._service_account()
                env = {**os.environ, "MEMORYD_DATABASE_URL": database_url,
                       "MEMORYD_BROKER_URL": broker_url,
                       "MEMORYD_DATA_DIR": str(settings.data_dir)}
                if self._run_as:
                    env["HOME"] = str(settings.data_dir / "home")
                self._migrate(env)
                admin_key = self._admin_key(database_url) if self.gateway_port else None
                login = flower_login.ensure(settings.data_dir) if self.flower_port else None
                self._env, self._flower_auth = env, login[0] if login else None
                self._start_children()
                self._endpoints = Endpoints(database_url, broker_url, self.gateway_port,
                                            self.flower_port)
                self._write_runtime()
                await_ready(broker_url, self.children, self.gateway_port)
                self._stop_on_signals()  # before the banner: who reads it may stop us at once
                announce(self._endpoints, self.children, admin_key, login)
                self._wait(self._watch())
            finally:
                self._stop_children()
                runtime.unlink(missing_ok=True)
                if self._redis is not None:
                    self._redis.stop()
                if self._postgres is not None:
                    self._postgres.release()  # stopped unless another command uses it
        return 0

    # --- services -------------------------------------------------------------
    def _check_ports(self) -> None:
        """Refuse a taken gateway or Flower port before starting anything: found only
        when that child exits, it would stop the whole stack a minute later."""
        host = get_settings().gateway_host
        for name, at, port in (("gateway", host, self.gateway_port),
                               ("Flower", "127.0.0.1", self.flower_port)):
            if port and port_open(port, at):
                raise EmbeddedServiceError(f"port {port} ({name}) is already in use")

    def _database(self) -> str:
        settings = get_settings()
        if settings.database_url:
            return settings.database_url
        from memoryd.embedded.postgres import EmbeddedPostgres

        self._postgres = EmbeddedPostgres.from_settings()
        return self._postgres.use()

    def _broker(self) -> str:
        settings = get_settings()
        if settings.broker_url:
            return settings.broker_url
        from memoryd.embedded.redis import EmbeddedRedis

        self._redis = EmbeddedRedis(settings.data_dir / "redis", settings.embedded_redis_port)
        return self._redis.start()

    def _service_account(self) -> dict[str, object]:
        """As root, the children run as the service user the embedded PostgreSQL runs as
        (Celery warns about workers with superuser rights, and they need none): it has
        the data directory's top level (``run``), and gets the model cache, the beat
        schedule and a home of its own (onnxruntime keeps a file under it)."""
        if not running_as_root():
            return {}
        user = service_user()
        data_dir = server_dir(get_settings().data_dir)
        for sub in ("models", "home"):
            private_dir(data_dir / sub)
            hand_over_tree(data_dir / sub, user)
        for schedule in data_dir.glob("celerybeat-schedule*"):
            os.chown(schedule, user.pw_uid, user.pw_gid)
        # The interpreter may live under a private home (pyenv in /root): let the service
        # user through its parents, as the embedded PostgreSQL's binaries are. Installed
        # code, never data: nothing above the data directory is opened.
        for installed in (Path(sys.executable).resolve(), Path(sys.prefix).resolve()):
            open_install_parents(installed)
        return run_as_service_user()

    def _migrate(self, env: dict[str, str]) -> None:
        # The first child run as the service user: if it cannot read this Python
        # environment, say so before the workers fail one by one.
        done = subprocess.run([sys.executable, "-m", "memoryd", "migrate"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              check=False, **self._run_as)  # type: ignore[call-overload]
        if done.returncode != 0:
            sys.stderr.write(done.stderr)
            hint = (f" (they ran as the {SERVICE_USER!r} user, who must be able to read "
                    f"{sys.prefix} and memoryd's files)" if self._run_as else "")
            raise EmbeddedServiceError(f"migrations failed{hint}")

    def _admin_key(self, database_url: str) -> tuple[str, bool]:
        from memoryd.auth import admin_key
        from memoryd.db.engine import make_engine

        engine = make_engine(database_url, pool_size=1)
        try:
            return admin_key.ensure(engine, get_settings().data_dir)
        finally:
            engine.dispose()

    def _commands(self) -> dict[str, list[str]]:
        # Quiet: no start-up banners (the summary printed once all is up replaces them).
        py = [sys.executable, "-m", "memoryd", "--log-level", self.log_level]
        commands = {
            # One consumer per core (memoryd.cli.nodes).
            "worker-memory": [*py, "worker", "--queues", "memory", "--no-migrate", "--quiet"],
            "worker-maintenance": [*py, "worker", "--queues", "maintenance",
                                   "--concurrency", "1", "--no-migrate", "--quiet"],
            "beat": [*py, "beat", "--quiet"],
        }
        if self.gateway_port:
            commands["gateway"] = [*py, "gateway", "--no-migrate", "--port",
                                   str(self.gateway_port)]
        if self.flower_port:
            # Flower as a monitor only, behind its login (memoryd.cli.flower_monitor).
            commands["flower"] = [sys.executable, "-m", "memoryd.cli.flower_monitor",
                                  "--address=127.0.0.1", f"--port={self.flower_port}",
                                  "--logging=error"]
        return commands

    def _start_children(self) -> None:
        for name in self._commands():
            self._spawn(name)
            log.info("up.started", process=name, pid=self.children[name].pid)

    def _spawn(self, name: str) -> None:
        # Each in a process group of its own: Ctrl-C and a closing terminal signal this
        # process alone, which stops the children with SIGTERM, Celery's warm shutdown
        # (a worker off a terminal would take SIGHUP as an order to restart itself); and
        # what a child that died left behind is found by its group.
        env = self._env
        if name == "flower" and self._flower_auth:
            env = {**env, flower_login.ENV_NAME: self._flower_auth}
        self.children[name] = subprocess.Popen(  # type: ignore[call-overload]
            self._commands()[name], env=env, stdin=subprocess.DEVNULL, process_group=0,
            **self._run_as)

    def _write_runtime(self) -> None:
        if self._endpoints is not None:
            write_runtime(self._endpoints, self.children, self._server_pids())

    def _server_pids(self) -> dict[str, int | None]:
        """The embedded servers' pids (what is configured rather than embedded is not
        memoryd's to watch)."""
        found: dict[str, int | None] = {}
        if self._redis is not None:
            found["redis"] = self._redis.pid
        if self._postgres is not None:
            found["postgres"] = self._postgres.server_pid()
        return found

    # --- lifecycle --------------------------------------------------------------
    def _stop_on_signals(self) -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, lambda *_: self._stop.set())

    def _wait(self, watch: Watch) -> None:
        while not self._stop.wait(0.5):
            watch.supervise()

    def _watch(self) -> Watch:
        """What ``Watch.supervise`` keeps running: every child, and the embedded servers."""
        watch = Watch(self.children, self._write_runtime)
        for name in self.children:
            watch.child(name, functools.partial(self._spawn, name))
        if self._redis is not None:
            redis = self._redis
            watch.server("redis", redis.start, lambda: how(redis.exit_status()),
                         lambda: redis.pid)
        if self._postgres is not None:
            postgres = self._postgres
            gone = f"is gone (its log: {postgres.log_file})"  # not our child: no status
            watch.server("postgres", postgres.start_again,
                         lambda: None if postgres.server_pid() else gone, postgres.server_pid)
        return watch

    def _stop_children(self) -> None:
        for proc in self.children.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # Celery: warm shutdown, finish current tasks
            else:
                end_leftovers(proc, signal.SIGTERM)  # of one that waits for a restart
        deadline = time.monotonic() + STOP_GRACE_S
        for name, proc in self.children.items():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("up.kill", process=name)
                proc.kill()
                proc.wait()
        self.children.clear()
