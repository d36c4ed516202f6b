"""``memoryd up`` (the whole stack from nothing) and ``memoryd run`` (APScheduler,
single node), started as a user starts them and stopped with signals."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import pwd
import queue
import random
import re
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import psutil
import pytest

from memoryd.config import Settings
from memoryd.embedded._proc import SERVICE_USER, port_open
from memoryd.schedules.names import JOB_NAMES as JOBS
from tests.conftest import TEST_HOME
from tests.support.service_user import opened_for_service_user

pytestmark = pytest.mark.slow

START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 40.0


def _port() -> int:
    """A free port for the gateway or Flower, below the kernel's ephemeral range: those
    bind it a minute after it was chosen (later still on a busy machine), and meanwhile
    the kernel may hand an ephemeral port (``free_port``) to anyone else's server: the
    child would exit, and ``memoryd up`` stop, Redis with it, under the test's client."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    while True:
        port = random.randrange(max(1024, low - 12_000), low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe, \
                contextlib.suppress(OSError):
            probe.bind(("127.0.0.1", port))
            return port


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
    env.update(extra)
    return env


def _processes_of(data_dir: Path, pids: set[int]) -> list[psutil.Process]:
    """Live processes that belong to the stack rooted at ``data_dir``: recorded pids,
    anything naming the data dir on its command line (postgres, redis-server), and
    anything started with it as MEMORYD_DATA_DIR (workers' pool children, beat, flower)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            cmdline = " ".join(proc.info["cmdline"] or ())
            if proc.pid in pids or str(data_dir) in cmdline \
                    or proc.environ().get("MEMORYD_DATA_DIR") == str(data_dir):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _nothing_left(data_dir: Path, pids: set[int]) -> None:
    """Everything of the stack is gone. Given a few seconds: a server whose stop was
    confirmed (``pg_ctl stop -w`` returns once the pid file is gone) may still be
    exiting, which on a busy machine takes a while."""
    deadline = time.monotonic() + 10
    while left := _processes_of(data_dir, pids):
        assert time.monotonic() < deadline, [(p.pid, p.cmdline()) for p in left]
        time.sleep(0.2)


class _Lines:
    """Reads a pipe in a thread, so the test can wait for a line with a timeout."""

    def __init__(self, pipe: IO[str]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self._thread = threading.Thread(target=self._pump, args=(pipe,), daemon=True)
        self._thread.start()

    def _pump(self, pipe: IO[str]) -> None:
        with contextlib.suppress(ValueError, OSError):  # the pipe closed under us
            for line in pipe:
                self.lines.put(line)

    def next(self, timeout: float) -> str:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no line in time; so far:\n" + "".join(self.seen)[-4000:]) \
                from None
        self.seen.append(line)
        return line

    def drained(self) -> str:
        """Everything read so far, for a failure's message."""
        with contextlib.suppress(queue.Empty):
            while True:
                self.seen.append(self.lines.get(timeout=0.5))
        return "".join(self.seen)[-4000:]


def _reap(proc: subprocess.Popen[str]) -> None:
    """Kill what a failed test left running, and close its pipe."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def reachable_data_dir() -> Path:
    """A fresh data dir the service user can reach. As root, ``memoryd up`` runs its
    children as that user and refuses a data dir below a directory the user may not
    enter (it changes nothing above its data dir): the test opens its own directories,
    as an operator would.

    Beside the session's servers, not under pytest's ``tmp_path``: every pytest session
    that starts on the machine makes pytest's temporary root private again, which cut a
    running stack off from its files."""
    parent = opened_for_service_user(Path(tempfile.mkdtemp(prefix="up-", dir=TEST_HOME)))
    return parent / "up-data"


def stop_leftovers(data_dir: Path) -> None:
    """Stop whatever a failed test left running on ``data_dir``."""
    for proc in _processes_of(data_dir, set()):
        with contextlib.suppress(psutil.Error):  # it may have exited meanwhile
            if "postgres" not in " ".join(proc.cmdline()):
                proc.kill()
    from memoryd.embedded.postgres import EmbeddedPostgres

    server = EmbeddedPostgres(data_dir / "postgres")
    if server.pgdata.exists():
        server.stop()


@pytest.fixture
def up_dir() -> Iterator[Path]:
    """A fresh data dir (``reachable_data_dir``); whatever a failed test leaves running
    there is stopped."""
    data_dir = reachable_data_dir()
    yield data_dir
    stop_leftovers(data_dir)


def _private(path: Path) -> str:
    assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    return path.read_text().strip()


def _nothing_open_to_others(data_dir: Path) -> None:
    """Every folder and file of a running stack's data directory, whoever wrote it
    (memoryd, PostgreSQL, Redis, beat, the workers' model cache), is its owner's alone."""
    entries = [data_dir, *data_dir.rglob("*")]
    assert any(path.name == "celerybeat-schedule" or path.name.startswith("celerybeat")
               for path in entries)  # beat has written its schedule: the walk sees its files
    opened = [f"{path} {stat.S_IMODE(path.lstat().st_mode):o}" for path in entries
              if not path.is_symlink() and path.lstat().st_mode & 0o077]
    assert not opened, opened


def _gateway_answers_with_the_admin_key(up_dir: Path, url: str, agent: str, log: str,
                                        deadline: float) -> None:
    """The admin key was kept private, and not printed: stdout is a file, not a
    terminal, so the banner says where the key is. The gateway takes it."""
    import httpx

    key = _private(up_dir / "admin.key")
    assert key.startswith("mdk_") and key not in log
    assert f"Admin key: in {up_dir / 'admin.key'}" in log
    while True:
        try:
            listed = httpx.get(f"{url}/v1/agents/{agent}/memories",
                               headers={"Authorization": f"Bearer {key}"}, timeout=30)
            break
        except httpx.HTTPError:
            assert time.monotonic() < deadline, "the gateway never answered"
            time.sleep(0.5)
    assert listed.status_code == 200, listed.text
    assert [m["content"] for m in listed.json()["items"]] == ["memoryd up works out of the box."]


def _wait_for_runtime(up: subprocess.Popen[bytes], up_dir: Path, log_path: Path
                      ) -> dict[str, Any]:
    runtime_file = up_dir / "runtime.json"
    deadline = time.monotonic() + START_TIMEOUT_S
    while not runtime_file.exists():
        assert up.poll() is None, log_path.read_text()[-4000:]
        assert time.monotonic() < deadline, "no runtime.json:\n" + log_path.read_text()
        time.sleep(0.2)
    found: dict[str, Any] = json.loads(runtime_file.read_text())  # replaced in one go
    return found


def _wait_until_up(up: subprocess.Popen[bytes], log_path: Path, deadline: float) -> str:
    """The log once ``memoryd up`` printed its banner: its workers and gateway answer."""
    while "memoryd is up" not in (text := log_path.read_text()):
        assert time.monotonic() < deadline and up.poll() is None, text[-4000:]
        time.sleep(0.5)
    return text


FLOWER_PAGES = ("/", "/tasks", "/tasks/datatable?draw=1&start=0&length=10"
                "&order[0][column]=0&columns[0][data]=name&order[0][dir]=asc",
                "/task/{task_id}", "/api/tasks")


def _flower_is_behind_its_login(up_dir: Path, runtime: dict[str, Any], log: str,
                                deadline: float) -> None:
    """Every Flower page asks for the login ``memoryd up`` made (kept private, not
    printed off a terminal, not on Flower's command line) and opens with it."""
    import httpx

    from memoryd.client import MemoryClient

    login = _private(up_dir / "flower.login")
    user, _, password = login.partition(":")
    assert user and len(password) >= 24 and password not in log
    assert f"login in {up_dir / 'flower.login'}" in log
    flower = psutil.Process(runtime["children"]["flower"])
    assert password not in " ".join(flower.cmdline())
    url = runtime["flower_url"]
    while True:
        try:
            httpx.get(url, timeout=5)
            break
        except httpx.HTTPError:
            assert time.monotonic() < deadline, "Flower never answered"
            time.sleep(0.5)
    # A task Flower saw, for its page.
    with MemoryClient(settings=Settings(data_dir=up_dir), timeout=120) as client:
        pending = client.store(f"flower-{uuid.uuid4()}", "Flower keeps this behind its login.",
                               wait=False)
        pending.get()
    with httpx.Client(base_url=url, timeout=30) as http:
        while pending.id not in http.get("/api/tasks", auth=(user, password)).json():
            assert time.monotonic() < deadline, "Flower never saw the task"
            time.sleep(0.5)
        for page in FLOWER_PAGES:
            path = page.format(task_id=pending.id)
            assert http.get(path).status_code == 401, path
            assert http.get(path, auth=(user, "not-the-password")).status_code == 401, path
            assert http.get(path, auth=(user, password)).status_code == 200, path


def test_up_starts_everything_from_nothing_and_stops_cleanly_on_ctrl_c(up_dir: Path) -> None:
    from memoryd.client import MemoryClient
    from memoryd.types import StoreResult

    flower_port, gateway_port = _port(), _port()
    env = _clean_env(MEMORYD_DATA_DIR=str(up_dir))
    log_path = up_dir.parent / "up.log"
    with log_path.open("wb") as log:
        up = subprocess.Popen([sys.executable, "-m", "memoryd", "up",
                               "--flower-port", str(flower_port),
                               "--gateway-port", str(gateway_port)],
                              env=env, stdin=subprocess.DEVNULL, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        runtime_file = up_dir / "runtime.json"
        runtime = _wait_for_runtime(up, up_dir, log_path)
        deadline = time.monotonic() + START_TIMEOUT_S
        assert runtime["pid"] == up.pid
        assert set(runtime["children"]) == {"worker-memory", "worker-maintenance", "beat",
                                            "gateway", "flower"}
        assert runtime["gateway_url"] == f"http://127.0.0.1:{gateway_port}"
        assert runtime["database_url"].startswith("postgresql")
        assert runtime["flower_url"] == f"http://127.0.0.1:{flower_port}"
        assert (up_dir / "postgres" / "pgdata" / "PG_VERSION").exists()
        assert stat.S_IMODE(runtime_file.stat().st_mode) == 0o600  # it holds passwords

        # A client finds the broker through runtime.json alone (no MEMORYD_BROKER_URL).
        agent = f"up-{uuid.uuid4()}"
        client = MemoryClient(settings=Settings(data_dir=up_dir), timeout=120)
        assert client._app.conf.broker_url == runtime["broker_url"]
        stored = client.store(agent, "memoryd up works out of the box.")
        assert isinstance(stored, StoreResult) and stored.stored
        hits = client.recall(agent, "does it work out of the box?")
        assert [h.memory.id for h in hits] == [stored.id]
        client.close()

        banner = _wait_until_up(up, log_path, deadline)
        _nothing_open_to_others(up_dir)
        _flower_is_behind_its_login(up_dir, runtime, banner, deadline)
        _gateway_answers_with_the_admin_key(up_dir, runtime["gateway_url"], agent, banner,
                                            deadline)

        # The "Try:" hint works as printed, from a shell elsewhere without the venv active.
        hint = re.search(r"^Try:  (.+ store agent-1 .+)$", banner, re.MULTILINE)
        assert hint, log_path.read_text()[-4000:]
        shell = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/")}
        tried = subprocess.run(["bash", "-c", hint.group(1)], env=shell, cwd="/",
                               capture_output=True, text=True, timeout=120, check=False)
        assert re.fullmatch(r"stored [0-9a-f-]{36}\n", tried.stdout), (hint.group(1), tried)

        recorded = set(runtime["children"].values()) | {up.pid}
        assert len(_processes_of(up_dir, set())) >= 6  # 2 workers + pools, beat, flower, ...
        if os.geteuid() == 0:  # as root, the children run as the service user, like postgres
            service_uid = pwd.getpwnam(SERVICE_USER).pw_uid
            for pid in runtime["children"].values():
                assert psutil.Process(pid).uids().real == service_uid

        # Ctrl-C in a terminal: SIGINT to the whole foreground process group.
        os.killpg(up.pid, signal.SIGINT)
        started = time.monotonic()
        code = up.wait(STOP_TIMEOUT_S)
        assert code == 0, log_path.read_text()[-4000:]
        assert time.monotonic() - started < STOP_TIMEOUT_S
        assert not runtime_file.exists()
        _nothing_left(up_dir, recorded)

        # A first start, quiet: no banners, no quantization chatter (the int8 model was
        # derived in this data dir), no superuser warnings.
        output = log_path.read_text()
        for noise in ("[tasks]", "Quantization parameters", "pre-processing",
                      "superuser privileges", "Warning"):
            assert noise not in output, noise
        assert (up_dir / "models").is_dir() and any((up_dir / "models").iterdir())
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()


def test_up_stops_cleanly_on_sigterm_to_the_parent_alone(up_dir: Path) -> None:
    """A supervisor (systemd, docker) signals only the main process. Started on a
    terminal (a pty): memoryd up and the children that inherit it log console lines, and
    the new admin key and Flower login are shown there."""
    env = _clean_env(MEMORYD_DATA_DIR=str(up_dir))
    leader, follower = pty.openpty()
    up = subprocess.Popen([sys.executable, "-m", "memoryd", "up", "--flower-port",
                           str(_port()), "--gateway-port", str(_port())], env=env,
                          stdin=subprocess.DEVNULL, stdout=follower, stderr=follower,
                          start_new_session=True)
    os.close(follower)
    screen = open(leader, errors="replace")  # noqa: SIM115 - closed below
    terminal = _Lines(screen)
    try:
        runtime_file = up_dir / "runtime.json"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not runtime_file.exists():
            assert up.poll() is None and time.monotonic() < deadline, terminal.drained()
            time.sleep(0.2)
        runtime = json.loads(runtime_file.read_text())
        assert set(runtime["children"]) == {"worker-memory", "worker-maintenance", "beat",
                                            "gateway", "flower"}
        while not (any("memory-1@" in line and "ready" in line for line in terminal.seen)
                   and any("Press Ctrl-C" in line for line in terminal.seen)):
            terminal.next(timeout=max(0.1, deadline - time.monotonic()))  # a worker's line
        shown = "".join(terminal.seen)
        assert _private(up_dir / "admin.key") in shown
        assert f"login {_private(up_dir / 'flower.login')}, shown this once" in shown
        up.send_signal(signal.SIGTERM)
        assert up.wait(STOP_TIMEOUT_S) == 0
        _nothing_left(up_dir, set(runtime["children"].values()))
        plain = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in terminal.seen]  # colours
        logged = [line for line in plain
                  if "embedded_postgres.started" in line or "ready" in line]
        assert len(logged) >= 2, terminal.seen
        for line in logged:
            assert "[info " in line and not line.lstrip().startswith("{"), line
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
        screen.close()


def test_up_says_it_is_up_only_once_its_workers_and_gateway_answer(up_dir: Path) -> None:
    import httpx
    from celery import Celery

    env = _clean_env(MEMORYD_DATA_DIR=str(up_dir))
    gateway_port = _port()
    up = subprocess.Popen([sys.executable, "-m", "memoryd", "up", "--no-flower",
                           "--gateway-port", str(gateway_port)], env=env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert up.stdout is not None
    output = _Lines(up.stdout)
    app = None
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while output.next(timeout=max(0.1, deadline - time.monotonic())) != "memoryd is up:\n":
            pass
        # Checked at once: the gateway is ready, and both workers answer over the broker.
        ready = httpx.get(f"http://127.0.0.1:{gateway_port}/readyz", timeout=10)
        assert ready.status_code == 200, ready.text
        runtime = json.loads((up_dir / "runtime.json").read_text())
        app = Celery("memoryd-test-up", broker=runtime["broker_url"], set_as_current=False)
        app.conf.update(accept_content=["json"])
        answered = {reply["pid"] for reply in
                    (app.control.inspect(timeout=5.0).stats() or {}).values()}
        # The memory worker answers through its consumers, one per core.
        consumers = {c.pid for c in psutil.Process(runtime["children"]["worker-memory"])
                     .children()}
        assert len(consumers) == (os.cpu_count() or 1), consumers
        assert {runtime["children"]["worker-maintenance"], *consumers} <= answered, answered

        # One-off commands from another shell print their result and nothing else (they
        # share the stack's embedded PostgreSQL); the workers log no line per task.
        for command, result in ((("store", "agent-1", "User prefers dark mode"),
                                 r"stored [0-9a-f-]{36}\n"),
                                (("jobs", "run", "expire"), r"expire: ok \(run \d+\) \{.*\}\n")):
            done = subprocess.run([sys.executable, "-m", "memoryd", *command], env=env,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=120, check=False)
            assert re.fullmatch(result, done.stdout) and done.stderr == "", (command, done)
        assert "Task memoryd." not in output.drained()
        os.killpg(up.pid, signal.SIGINT)
        assert up.wait(STOP_TIMEOUT_S) == 0, output.drained()
    finally:
        if app is not None:
            app.close()
        _reap(up)


def test_a_second_up_on_a_data_directory_in_use_is_refused_at_once_and_changes_nothing(
        up_dir: Path) -> None:
    env = _clean_env(MEMORYD_DATA_DIR=str(up_dir))
    log_path = up_dir.parent / "up.log"
    with log_path.open("wb") as log:
        up = subprocess.Popen([sys.executable, "-m", "memoryd", "up", "--flower-port",
                               str(_port()), "--gateway-port", str(_port())],
                              env=env, stdin=subprocess.DEVNULL, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        runtime = _wait_for_runtime(up, up_dir, log_path)
        recorded = (up_dir / "runtime.json").read_bytes()
        running = {p.pid for p in _processes_of(up_dir, set())}
        for second in (["up", "--flower-port", str(_port()), "--gateway-port",
                        str(_port())], ["run"]):
            done = subprocess.run([sys.executable, "-m", "memoryd", *second], env=env,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=60, check=False)
            assert done.returncode == 2 and done.stdout == "", done
            [line] = done.stderr.splitlines()  # one line, and nothing started: no logs
            assert line.startswith(f"memoryd: error: DataDirInUse: memoryd up (pid {up.pid}) "
                                   f"already runs on {up_dir} (gateway {runtime['gateway_url']}, "
                                   f"Flower {runtime['flower_url']}); use it ("), line
            assert line.endswith(" status) or stop it first"), line
        assert (up_dir / "runtime.json").read_bytes() == recorded
        assert running <= {p.pid for p in _processes_of(up_dir, set())}

        # And the first stack still answers.
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            status = subprocess.run([sys.executable, "-m", "memoryd", "status", "--json"],
                                    env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                    text=True, timeout=120, check=False)
            assert status.returncode == 0, status.stderr
            if any(w.startswith("memory-1@") for w in json.loads(status.stdout)["workers"]):
                break
            assert time.monotonic() < deadline, status.stdout
            time.sleep(1)
        # Stopped once it is up: Ctrl-C while it still waits for its services is a stop
        # during start-up, which a test of its own covers.
        _wait_until_up(up, log_path, deadline)
        os.killpg(up.pid, signal.SIGINT)
        assert up.wait(STOP_TIMEOUT_S) == 0, log_path.read_text()[-4000:]
        assert not (up_dir / "runtime.json").exists()
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()


def test_sigterm_during_start_up_stops_what_was_started(up_dir: Path) -> None:
    env = _clean_env(MEMORYD_DATA_DIR=str(up_dir))
    up = subprocess.Popen([sys.executable, "-m", "memoryd", "up", "--no-flower",
                           "--gateway-port", str(_port())], env=env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        # Once the embedded PostgreSQL accepts connections (Redis, migrations and the
        # workers are still to come), a supervisor gives up on the start.
        port_file = up_dir / "postgres" / "port"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (port_file.exists() and port_file.read_text().strip()
                   and port_open(int(port_file.read_text()))):
            assert up.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        assert not (up_dir / "runtime.json").exists()
        up.send_signal(signal.SIGTERM)
        _, stderr = up.communicate(timeout=STOP_TIMEOUT_S)
        assert up.returncode == 130, stderr[-3000:]
        assert not (up_dir / "runtime.json").exists()
        _nothing_left(up_dir, set())
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()


def test_a_service_that_cannot_start_leaves_nothing_running(up_dir: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        env = _clean_env(MEMORYD_DATA_DIR=str(up_dir), MEMORYD_EMBEDDED_REDIS_PORT=str(port))
        done = subprocess.run([sys.executable, "-m", "memoryd", "up", "--no-flower",
                           "--gateway-port", str(_port())], env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=START_TIMEOUT_S, check=False)
    assert done.returncode == 2
    assert f"EmbeddedServiceError: port {port} is already in use" in done.stderr
    assert (up_dir / "postgres" / "pgdata" / "PG_VERSION").exists()  # it had started
    _nothing_left(up_dir, set())


@pytest.mark.skipif(os.geteuid() != 0, reason="the service user exists for root only")
def test_as_root_up_below_a_directory_the_service_user_cannot_enter_is_refused_unchanged(
        up_dir: Path) -> None:
    """Run as root, the children run as the service user, which must reach the data dir:
    memoryd never opens a directory above it for that user (o+x would open it to every
    local user), and says what to do instead."""
    closed = up_dir.parent / "closed"
    closed.mkdir(mode=0o700)
    data_dir = closed / "data"
    modes = {folder: folder.stat().st_mode for folder in data_dir.parents
             if folder.exists()}
    done = subprocess.run([sys.executable, "-m", "memoryd", "up", "--no-flower",
                           "--gateway-port", str(_port())],
                          env=_clean_env(MEMORYD_DATA_DIR=str(data_dir)),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=START_TIMEOUT_S, check=False)
    assert done.returncode == 2, done
    [line] = done.stderr.splitlines()
    assert line.startswith(f"memoryd: error: EmbeddedServiceError: run as root, memoryd runs "
                           f"its servers and workers as the {SERVICE_USER!r} user, which may "
                           f"not enter {closed} (above {data_dir})"), line
    assert f"chmod o+x {closed}" in line and "MEMORYD_DATA_DIR" in line
    assert {folder: folder.stat().st_mode for folder in modes} == modes
    assert not data_dir.exists()


def _above(path: Path) -> dict[Path, tuple[int, int, int]]:
    """Mode and owners of every directory above ``path`` that exists."""
    return {folder: (info.st_mode, info.st_uid, info.st_gid) for folder in path.parents
            if folder.exists() and (info := folder.stat())}


@pytest.mark.skipif(os.geteuid() != 0, reason="the service user exists for root only")
def test_as_root_a_default_up_keeps_its_data_in_the_system_directory_where_every_command_finds_it(
        ) -> None:
    """``./dev up`` as root, no MEMORYD_DATA_DIR: root's home is private (0700), so the
    stack keeps its data in the system's directory (/var/lib/memoryd; here a stand-in),
    which the service user can reach. Nothing above it changes and nothing lands in the
    home; ``status`` and the client, given no data directory either, find the stack."""
    root = opened_for_service_user(Path(tempfile.mkdtemp(prefix="up-root-", dir=TEST_HOME)))
    home, var_lib = root / "root", root / "var" / "lib"
    home.mkdir(mode=0o700)
    var_lib.mkdir(parents=True)
    system = var_lib / "memoryd"
    env = _clean_env(HOME=str(home), MEMORYD_SYSTEM_DATA_DIR=str(system))
    env.pop("XDG_DATA_HOME", None)
    before, home_mode = _above(system), home.stat().st_mode
    log_path = root / "up.log"
    with log_path.open("wb") as log:
        up = subprocess.Popen([sys.executable, "-m", "memoryd", "up", "--no-flower",
                               "--gateway-port", str(_port())], env=env,
                              stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        runtime = _wait_for_runtime(up, system, log_path)
        assert runtime["pid"] == up.pid
        _wait_until_up(up, log_path, time.monotonic() + START_TIMEOUT_S)
        for command, shown in ((("status", "--json"), '"workers"'),
                               (("store", "agent-1", "Kept in the system directory"),
                                "stored ")):
            done = subprocess.run([sys.executable, "-m", "memoryd", *command], env=env,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=120, check=False)
            assert done.returncode == 0 and shown in done.stdout, (command, done)
        info = system.stat()
        assert (stat.S_IMODE(info.st_mode), info.st_uid) == (
            0o700, pwd.getpwnam(SERVICE_USER).pw_uid)
        assert _above(system) == before
        assert home.stat().st_mode == home_mode and list(home.iterdir()) == []
        os.killpg(up.pid, signal.SIGINT)
        assert up.wait(STOP_TIMEOUT_S) == 0, log_path.read_text()[-4000:]
        _nothing_left(system, set(runtime["children"].values()))
    finally:
        _reap(up)
        stop_leftovers(system)


@pytest.mark.parametrize("taken", ["--gateway-port", "--flower-port"])
def test_a_taken_gateway_or_flower_port_is_refused_before_anything_starts(
        up_dir: Path, taken: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        ports = {"--gateway-port": str(_port()), "--flower-port": str(_port()),
                 taken: str(port)}
        done = subprocess.run([sys.executable, "-m", "memoryd", "up",
                               *(arg for pair in ports.items() for arg in pair)],
                              env=_clean_env(MEMORYD_DATA_DIR=str(up_dir)),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=60, check=False)
    assert done.returncode == 2
    name = "gateway" if taken == "--gateway-port" else "Flower"
    assert done.stderr.splitlines() == [
        f"memoryd: error: EmbeddedServiceError: port {port} ({name}) is already in use"]
    assert not (up_dir / "postgres").exists() and not (up_dir / "redis").exists()


def test_run_lists_the_schedule_and_stops_on_sigterm(service_env: dict[str, str]) -> None:
    # No broker; and stdout a plain pipe, as under a supervisor (block-buffered).
    env = {k: v for k, v in service_env.items()
           if k not in ("MEMORYD_BROKER_URL", "PYTHONUNBUFFERED")}
    run = subprocess.Popen([sys.executable, "-m", "memoryd", "run"], env=env,
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        assert run.stdout is not None
        out = _Lines(run.stdout)
        listed = {}
        while len(listed) < len(JOBS):
            line = out.next(timeout=60)  # printed while the scheduler runs, not at exit
            name, _, when = line.strip().partition(" next run ")
            listed[name.strip()] = when
        assert set(listed) == set(JOBS)
        for when in listed.values():
            assert when and when != "None"
            assert when[:4].isdigit() and "+00:00" in when  # a UTC timestamp
        assert run.poll() is None  # it keeps running

        run.send_signal(signal.SIGTERM)
        assert run.wait(30) == 0
    finally:
        _reap(run)


def _postgres_of(data_dir: Path) -> list[psutil.Process]:
    return [p for p in _processes_of(data_dir, set()) if "postgres" in " ".join(p.cmdline())]


@pytest.mark.parametrize(("stop", "group"), [
    (signal.SIGINT, True),  # Ctrl-C in a terminal: the whole foreground process group
    (signal.SIGTERM, False),  # a supervisor
    (signal.SIGHUP, True),  # the terminal closed
], ids=["ctrl-c", "sigterm", "sighup"])
def test_run_and_one_off_commands_stop_the_embedded_postgres_they_use(
        up_dir: Path, stop: signal.Signals, group: bool) -> None:
    """The last memoryd process using the embedded PostgreSQL stops it: a one-off command
    that started it, or ``memoryd run`` when it stops; never from under another user."""
    env = _clean_env(MEMORYD_DATA_DIR=str(up_dir))
    env.pop("XDG_RUNTIME_DIR", None)  # platformdirs would warn on every command

    def migrate() -> None:
        done = subprocess.run([sys.executable, "-m", "memoryd", "migrate"], env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=START_TIMEOUT_S, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("database at revision")
        assert "Warning" not in done.stderr, done.stderr

    migrate()  # initdb, start, migrate: then stopped again, nothing else uses it
    assert (up_dir / "postgres" / "pgdata" / "PG_VERSION").exists()
    assert _postgres_of(up_dir) == []

    run = subprocess.Popen([sys.executable, "-m", "memoryd", "run"], env=env,
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        assert run.stdout is not None
        _Lines(run.stdout).next(timeout=START_TIMEOUT_S)  # the schedule: it is running
        serving = _postgres_of(up_dir)
        assert serving

        migrate()  # meanwhile: memoryd run still uses the server, so it stays up
        assert {p.pid for p in _postgres_of(up_dir)} >= {p.pid for p in serving}

        if group:
            os.killpg(run.pid, stop)
        else:
            run.send_signal(stop)
        assert run.wait(STOP_TIMEOUT_S) == 0
        _nothing_left(up_dir, {run.pid})
    finally:
        _reap(run)
