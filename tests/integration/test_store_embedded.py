"""``MemoryStore.embedded()``: a store on the embedded PostgreSQL, which the last store
(or memoryd command) using it stops. Run as root, a server given a directory of the
program's choosing runs as the service user there and changes nothing above it."""

from __future__ import annotations

import os
import pwd
import re
import stat
from pathlib import Path

import pytest
import redis

from memoryd.embedded._proc import SERVICE_USER
from memoryd.embedded.postgres import EmbeddedPostgres
from memoryd.embedded.redis import EmbeddedRedis
from memoryd.errors import EmbeddedServiceError
from memoryd.memory.store import MemoryStore
from tests.support.service_user import opened_for_service_user

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the service user exists for root only")


def _above(path: Path) -> dict[Path, tuple[int, int, int]]:
    """Mode and owners of every directory above ``path`` that exists."""
    return {folder: (info.st_mode, info.st_uid, info.st_gid) for folder in path.parents
            if folder.exists() and (info := folder.stat())}


def test_the_last_store_using_the_embedded_server_stops_it(tmp_path: Path) -> None:
    opened_for_service_user(tmp_path)
    first = MemoryStore.embedded(tmp_path)
    second = MemoryStore.embedded(tmp_path)
    server = EmbeddedPostgres(tmp_path)
    try:
        first.migrate()
        first.store("agent-1", "The embedded server serves both stores")
        assert [h.memory.content for h in second.recall("agent-1", "embedded server")] == [
            "The embedded server serves both stores"]
        first.close()
        assert server.is_running()  # the second store still uses it
        second.close()
        assert not server.is_running()
    finally:
        if server.is_running():
            server.stop()


def test_a_store_in_a_deep_data_directory_starts_and_serves(tmp_path: Path) -> None:
    # A unix socket's path is limited to about 100 bytes: the server listens on TCP only,
    # so where its data directory lies does not matter.
    deep = opened_for_service_user(tmp_path) / ("a-directory-with-a-long-name-" * 4)
    assert len(str(deep / "pgdata" / ".s.PGSQL.65535")) > 108
    store = MemoryStore.embedded(deep)
    try:
        store.migrate()
        store.store("agent-1", "A server whose data lies deep")
        assert [h.memory.content for h in store.recall("agent-1", "deep server")] == [
            "A server whose data lies deep"]
    finally:
        store.close()
    assert not EmbeddedPostgres(deep).is_running()


@needs_root
def test_as_root_servers_below_a_directory_the_service_user_cannot_enter_are_refused_unchanged(
        tmp_path: Path) -> None:
    """A program's own directory, closed to the service user: memoryd says so, naming it,
    and opens nothing (o+x would let every local user through it)."""
    closed = opened_for_service_user(tmp_path) / "closed"
    closed.mkdir(mode=0o700)
    before = _above(closed / "data")
    with pytest.raises(EmbeddedServiceError) as refused:
        MemoryStore.embedded(closed / "data")
    assert f"may not enter {closed} (above {closed / 'data'})" in str(refused.value)
    assert f"chmod o+x {closed}" in str(refused.value)
    with pytest.raises(EmbeddedServiceError, match=re.escape(f"may not enter {closed} ")):
        EmbeddedRedis(closed / "redis").start()
    assert _above(closed / "data") == before
    assert list(closed.iterdir()) == []


@needs_root
def test_as_root_servers_given_their_own_directories_start_and_change_nothing_above_them(
        tmp_path: Path) -> None:
    """A directory the service user enters through its group (not as any other user):
    left as it is, while the servers below it start; a folder memoryd makes on the way
    lets the service user through (enter, not list)."""
    shared = opened_for_service_user(tmp_path) / "shared"
    shared.mkdir()
    os.chown(shared, 0, pwd.getpwnam(SERVICE_USER).pw_gid)
    shared.chmod(0o710)
    postgres = EmbeddedPostgres(shared / "postgres")
    broker = EmbeddedRedis(shared / "made" / "redis")
    before = _above(shared / "postgres")
    try:
        postgres.ensure_running()
        assert redis.Redis.from_url(broker.start()).ping()
        with postgres.connect_owner() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert _above(shared / "postgres") == before
        assert stat.S_IMODE((shared / "made").stat().st_mode) == 0o711
    finally:
        broker.stop()
        postgres.stop()
