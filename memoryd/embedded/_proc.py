"""Small helpers shared by the embedded services."""

from __future__ import annotations

import fcntl
import os
import pwd
import socket
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from memoryd.config import system_data_dir
from memoryd.errors import EmbeddedServiceError
from memoryd.private_files import (
    PASSABLE_DIR_MODE,
    close,
    close_tree,
    open_private,
    private_dir,
)

SERVICE_USER = "memoryd"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive inter-process lock, so concurrent starters start one server."""
    if not path.parent.exists():
        private_dir(path.parent)
    with open_private(path) as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def running_as_root() -> bool:
    return os.geteuid() == 0


def service_user() -> pwd.struct_passwd:
    """The unprivileged account servers run as when memoryd runs as root."""
    try:
        return pwd.getpwnam(SERVICE_USER)
    except KeyError:
        pass
    result = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVICE_USER],
        capture_output=True, text=True, check=False)
    if result.returncode not in (0, 9):  # 9: created meanwhile by a concurrent starter
        raise EmbeddedServiceError(f"cannot create user {SERVICE_USER!r}: {result.stderr.strip()}")
    return pwd.getpwnam(SERVICE_USER)


def hand_over(path: Path, user: pwd.struct_passwd) -> None:
    """Give ``path`` to ``user``, closed to everyone else (0700, 0600). Nothing above it
    changes: ``server_dir`` made sure the user reaches it."""
    os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)
    close(path)


def server_dir(path: Path) -> Path:
    """``path``, a directory of memoryd's own (the data directory, an embedded server's),
    created closed (0700) if missing and, run as root, the service user's. memoryd never
    changes a directory above it: one the user may not enter is refused
    (``check_reachable``) before anything is made; only the folders memoryd creates on
    the way let it through (enter, not list), which loosens nothing that existed."""
    if not running_as_root():
        return private_dir(path)
    user = service_user()
    check_reachable(path, user)
    private_dir(path, parent_mode=PASSABLE_DIR_MODE)
    hand_over(path, user)
    return path


def check_reachable(path: Path, user: pwd.struct_passwd) -> None:
    """Raise ``EmbeddedServiceError`` naming the first directory above ``path`` (a data
    directory, or the directory a program gave an embedded server) that ``user`` may not
    enter. memoryd never opens one itself: o+x on a home directory (or any other) lets
    every local user through it, not only the service user."""
    groups = set(os.getgrouplist(user.pw_name, user.pw_gid))
    for parent in reversed(path.absolute().parents):
        if not parent.exists():  # memoryd makes it, and the ones below, passable
            return
        if not _may_enter(parent.stat(), user.pw_uid, groups):
            raise EmbeddedServiceError(
                f"run as root, memoryd runs its servers and workers as the {user.pw_name!r} "
                f"user, which may not enter {parent} (above {path}), and memoryd never "
                f"changes the permissions of a directory above the one it is given: use a "
                f"directory that user can reach (MEMORYD_DATA_DIR; unset, run as root it "
                f"is {system_data_dir()}), or let it through yourself (chmod o+x {parent}, "
                f"or setfacl -m u:{user.pw_name}:x {parent})")


def _may_enter(info: os.stat_result, uid: int, groups: set[int]) -> bool:
    """Whether a user may search a directory, by its mode bits as the kernel reads them:
    the owner's bits for its owner, the group's for its group, the others' for the rest."""
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid in groups:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def hand_over_tree(root: Path, user: pwd.struct_passwd) -> None:
    """``hand_over`` ``root`` and everything below it (symbolic links left alone)."""
    hand_over(root, user)
    for entry in root.rglob("*"):
        os.chown(entry, user.pw_uid, user.pw_gid, follow_symlinks=False)
    close_tree(root)


def run_as_service_user() -> dict[str, object]:
    """``subprocess`` arguments that run a child as the service user when memoryd runs
    as root; none otherwise."""
    if not running_as_root():
        return {}
    user = service_user()
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def ensure_readable_tree(root: Path) -> None:
    """Let another user read and execute an installed tree (pip may install 0700)."""
    for entry in [root, *root.rglob("*")]:
        mode = entry.stat().st_mode
        wanted = mode | stat.S_IROTH | (stat.S_IXOTH if mode & stat.S_IXUSR else 0)
        if wanted != mode:
            entry.chmod(wanted)
    open_install_parents(root)


def open_install_parents(path: Path) -> None:
    """Let every user enter (o+x: not list) each parent of ``path``, an installed program
    the service user runs (the Python environment, the embedded PostgreSQL's binaries),
    never a data directory: installed code holds no secret, and the user cannot run it
    otherwise (a virtual environment under /root)."""
    for parent in path.parents:
        info = parent.stat()
        if not info.st_mode & stat.S_IXOTH:
            parent.chmod(info.st_mode | stat.S_IXOTH)
