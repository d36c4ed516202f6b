"""The embedded services as another local user meets them: PostgreSQL and Redis refuse
anyone without their generated passwords, the data directory's files are closed to
everyone but their owner, and memoryd's own database role cannot run programs or
install extensions. Real servers; the intruder is the ``nobody`` account, so the tests
that play it need root (as the suite has in CI)."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis

from memoryd.embedded._proc import free_port
from memoryd.embedded.postgres import APP_ROLE, HBA, OWNER, EmbeddedPostgres, bin_dir
from memoryd.embedded.redis import EmbeddedRedis, redis_server_binary
from memoryd.memory.store import MemoryStore
from tests.support.service_user import opened_for_service_user

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching to nobody needs root")

TRUST_HBA = "host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n"


def as_nobody(argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    nobody = pwd.getpwnam("nobody")
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd="/",
                          env={"PATH": "/usr/bin:/bin", **env}, user=nobody.pw_uid,
                          group=nobody.pw_gid, extra_groups=[], check=False)


def psql(server: EmbeddedPostgres, role: str, **env: str) -> subprocess.CompletedProcess[str]:
    return as_nobody([str(bin_dir() / "psql"), "-w", "-X", "-h", "127.0.0.1",
                      "-p", str(server.port), "-U", role, "-d", "memoryd",
                      "-c", "SELECT count(*) FROM memories"], **env)


def redis_cli(server: EmbeddedRedis, *command: str, **env: str
              ) -> subprocess.CompletedProcess[str]:
    cli = str(Path(redis_server_binary()).with_name("redis-cli"))
    return as_nobody([cli, "--no-auth-warning", "-h", "127.0.0.1", "-p", str(server.port),
                      *command], **env)


def readable_by_nobody(paths: list[Path]) -> list[str]:
    """The paths among ``paths`` that ``nobody`` can read (files) or list (folders)."""
    script = ('for p; do if [ -d "$p" ]; then ls "$p" >/dev/null 2>&1 && echo "$p"; '
              'else head -c1 "$p" >/dev/null 2>&1 && echo "$p"; fi; done')
    # In chunks: a data directory late in the suite holds more files than one argument
    # list may name.
    return [found for start in range(0, len(paths), 500)
            for found in as_nobody(["sh", "-c", script, "sh",
                                    *map(str, paths[start:start + 500])]).stdout.split()]


def open_to_others(root: Path) -> list[str]:
    return [f"{oct(stat.S_IMODE(p.lstat().st_mode))} {p}" for p in [root, *root.rglob("*")]
            if not p.is_symlink() and p.lstat().st_mode & 0o077]


@pytest.fixture
def world_readable_control() -> Iterator[Path]:
    """A file anyone may read, to show that ``nobody`` really reads what is open."""
    folder = Path(tempfile.mkdtemp(prefix="memoryd-control-"))
    folder.chmod(0o755)
    control = folder / "open"
    control.write_text("anyone may read this\n")
    control.chmod(0o644)
    yield control
    shutil.rmtree(folder)


@needs_root
def test_another_local_user_cannot_log_into_the_embedded_postgres(
        pg_server: EmbeddedPostgres, _session_store: object) -> None:
    for role in (APP_ROLE, OWNER):
        without = psql(pg_server, role)
        assert without.returncode != 0 and "no password supplied" in without.stderr, without
        wrong = psql(pg_server, role, PGPASSWORD="not-the-password")
        assert wrong.returncode != 0, wrong
        assert "password authentication failed" in wrong.stderr, wrong
    # The same command with the password gets in: the refusals above are the server's.
    right = psql(pg_server, APP_ROLE, PGPASSWORD=pg_server.password(APP_ROLE))
    assert right.returncode == 0, right.stderr


@needs_root
def test_another_local_user_cannot_use_the_embedded_redis(
        redis_server: EmbeddedRedis) -> None:
    redis.Redis.from_url(redis_server.url).set("credentials-probe", "secret task")
    without = redis_cli(redis_server, "GET", "credentials-probe")
    assert "NOAUTH" in without.stdout + without.stderr, without
    assert "secret task" not in without.stdout
    wrong = redis_cli(redis_server, "GET", "credentials-probe", REDISCLI_AUTH="not-it")
    assert "WRONGPASS" in wrong.stdout + wrong.stderr, wrong
    right = redis_cli(redis_server, "GET", "credentials-probe",
                      REDISCLI_AUTH=redis_server.password)
    assert right.stdout.strip() == "secret task", right


def test_the_redis_password_is_not_on_its_command_line(redis_server: EmbeddedRedis) -> None:
    assert redis_server._proc is not None
    argv = Path(f"/proc/{redis_server._proc.pid}/cmdline").read_bytes()
    assert b"redis-server" in argv
    assert redis_server.password.encode() not in argv


@needs_root
def test_another_local_user_can_read_nothing_in_the_data_directory(
        pg_server: EmbeddedPostgres, redis_server: EmbeddedRedis,
        world_readable_control: Path) -> None:
    # A file open to all beside the services' folders: their parent lets nobody through,
    # so what stops nobody below is the folders' own modes.
    beside = pg_server.data_dir.parent / "open-control"
    shutil.copy(world_readable_control, beside)
    try:
        paths = [p for root in (pg_server.data_dir, redis_server.data_dir)
                 for p in [root, *root.rglob("*")]]
        assert any(p.name == "appendonly.aof" or p.name == "appendonlydir" for p in paths)
        assert readable_by_nobody([world_readable_control, beside]) == [
            str(world_readable_control), str(beside)]
        assert readable_by_nobody(paths) == []
    finally:
        beside.unlink()


def test_every_folder_and_file_of_the_embedded_services_is_private(tmp_path: Path) -> None:
    opened_for_service_user(tmp_path)
    # What an older version left open to all is closed on the next start, too.
    (tmp_path / "postgres").mkdir(mode=0o755)
    (tmp_path / "redis").mkdir(mode=0o755)
    olds = {tmp_path / "postgres" / "postgres.log": "",
            tmp_path / "postgres" / "port": str(free_port()),
            tmp_path / "redis" / "appendonly.aof": ""}
    for old, text in olds.items():
        old.write_text(text)
        old.chmod(0o644)
    postgres, broker = EmbeddedPostgres(tmp_path / "postgres"), EmbeddedRedis(tmp_path / "redis")
    try:
        store = MemoryStore(postgres.ensure_running())
        store.migrate()
        store.store("agent-1", "a memory that lands in the database's files")
        store.close()
        broker.start()
        redis.Redis.from_url(broker.url).rpush("memory", "a whole task message")
        assert open_to_others(postgres.data_dir) == []
        assert open_to_others(broker.data_dir) == []
        for secret in (postgres.password_file(APP_ROLE), postgres.password_file(OWNER),
                       broker.password_file):
            assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    finally:
        broker.stop()
        postgres.stop()


def test_the_app_role_cannot_run_programs_install_extensions_or_read_password_hashes(
        pg_server: EmbeddedPostgres, _session_store: object) -> None:
    with psycopg.connect(pg_server.url().replace("+psycopg", ""), autocommit=True) as conn:
        assert conn.execute("SELECT current_user, rolsuper FROM pg_roles "
                            "WHERE rolname = current_user").fetchone() == (APP_ROLE, False)
        # The migrations ran as this role: it owns every table they made.
        owners = conn.execute("SELECT DISTINCT tableowner FROM pg_tables "
                              "WHERE schemaname = 'public'").fetchall()
        assert owners == [(APP_ROLE,)]
        for statement in ("COPY (SELECT 1) TO PROGRAM 'id'",
                          "CREATE EXTENSION file_fdw",
                          "CREATE EXTENSION hstore",  # a trusted one: no CREATE right either
                          "SELECT rolpassword FROM pg_authid",
                          "SELECT pg_read_file('postgresql.conf')",
                          "ALTER SYSTEM SET log_statement = 'all'"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)


def _make_it_an_older_trust_cluster(server: EmbeddedPostgres) -> None:
    """What memoryd made before passwords: trust for every loopback connection, the
    superuser without a password owning every table, no app role."""
    for database in ("memoryd", "postgres"):
        with server.connect_owner(database) as conn:
            conn.execute(f"REASSIGN OWNED BY {APP_ROLE} TO {OWNER}; DROP OWNED BY {APP_ROLE}")
    with server.connect_owner("postgres") as conn:
        conn.execute(f"DROP ROLE {APP_ROLE}; ALTER ROLE {OWNER} PASSWORD NULL")
    (server.pgdata / "pg_hba.conf").write_text(TRUST_HBA)
    server.stop()
    server.password_file(APP_ROLE).unlink()
    server.password_file(OWNER).unlink()


def test_a_cluster_an_older_memoryd_made_with_trust_is_converted_on_start(
        tmp_path: Path) -> None:
    server = EmbeddedPostgres(opened_for_service_user(tmp_path) / "postgres")
    try:
        store = MemoryStore(server.ensure_running())
        store.migrate()
        kept = store.store("agent-1", "a memory from before passwords")
        store.close()
        _make_it_an_older_trust_cluster(server)

        converted = EmbeddedPostgres(tmp_path / "postgres")
        store = MemoryStore(converted.ensure_running())
        assert (converted.pgdata / "pg_hba.conf").read_text() == HBA
        store.migrate()
        assert store.get("agent-1", kept.id).content == "a memory from before passwords"
        store.store("agent-1", "a memory after")
        store.close()
        with converted.connect_owner() as conn:
            not_handed_over = conn.execute(
                "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace "
                "AND relkind IN ('r', 'S') AND relowner <> %s::regrole",
                (APP_ROLE,)).fetchall()
        assert not_handed_over == []
        for role in (APP_ROLE, OWNER):
            assert "no password supplied" in psql(converted, role).stderr
    finally:
        server.stop()
