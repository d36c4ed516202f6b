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
