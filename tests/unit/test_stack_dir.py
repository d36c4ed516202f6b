"""What ``memoryd up`` keeps in its data directory: private files, the Flower login, and
the lock that allows one stack per directory (no services needed)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memoryd.cli import flower_login, stack_dir
from memoryd.config import Settings
from memoryd.errors import DataDirInUse
from memoryd.private_files import write_private


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_private_file_replaces_a_readable_one_and_leaves_no_temporary_behind(
        tmp_path: Path) -> None:
    path = tmp_path / "deeper" / "runtime.json"
    path.parent.mkdir()
    path.write_text("old")
    path.chmod(0o644)
    write_private(path, "new")
    assert path.read_text() == "new" and _mode(path) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["runtime.json"]


def test_the_flower_login_is_made_once_kept_private_and_fit_for_flower(tmp_path: Path) -> None:
    login, created = flower_login.ensure(tmp_path)
    user, _, password = login.partition(":")
    assert created and user == flower_login.USER and len(password) >= 24
    assert "," not in login  # Flower splits several logins on commas
    path = flower_login.login_file(tmp_path)
    assert path.read_text() == login + "\n" and _mode(path) == 0o600
    assert flower_login.ensure(tmp_path) == (login, False)
    path.write_text("no-password\n")  # unusable: replaced
    again, created = flower_login.ensure(tmp_path)
    assert created and again != login and ":" in again


def test_a_second_holder_of_a_data_directory_is_refused_with_the_first_ones_pid(
        tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    with stack_dir.hold(settings, "run"):
        with pytest.raises(DataDirInUse) as refused, stack_dir.hold(settings, "up"):
            pass
        assert f"memoryd run (pid {os.getpid()}) runs on {tmp_path}" in str(refused.value)
        assert _mode(tmp_path / stack_dir.LOCK_NAME) == 0o600
    with stack_dir.hold(settings, "up"):  # released with its holder
        pass


def test_a_running_stack_is_named_with_where_to_reach_it(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    with stack_dir.hold(settings, "up"):
        with pytest.raises(DataDirInUse) as starting, stack_dir.hold(settings, "up"):
            pass
        assert "is starting on" in str(starting.value)
        settings.runtime_file().write_text(json.dumps({
            "pid": os.getpid(), "gateway_url": "http://127.0.0.1:8765",
            "flower_url": "http://127.0.0.1:5555"}))
        with pytest.raises(DataDirInUse) as running, stack_dir.hold(settings, "up"):
            pass
    message = str(running.value)
    assert f"memoryd up (pid {os.getpid()}) already runs on {tmp_path}" in message
    assert "gateway http://127.0.0.1:8765, Flower http://127.0.0.1:5555" in message
    assert f"MEMORYD_DATA_DIR={tmp_path}" in message and "status" in message
    assert "\n" not in message
    assert settings.runtime_file().exists()  # the refused one touched nothing


def test_the_lock_dies_with_a_killed_holder(tmp_path: Path) -> None:
    """A stack killed with SIGKILL never blocks the next start (a pid file would)."""
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from memoryd.cli import stack_dir
        from memoryd.config import Settings
        with stack_dir.hold(Settings(data_dir={str(tmp_path)!r}), "run"):
            print("held", flush=True)
            time.sleep(600)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        settings = Settings(data_dir=tmp_path)
        with pytest.raises(DataDirInUse, match=f"pid {holder.pid}"), \
                stack_dir.hold(settings, "up"):
            pass
    finally:
        holder.kill()
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()
    with stack_dir.hold(settings, "up"):
        pass
