"""``MemoryStore.embedded()``: a store on the embedded PostgreSQL, which the last store
(or memoryd command) using it stops."""

from __future__ import annotations

from pathlib import Path

from memoryd.embedded.postgres import EmbeddedPostgres
from memoryd.memory.store import MemoryStore


def test_the_last_store_using_the_embedded_server_stops_it(tmp_path: Path) -> None:
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
    deep = tmp_path / ("a-directory-with-a-long-name-" * 4)
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
