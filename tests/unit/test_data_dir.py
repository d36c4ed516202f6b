"""Where memoryd keeps its data when ``MEMORYD_DATA_DIR`` is unset: the user's
``~/.local/share/memoryd``; run as root, the system's ``/var/lib/memoryd``, which the
service user running the stack can reach, unless root's own directory already holds a
stack an older memoryd made there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memoryd.config import Settings

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="root's default differs")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home of its own and a stand-in for /var/lib/memoryd: the machine's are untouched."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MEMORYD_SYSTEM_DATA_DIR", str(tmp_path / "var-lib-memoryd"))
    for name in ("MEMORYD_DATA_DIR", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home"


@needs_root
def test_as_root_the_default_data_directory_is_the_systems(home: Path) -> None:
    assert Settings().data_dir == home.parent / "var-lib-memoryd"


@needs_root
@pytest.mark.parametrize("left", ["postgres", "redis", "memoryd.lock"])
def test_as_root_a_stack_an_older_memoryd_kept_in_roots_home_stays_where_it_is(
        home: Path, left: str) -> None:
    legacy = home / ".local" / "share" / "memoryd"
    legacy.mkdir(parents=True)
    (legacy / left).touch()
    assert Settings().data_dir == legacy


@needs_root
def test_as_root_a_directory_in_roots_home_that_holds_no_stack_is_not_the_default(
        home: Path) -> None:
    (home / ".local" / "share" / "memoryd" / "models").mkdir(parents=True)  # a model cache
    assert Settings().data_dir == home.parent / "var-lib-memoryd"


def test_a_chosen_data_directory_is_used_as_root_and_as_anyone(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (home / ".local" / "share" / "memoryd" / "postgres").mkdir(parents=True)
    monkeypatch.setenv("MEMORYD_DATA_DIR", str(home / "chosen"))
    assert Settings().data_dir == home / "chosen"


@pytest.mark.skipif(os.geteuid() == 0, reason="root's default is the system's")
def test_the_default_data_directory_is_the_users_own(home: Path) -> None:
    assert Settings().data_dir == home / ".local" / "share" / "memoryd"
