"""Backups of the whole store and one agent's memory out and in, through the real
``memoryd`` command: a backup restored into an empty database holds the same rows; an
export imported into another agent gives the same memories, sessions, graph and links
(with new ids), a second import adds nothing, and a file from another embedding model
is embedded again."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from memoryd.embedded.postgres import EmbeddedPostgres
from memoryd.memory.store import MemoryStore
from tests.support.cli import as_json, memoryd

pytestmark = pytest.mark.slow

FIELDS = ("content", "category", "tags", "importance", "metadata", "role", "session_id",
          "key", "created_at")


def _seed(store: MemoryStore, agent: str) -> dict[str, str]:
    made = {
        "a": store.store(agent, "Alice leads project Atlas.", role="user", session_id="s1",
                         tags=["work"], importance=0.8, metadata={"src": "chat"}).id,
        "b": store.store(agent, "Atlas ships on Fridays.", role="assistant",
                         session_id="s1", category="decision", key="ship-day").id,
        "c": store.store(agent, "Bob prefers tea.", category="preference").id,
    }
    store.kg_add(agent, {"id": "Alice", "type": "person", "attributes": {"team": "core"},
                         "relations": [{"target": "Atlas", "type": "leads"}]})
    with store.session() as session:
        session.execute(text("INSERT INTO memory_links (agent_id, source_id, target_id, kind)"
                             " VALUES (:a, :s, :t, 'related')"),
                        {"a": agent, "s": made["a"], "t": made["b"]})
    return {k: str(v) for k, v in made.items()}


def _memories(store: MemoryStore, agent: str) -> list[dict[str, Any]]:
    return [{f: getattr(m, f) for f in FIELDS}
            for m in sorted(store.list(agent, limit=100).items, key=lambda m: m.content)]


def test_an_export_imported_into_another_agent_is_the_same_memory_and_imports_once(
        store: MemoryStore, service_env: dict[str, str], tmp_path: Path) -> None:
    source, target = f"src-{uuid.uuid4()}", f"dst-{uuid.uuid4()}"
    _seed(store, source)
    dump = tmp_path / "agent.jsonl"
    memoryd(service_env, "export", source, "--output", str(dump))
    lines = dump.read_text().splitlines()
    header = json.loads(lines[0])
    assert header["format"] == "memoryd-export" and header["agent_id"] == source
    assert [json.loads(line)["type"] for line in lines[1:]].count("memory") == 3

    first = as_json(memoryd(service_env, "import", target, str(dump), "--json"))
    assert first == {"memories": 3, "memories_present": 0, "sessions": 1, "entities": 2,
                     "relations": 2, "links": 1, "supersessions": 0, "versions": 0,
                     "reembedded": False}
    assert _memories(store, target) == _memories(store, source)
    assert not {m.id for m in store.list(target).items} & {m.id for m in
                                                           store.list(source).items}
    [session] = store.sessions(target)
    assert session.message_count == 2
    assert [e.id for e in store.kg_query(target, "Alice", depth=1)] == ["Alice", "Atlas"]
    hit = store.recall(target, "who leads Atlas?", limit=1)[0]
    assert hit.memory.content == "Alice leads project Atlas."
    with store.session() as db:
        links = db.execute(text("SELECT count(*) FROM memory_links l JOIN memories s "
                                "ON s.id = l.source_id AND s.agent_id = :a"),
                           {"a": target}).scalar_one()
    assert links == 1

    again = as_json(memoryd(service_env, "import", target, str(dump), "--json"))
    assert again == {"memories": 0, "memories_present": 3, "sessions": 0, "entities": 0,
                     "relations": 0, "links": 0, "supersessions": 0, "versions": 0,
                     "reembedded": False}
    assert len(store.list(target).items) == 3


def test_a_file_from_another_model_is_embedded_again(
        store: MemoryStore, service_env: dict[str, str], tmp_path: Path) -> None:
    source, target = f"src-{uuid.uuid4()}", f"dst-{uuid.uuid4()}"
    _seed(store, source)
    lines = memoryd(service_env, "export", source).stdout.splitlines()
    header = json.loads(lines[0])
    header["embedding_model"] = "some-other-model"
    # Its vectors are garbage for this store: they must not be used. The first memory
    # names its model; the others, as files written before memories did, take the
    # header's.
    records = [json.loads(line) for line in lines[1:]]
    memories = [record for record in records if record["type"] == "memory"]
    for record in memories:
        record["embedding"] = NO_MODELS_VECTOR
        del record["data"]["embedding_model"]
    memories[0]["data"]["embedding_model"] = "yet-another-model"
    result = _import(service_env, tmp_path, target, [header, *records])
    assert result["reembedded"] is True and result["memories"] == 3
    assert _differing_vectors(store, source, target) == 0
    with store.session() as db:
        models = db.execute(text("SELECT DISTINCT embedding_model FROM memories "
                                 "WHERE agent_id = :t"), {"t": target}).scalars().all()
    assert models == [store.embedder.name]


def test_a_memory_of_another_model_in_a_file_of_this_one_is_embedded_again(
        store: MemoryStore, service_env: dict[str, str], tmp_path: Path) -> None:
    source, target = f"src-{uuid.uuid4()}", f"dst-{uuid.uuid4()}"
    _seed(store, source)
    lines = memoryd(service_env, "export", source).stdout.splitlines()
    records = [json.loads(line) for line in lines]
    first = next(record for record in records if record["type"] == "memory")
    first["data"]["embedding_model"] = "some-other-model"
    first["embedding"] = NO_MODELS_VECTOR
    result = _import(service_env, tmp_path, target, records)
    assert result["reembedded"] is True and result["memories"] == 3
    # The one re-embedded, the others' vectors kept as they were.
    assert _differing_vectors(store, source, target) == 0


def test_an_export_carries_the_history_of_replaced_facts(
        store: MemoryStore, service_env: dict[str, str], tmp_path: Path) -> None:
    source, target = f"src-{uuid.uuid4()}", f"dst-{uuid.uuid4()}"
    store.store(source, "Ship date: March 3.", key="ship-date")
    store.store(source, "Ship date: April 9.", key="ship-date")
    lines = memoryd(service_env, "export", source).stdout.splitlines()
    result = _import(service_env, tmp_path, target, [json.loads(line) for line in lines])
    assert (result["memories"], result["supersessions"], result["versions"]) == (2, 1, 1)
    current = store.get_by_key(target, "ship-date")
    assert current.content == "Ship date: April 9."
    [old] = [m for m in store.list(target, include_superseded=True).items if not m.current]
    assert old.superseded_by == current.id and old.content == "Ship date: March 3."
    history = store.history(target, old.id)
    assert [v.cause for v in history.versions] == ["superseded"]
    assert [(s.cause, s.new_id) for s in history.supersessions] == [("key", current.id)]


NO_MODELS_VECTOR = "[" + ",".join(["0.0"] * 383 + ["1.0"]) + "]"  # garbage for any model


def _import(env: dict[str, str], tmp_path: Path, target: str,
            records: list[dict[str, Any]]) -> Any:
    dump = tmp_path / "edited.jsonl"
    dump.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return as_json(memoryd(env, "import", target, str(dump), "--json"))


def _differing_vectors(store: MemoryStore, source: str, target: str) -> int:
    """How many memories of ``target`` have a vector other than the same content's in
    ``source``."""
    with store.session() as db:
        return int(db.execute(text(
            "SELECT count(*) FROM memories s JOIN memories t ON s.content = t.content "
            "WHERE s.agent_id = :s AND t.agent_id = :t AND s.embedding <> t.embedding"),
            {"s": source, "t": target}).scalar_one())


def test_a_broken_file_is_refused_and_imports_nothing(
        store: MemoryStore, service_env: dict[str, str], tmp_path: Path) -> None:
    source, target = f"src-{uuid.uuid4()}", f"dst-{uuid.uuid4()}"
    _seed(store, source)
    lines = memoryd(service_env, "export", source).stdout.splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([*lines, '{"type": "memory", "data": {"content": 5, '
                                      '"importance": "very"}, "embedding": "[1,2]"}']))
    done = memoryd(service_env, "import", target, str(bad), check=False)
    assert done.returncode == 2 and "ValidationError: file" in done.stderr
    assert "Traceback" not in done.stderr
    assert store.list(target).total == 0  # one transaction: nothing of the good records
    not_export = tmp_path / "not.jsonl"
    not_export.write_text('{"hello": 1}\n')
    done = memoryd(service_env, "import", target, str(not_export), check=False)
    assert done.returncode == 2 and "line 1: is not a memoryd export record" in done.stderr


def test_a_backup_restored_into_an_empty_database_holds_the_same_store(
        store: MemoryStore, service_env: dict[str, str], tmp_path: Path, pg_url: str,
        pg_server: EmbeddedPostgres) -> None:
    agent = f"backup-{uuid.uuid4()}"
    _seed(store, agent)
    before = _memories(store, agent)
    archive = tmp_path / "memoryd.dump"
    assert "backed up" in memoryd(service_env, "backup", str(archive)).stdout

    name = f"restored_{uuid.uuid4().hex[:8]}"
    pg_server.create_database(name)  # as the operator makes one: the app role's to fill
    restored_url = make_url(pg_url).set(database=name).render_as_string(hide_password=False)
    env = {**service_env, "MEMORYD_DATABASE_URL": restored_url}
    refused = memoryd(env, "restore-backup", str(archive), check=False)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    memoryd(env, "restore-backup", str(archive), "--yes")
    restored = MemoryStore(restored_url)
    try:
        assert _memories(restored, agent) == before
        assert restored.recall(agent, "what does Bob drink?", limit=1)[0].memory.content == (
            "Bob prefers tea.")
        # Restoring the same backup again (over itself) is clean: same rows, no duplicates.
        memoryd(env, "restore-backup", str(archive), "--yes")
        assert _memories(restored, agent) == before
    finally:
        restored.close()
        with pg_server.connect_owner("postgres") as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
