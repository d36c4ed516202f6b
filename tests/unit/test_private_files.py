"""memoryd.private_files: secrets, logs and folders only their owner can open, whatever
the process's umask, and one secret however many processes ask for it at once."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from memoryd.private_files import (
    PASSABLE_DIR_MODE,
    close_tree,
    open_private,
    private_dir,
    read_or_create_secret,
    write_private,
)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that would leave new files readable and writable by everyone."""
    previous = os.umask(0)
    yield
    os.umask(previous)


def test_a_private_file_is_the_owners_alone_whatever_the_umask(
        tmp_path: Path, open_umask: None) -> None:
    target = tmp_path / "new" / "admin.key"
    write_private(target, "mdk_secret\n")
    assert target.read_text() == "mdk_secret\n"
    assert mode(target) == 0o600 and mode(target.parent) == 0o700
    write_private(target, "replaced\n")  # a replacement is private too
    assert target.read_text() == "replaced\n" and mode(target) == 0o600
    assert [p.name for p in target.parent.iterdir()] == ["admin.key"]  # no temp file left


def test_a_secret_is_made_once_and_every_caller_gets_the_same(
        tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "redis.password"
    with ThreadPoolExecutor(8) as pool:
        secrets = set(pool.map(lambda _: read_or_create_secret(path), range(32)))
    assert len(secrets) == 1
    secret = secrets.pop()
    assert len(secret) >= 40 and path.read_text().strip() == secret
    assert mode(path) == 0o600
    assert read_or_create_secret(path) == secret


def test_an_empty_secret_file_is_replaced_by_a_secret(tmp_path: Path) -> None:
    path = tmp_path / "password"
    path.write_text("\n")
    assert read_or_create_secret(path)
    assert path.read_text().strip() == read_or_create_secret(path)


def test_folders_and_files_an_older_version_left_open_are_closed(tmp_path: Path) -> None:
    folder = tmp_path / "redis"
    (folder / "appendonlydir").mkdir(parents=True, mode=0o755)
    aof = folder / "appendonlydir" / "appendonly.aof.1.incr.aof"
    aof.write_text("*2\r\n$4\r\nLPUSH\r\n")
    aof.chmod(0o644)
    log = folder / "redis.log"
    log.write_text("old\n")
    log.chmod(0o666)
    private_dir(folder)
    assert mode(folder) == 0o700
    with open_private(log) as handle:
        handle.write("new\n")
    assert mode(log) == 0o600 and log.read_text() == "old\nnew\n"
    close_tree(folder)
    assert mode(folder / "appendonlydir") == 0o700 and mode(aof) == 0o600


def test_missing_parents_of_a_private_folder_are_private_too(
        tmp_path: Path, open_umask: None) -> None:
    tmp_path.chmod(0o755)
    private_dir(tmp_path / "data" / "postgres")
    assert mode(tmp_path / "data") == 0o700 and mode(tmp_path / "data" / "postgres") == 0o700
    assert mode(tmp_path) == 0o755  # a parent that was there is not memoryd's to close


def test_folders_made_on_the_way_get_the_mode_asked_for_and_folders_that_were_there_keep_theirs(
        tmp_path: Path) -> None:
    previous = os.umask(0o077)  # a umask that would close them: the mode is set anyway
    try:
        tmp_path.chmod(0o700)
        private_dir(tmp_path / "made" / "too" / "data", parent_mode=PASSABLE_DIR_MODE)
    finally:
        os.umask(previous)
    assert mode(tmp_path / "made") == mode(tmp_path / "made" / "too") == 0o711
    assert mode(tmp_path / "made" / "too" / "data") == 0o700
    assert mode(tmp_path) == 0o700
