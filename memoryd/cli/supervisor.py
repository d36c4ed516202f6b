"""``memoryd up``: the all-in-one start for a newcomer.

Uses MEMORYD_DATABASE_URL / MEMORYD_BROKER_URL when set; otherwise starts the
embedded PostgreSQL and an embedded Redis on 127.0.0.1. Then migrates and runs
the memory worker, the maintenance worker, beat and Flower (behind a login) as child
processes, and stops all of it on Ctrl-C (or SIGTERM). One stack per data directory:
a second start there is refused before it starts anything.

Once up, it keeps the stack up: a child or embedded server that dies is started again
after a pause that grows while it keeps dying (``memoryd.cli.nodes.Restarts``), on the
same port, so that clients and the other children reconnect to it by themselves. Only
a signal, or one of them dying ``CRASH_LOOP[0]`` times within ``CRASH_LOOP[1]`` seconds,
stops everything, naming it and how it ended.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from memoryd.cli import flower_login, stack_dir
from memoryd.cli.nodes import CRASH_LOOP, Restarts
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
from memoryd.private_files import private_dir, write_private
from memoryd.process import STOP_SIGNALS
from memoryd.redaction import scrub

if TYPE_CHECKING:
    from celery import Celery

    from memoryd.embedded.postgres import EmbeddedPostgres
    from memoryd.embedded.redis import EmbeddedRedis

log = structlog.get_logger(__name__)
STOP_GRACE_S = 30.0
# How long the workers and the gateway may take to answer after they started (a first
# start derives the embedding model; a busy machine is slower): then the stack stops.
READY_WAIT_S = 300.0
# What a child left behind when it died (a worker's pool or consumer processes) gets this
# long after SIGTERM before the child starts again.
LEFTOVER_GRACE_S = 10.0


@dataclass
class _Watched:
    """One thing ``memoryd up`` keeps running: how to start it again, and how it ended
    (None while it runs)."""

    start: Callable[[], object]
    ended: Callable[[], str | None]
    started: float = field(default_factory=time.monotonic)
    restart_at: float | None = None
    leftovers_until: float = 0.0  # how long its leftovers may take to exit
    restarts: Restarts = field(default_factory=Restarts)


@dataclass
class Stack:
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
    _watched: dict[str, _Watched] = field(default_factory=dict)
    _urls: tuple[str, str] = ("", "")  # database, broker: for runtime.json's rewrites

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
                self._urls = (database_url, broker_url)
                self._write_runtime()
                self._await_ready(broker_url)
                self._stop_on_signals()  # before the banner: who reads it may stop us at once
                self._announce(database_url, broker_url, admin_key, login)
                self._watch()
                self._wait()
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

    def _await_ready(self, broker_url: str) -> None:
        """Return once every worker started here answers over the broker and the
        gateway's /readyz says 200, so that "memoryd is up" is true when it prints. A
        child that exits meanwhile, or a wait past READY_WAIT_S, stops the stack."""
        from celery import Celery

        from memoryd.celery_config import celery_config

        app = Celery("memoryd-up", set_as_current=False)
        app.conf.update(celery_config(get_settings(), broker_url=broker_url, caller=True))
        deadline = time.monotonic() + READY_WAIT_S
        try:
            while waiting := self._not_ready(app):
                self._check_children()
                if time.monotonic() > deadline:
                    raise EmbeddedServiceError(
                        f"{', '.join(waiting)} did not answer within {READY_WAIT_S:.0f} s")
                time.sleep(0.5)
        finally:
            app.close()

    def _not_ready(self, app: Celery) -> list[str]:
        """The children that do not answer yet: workers by their host and pid in
        Celery's stats (a worker answers once it consumes; a worker that runs several
        nodes, once each of its nodes does), the gateway by its /readyz."""
        try:
            stats = app.control.inspect(timeout=1.0).stats() or {}
        except Exception:  # the broker not answering yet is the same as no reply
            stats = {}
        here = socket.gethostname()  # Celery's %h: a shared broker may serve other hosts
        answered = {reply.get("pid") for node, reply in stats.items()
                    if node.partition("@")[2] == here}
        waiting = [name for name, proc in self.children.items()
                   if name.startswith("worker-") and not _answers(proc.pid, answered)]
        if self.gateway_port and not self._gateway_ready():
            waiting.append("gateway")
        return waiting

    def _gateway_ready(self) -> bool:
        import urllib.error
        import urllib.request

        url = f"http://{_local(get_settings().gateway_host)}:{self.gateway_port}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=2.0) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):  # not listening yet, or 503
            return False

    def _write_runtime(self) -> None:
        """runtime.json, rewritten whenever a child starts again (its pid changes; its
        URLs do not). Private: the URLs carry the services' passwords."""
        database_url, broker_url = self._urls
        write_private(get_settings().runtime_file(), json.dumps({
            "pid": os.getpid(), "database_url": database_url, "broker_url": broker_url,
            "flower_url": f"http://127.0.0.1:{self.flower_port}" if self.flower_port else None,
            "gateway_url": self._gateway_url(),
            "children": {name: proc.pid for name, proc in self.children.items()},
            "servers": self._server_pids(),
        }, indent=2))

    def _server_pids(self) -> dict[str, int | None]:
        """The embedded servers' pids (what is configured rather than embedded is not
        memoryd's to watch)."""
        found: dict[str, int | None] = {}
        if self._redis is not None:
            found["redis"] = self._redis.pid
        if self._postgres is not None:
            found["postgres"] = self._postgres.server_pid()
        return found

    def _gateway_url(self) -> str | None:
        host = get_settings().gateway_host
        return f"http://{host}:{self.gateway_port}" if self.gateway_port else None

    def _announce(self, database_url: str, broker_url: str,
                  admin_key: tuple[str, bool] | None, login: tuple[str, bool] | None) -> None:
        # Shown without their passwords (runtime.json, 0600, keeps them).
        lines = ["", "memoryd is up:", f"  {'database':<18} {scrub(database_url)}",
                 f"  {'broker':<18} {scrub(broker_url)}"]
        if self.gateway_port:
            url = self._gateway_url()
            lines.append(f"  {'gateway':<18} {url}  (API docs {url}/docs, MCP {url}/mcp)")
        if login is not None:
            lines.append(f"  {'flower':<18} http://127.0.0.1:{self.flower_port}  "
                         f"({self._login_words(*login)})")
        lines += [f"  {name:<18} pid {proc.pid}" for name, proc in self.children.items()]
        memoryd = stack_dir.command_hint()
        lines += ["", f"Try:  {memoryd} store agent-1 'User prefers dark mode'",
                  f"      {memoryd} recall agent-1 'what theme does the user like?'",
                  "Press Ctrl-C to stop.", ""]
        if admin_key is not None:
            lines[-2:-2] = self._admin_lines(*admin_key)
        print("\n".join(lines), flush=True)

    def _admin_lines(self, key: str, created: bool) -> list[str]:
        from memoryd.auth.admin_key import key_file

        where = key_file(get_settings().data_dir)
        told = ([f"Admin key (all agents; shown this once, kept in {where}):", f"  {key}"]
                if created and _on_terminal() else [f"Admin key: in {where}"])
        return [*told, f"      curl -H \"Authorization: Bearer $(cat {shlex.quote(str(where))})\" "
                       f"{self._gateway_url()}/v1/agents/agent-1/memories"]

    @staticmethod
    def _login_words(login: str, created: bool) -> str:
        where = flower_login.login_file(get_settings().data_dir)
        if created and _on_terminal():
            return f"login {login}, shown this once, kept in {where}"
        return f"login in {where}"

    # --- lifecycle --------------------------------------------------------------
    def _stop_on_signals(self) -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, lambda *_: self._stop.set())

    def _wait(self) -> None:
        while not self._stop.wait(0.5):
            self._supervise()

    def _watch(self) -> None:
        """What ``_supervise`` keeps running: every child, and the embedded servers."""
        for name in self.children:
            self._watched[name] = _Watched(functools.partial(self._spawn, name),
                                           functools.partial(self._child_ended, name))
        if self._redis is not None:
            redis = self._redis
            self._watched["redis"] = _Watched(redis.start, lambda: _how(redis.exit_status()))
        if self._postgres is not None:
            postgres = self._postgres
            gone = f"is gone (its log: {postgres.log_file})"  # not our child: no status
            self._watched["postgres"] = _Watched(
                postgres.start_again, lambda: None if postgres.server_pid() else gone)

    def _child_ended(self, name: str) -> str | None:
        return _how(self.children[name].poll())

    def _supervise(self) -> None:
        """Start again what died once its pause is over; note what died since."""
        for name, watched in self._watched.items():
            if watched.restart_at is None:
                how = watched.ended()
                if how is not None:
                    self._died(name, watched, how)
            elif time.monotonic() >= watched.restart_at and self._leftovers_gone(name, watched):
                self._restart(name, watched)

    def _died(self, name: str, watched: _Watched, how: str) -> None:
        now = time.monotonic()
        pause = watched.restarts.died(now - watched.started, now)
        if watched.restarts.looping():
            count, window = CRASH_LOOP
            log.error("up.crash_loop", process=name, how=how, deaths=count, within_s=window)
            raise EmbeddedServiceError(f"{name} {how}, its {count}th exit within "
                                       f"{window:.0f} s; stopping memoryd")
        log.warning("up.exited", process=name, how=how, restart_in_s=round(pause, 1))
        self._end_leftovers(name, signal.SIGTERM)  # warm shutdown: finish current tasks
        watched.restart_at, watched.leftovers_until = now + pause, now + LEFTOVER_GRACE_S

    def _restart(self, name: str, watched: _Watched) -> None:
        self._end_leftovers(name, signal.SIGKILL)
        watched.restart_at, watched.started = None, time.monotonic()
        try:
            watched.start()
        except EmbeddedServiceError as exc:  # a server that could not start yet
            self._died(name, watched, f"did not start again: {exc}")
            return
        log.info("up.restarted", process=name, **self._pids_of(name))
        self._write_runtime()

    def _end_leftovers(self, name: str, sig: signal.Signals) -> None:
        """Signal what a dead child left in its process group (a worker's pool or
        consumer processes), so that no two copies of a node run at once. The group is
        gone once they all exited."""
        proc = self.children.get(name)
        if proc is not None and proc.returncode is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)

    def _leftovers_gone(self, name: str, watched: _Watched) -> bool:
        """Whether what a dead child left behind has exited, or had its time to (then it
        is killed as the child starts again)."""
        proc = self.children.get(name)
        if proc is None or time.monotonic() >= watched.leftovers_until:
            return True
        try:
            os.killpg(proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return True
        return False

    def _pids_of(self, name: str) -> dict[str, int | None]:
        if name in self.children:
            return {"pid": self.children[name].pid}
        return {"pid": self._server_pids().get(name)}

    def _check_children(self) -> None:
        dead = [name for name, proc in self.children.items() if proc.poll() is not None]
        if dead:
            raise EmbeddedServiceError(f"{', '.join(dead)} exited; stopping memoryd")

    def _stop_children(self) -> None:
        for name, proc in self.children.items():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # Celery: warm shutdown, finish current tasks
            else:
                self._end_leftovers(name, signal.SIGTERM)  # of one that waits for a restart
        deadline = time.monotonic() + STOP_GRACE_S
        for name, proc in self.children.items():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("up.kill", process=name)
                proc.kill()
                proc.wait()
        self.children.clear()


def _how(code: int | None) -> str | None:
    """How a child ended, in words, from its exit status (None: it runs)."""
    if code is None:
        return None
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _answers(pid: int, answered: set[object]) -> bool:
    """Whether the worker process ``pid`` answers: itself (one node), or every node
    it runs (its child processes; a prefork node's pool processes are not its children
    here, they are the node's)."""
    import psutil

    if pid in answered:
        return True
    try:
        nodes = [child.pid for child in psutil.Process(pid).children()]
    except psutil.Error:
        return False
    return bool(nodes) and all(node in answered for node in nodes)


def _local(host: str) -> str:
    """``host`` as a URL names it from this machine: a server on every address is
    reached on the loopback one."""
    import ipaddress

    try:
        address = ipaddress.ip_address(host)
    except ValueError:  # a name
        return host or "127.0.0.1"
    if address.is_unspecified:
        address = ipaddress.ip_address("::1" if address.version == 6 else "127.0.0.1")
    return f"[{address}]" if address.version == 6 else str(address)


def _on_terminal() -> bool:
    """Secrets are shown on a terminal only: a redirected banner (``memoryd up > up.log``)
    says where they are kept instead of writing them into the file."""
    return sys.stdout.isatty()
