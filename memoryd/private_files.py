"""Files and folders only their owner can open.

memoryd's data directory holds secrets (passwords, keys) and memory contents (Redis's
append-only file, logs), so every folder memoryd makes there is 0700 and every file 0600,
from the moment it exists: nothing is created open and closed afterwards.
"""

from __future__ import annotations

import os
import secrets
import stat
import tempfile
from pathlib import Path
from typing import IO, Literal, overload

DIR_MODE = 0o700
FILE_MODE = 0o600
# A folder memoryd makes on the way to a directory another user (the service user) must
# reach: enter, not list. Only folders memoryd creates get it; existing ones keep theirs.
PASSABLE_DIR_MODE = 0o711
# For child processes that create files of their own (Redis's append-only files).
UMASK = 0o077


def private_dir(path: Path, parent_mode: int = DIR_MODE) -> Path:
    """``path``, created if missing and closed to everyone but its owner. A missing parent
    is created too, with ``parent_mode`` (set whatever the umask)."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=DIR_MODE)
        except FileExistsError:  # made meanwhile by someone else: left as it is
            continue
        if folder != path:
            folder.chmod(parent_mode)
    path.chmod(DIR_MODE)
    return path


def close(path: Path) -> None:
    """Take group and other permissions off ``path`` (made before files were private)."""
    mode = path.lstat().st_mode
    if stat.S_ISLNK(mode):
        return
    wanted = stat.S_IMODE(mode) & 0o700 | (DIR_MODE if stat.S_ISDIR(mode) else 0)
    if wanted != stat.S_IMODE(mode):
        path.chmod(wanted)


def close_tree(root: Path) -> None:
    """``close`` ``root`` and everything below it (symbolic links left alone)."""
    for entry in [root, *root.rglob("*")]:
        close(entry)


def _temp_beside(path: Path, text: str) -> Path:
    # mkstemp creates the file 0600: it is never readable by others, even empty.
    if not path.parent.exists():
        private_dir(path.parent)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as out:
        out.write(text)
    return Path(name)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to a file only its owner can read: never readable by others even
    for a moment, and never seen half-written (the new file replaces the old whole)."""
    temp = _temp_beside(path, text)
    try:
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def read_or_create_secret(path: Path) -> str:
    """The secret kept in ``path``, or a new random one kept there. Concurrent callers
    agree on one: the first to link its file into place wins, the others read it."""
    kept = _read_secret(path)
    if kept:
        return kept
    temp = _temp_beside(path, secrets.token_urlsafe(32) + "\n")
    try:
        try:
            os.link(temp, path)
        except FileExistsError:
            if not _read_secret(path):  # an empty file: nobody's secret
                os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    return _read_secret(path)


def _read_secret(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""


@overload
def open_private(path: Path, binary: Literal[False] = False) -> IO[str]: ...
@overload
def open_private(path: Path, binary: Literal[True]) -> IO[bytes]: ...


def open_private(path: Path, binary: bool = False) -> IO[str] | IO[bytes]:
    """``path`` opened for appending (created if missing), readable by its owner only:
    logs and lock files."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
    if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
        os.fchmod(fd, FILE_MODE)  # a file of an older version
    return os.fdopen(fd, "ab" if binary else "a")
