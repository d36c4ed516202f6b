"""One stack per data directory, and how another shell reaches it.

``memoryd up`` and ``memoryd run`` hold an exclusive lock on ``memoryd.lock`` in the data
directory for their whole life. The kernel drops it when the holder exits, however it
exits, so a killed stack never blocks the next start, and a recycled pid never fakes a
running one (as a pid file alone would)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memoryd.config import Settings
from memoryd.errors import DataDirInUse
from memoryd.private_files import DIR_MODE, PASSABLE_DIR_MODE, private_dir

LOCK_NAME = "memoryd.lock"


@contextlib.contextmanager
def hold(settings: Settings, command: str) -> Iterator[None]:
    """Hold the data directory for ``command`` (``up``, ``run``), or raise
    ``DataDirInUse`` at once, saying who holds it, without touching anything of theirs."""
    data_dir = settings.data_dir
    # Run as root, the service user must get through the folders made on the way (memoryd
    # never opens one that existed): the embedded servers are its.
    private_dir(data_dir, parent_mode=PASSABLE_DIR_MODE if os.geteuid() == 0 else DIR_MODE)
    fd = os.open(data_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataDirInUse(_in_use(settings, _holder(fd))) from None
        os.ftruncate(fd, 0)  # who holds it, for the refusal above
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "command": command}).encode(), 0)
        yield
    finally:
        os.close(fd)


def _holder(fd: int) -> dict[str, Any]:
    try:
        found = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:  # written by the holder just now
        return {}
    return found if isinstance(found, dict) else {}


def _in_use(settings: Settings, holder: dict[str, Any]) -> str:
    command, pid = holder.get("command", "up"), holder.get("pid", "?")
    where = settings.data_dir
    if command != "up":
        return (f"memoryd {command} (pid {pid}) runs on {where}; stop it first, or give "
                f"this one another MEMORYD_DATA_DIR")
    stack = settings.running_stack()
    if stack.get("pid") != pid:
        return (f"memoryd up (pid {pid}) is starting on {where}; once it is up, use it "
                f"({command_hint(where)} status)")
    urls = [f"{name} {stack[key]}" for name, key in (("gateway", "gateway_url"),
                                                      ("Flower", "flower_url")) if stack.get(key)]
    return (f"memoryd up (pid {pid}) already runs on {where}"
            + (f" ({', '.join(urls)})" if urls else "")
            + f"; use it ({command_hint(where)} status) or stop it first")


def command_hint(data_dir: Path | None = None) -> str:
    """How to run ``memoryd`` from another shell, as typed: ``memoryd`` when that is on
    the PATH, else the path of the script installed beside this interpreter (``./dev up``
    does not activate the venv), after the data directory when it was chosen."""
    script = Path(sys.executable).parent / "memoryd"
    if not script.exists():
        command = f"{shlex.quote(sys.executable)} -m memoryd"
    elif shutil.which("memoryd") == str(script):
        command = "memoryd"
    else:  # absolute: ./dev up runs in the repository, the user's shell may not
        command = shlex.quote(str(script))
    chosen = data_dir or os.environ.get("MEMORYD_DATA_DIR")
    if chosen:  # another shell finds this stack through its data directory
        command = f"MEMORYD_DATA_DIR={shlex.quote(str(chosen))} {command}"
    return command
