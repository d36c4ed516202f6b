"""Moving one agent's memory out and in: JSON Lines with its memories (and their
embeddings), sessions, knowledge graph and links (``memoryd export`` / ``memoryd import``).

The first line is a header naming the format, the agent and the exporting store's
embedding model; each memory's data names the model of its own vector (files written
before memories did take the header's). An import keeps a vector when its model is the
store's and embeds the content again when it is not. It is idempotent: a memory whose
content (or key) the agent already holds is not added again, and sessions, entities,
relations and links that exist are left as they are, so a second import of the same
file adds nothing. Memories get new ids (the file may come from an agent that still
exists); sessions, links, supersessions, versions and the replacement each superseded
memory names are rewritten to them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.exc import DataError, IntegrityError, ProgrammingError
from sqlalchemy.orm import Session

from memoryd import clock
from memoryd import validation as check
from memoryd.db.models import SupersessionRow, VersionRow
from memoryd.errors import ValidationError
from memoryd.memory.embeddings import to_pgvector
from memoryd.memory.rows import STORED_COLUMNS

if TYPE_CHECKING:
    from memoryd.memory.store import MemoryStore

FORMAT, VERSION = "memoryd-export", 1
BATCH = 500
# Records after the header, in the order an import needs them (memories before what
# refers to them).
KINDS = ("memory", "session", "entity", "relation", "link", "supersession", "version")
_EXPORT = {
    "memory": "SELECT to_jsonb(m) - 'embedding' - 'tsv' AS data, CAST(m.embedding AS text) "
              "AS embedding FROM memories m WHERE agent_id = :a ORDER BY created_at, id",
    "session": "SELECT to_jsonb(s) - 'message_ids' AS data FROM sessions s WHERE agent_id = :a "
               "ORDER BY session_id",
    "entity": "SELECT to_jsonb(e) AS data FROM kg_entities e WHERE agent_id = :a "
              "ORDER BY entity_id",
    "relation": "SELECT to_jsonb(r) AS data FROM kg_relations r WHERE agent_id = :a "
                "ORDER BY source, target, type",
    "link": "SELECT to_jsonb(l) AS data FROM memory_links l WHERE agent_id = :a "
            "ORDER BY source_id, target_id, kind",
    "supersession": "SELECT to_jsonb(s) - 'id' AS data FROM memory_supersessions s "
                    "WHERE agent_id = :a ORDER BY id",
    "version": "SELECT to_jsonb(v) - 'id' AS data FROM memory_versions v WHERE agent_id = :a "
               "ORDER BY id",
}


@dataclass
class Imported:
    memories: int = 0
    memories_present: int = 0
    sessions: int = 0
    entities: int = 0
    relations: int = 0
    links: int = 0
    supersessions: int = 0
    versions: int = 0
    reembedded: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- export ------------------------------------------------------------------------
def export_agent(store: MemoryStore, agent_id: str) -> Iterator[str]:
    """The agent's memory as JSON lines (header first), read in batches."""
    agent = check.agent_id(agent_id)
    yield json.dumps({"type": "header", "format": FORMAT, "version": VERSION,
                      "agent_id": agent, "embedding_model": store.embedder.name,
                      "exported_at": clock.now().isoformat()})
    with store.session() as session:
        for kind in KINDS:
            rows = session.execute(text(_EXPORT[kind]).execution_options(yield_per=BATCH),
                                   {"a": agent})
            for row in rows:
                record = {"type": kind, "data": row.data}
                if kind == "memory":
                    record["embedding"] = row.embedding
                yield json.dumps(record, ensure_ascii=False)


# --- import ------------------------------------------------------------------------
def import_agent(store: MemoryStore, agent_id: str, lines: Iterable[str]) -> Imported:
    """Read an export into ``agent_id`` (one transaction); see the module docstring."""
    agent = check.agent_id(agent_id)
    records = _records(lines)
    header = next(records, None)
    _check_header(header)
    assert header is not None
    result = Imported()
    try:
        with store.session() as session:
            _read(store, session, agent, records, result, str(header["embedding_model"]))
    except (DataError, IntegrityError, ProgrammingError) as exc:
        # A record PostgreSQL refuses (wrong types, a vector of another size): the whole
        # import is rolled back.
        raise ValidationError("file", f"holds a record that cannot be stored: "
                                      f"{type(exc.orig).__name__}") from None
    store.mark_written([agent])
    return result


def _read(store: MemoryStore, session: Session, agent: str,
          records: Iterator[dict[str, Any]], result: Imported, source_model: str) -> None:
    ids: dict[str, str] = {}  # exported memory id -> id in this store
    pending: list[dict[str, Any]] = []
    for record in records:
        if record["type"] == "memory":
            pending.append(record)
            if len(pending) >= BATCH:
                _memories(store, session, agent, pending, result, ids, source_model)
                pending = []
            continue
        if pending:
            _memories(store, session, agent, pending, result, ids, source_model)
            pending = []
        _other(session, agent, record, result, ids)
    if pending:
        _memories(store, session, agent, pending, result, ids, source_model)
    _relink_replacements(session, agent, ids)


def _relink_replacements(session: Session, agent: str, ids: dict[str, str]) -> None:
    """Superseded memories name their replacement by its exported id: this store's now
    (none, if the file did not hold it)."""
    session.execute(text("""
        UPDATE memories m SET superseded_by = CAST(CAST(:map AS jsonb) ->> CAST(m.superseded_by
                                                                           AS text) AS uuid)
        WHERE m.agent_id = :a AND m.superseded_by IS NOT NULL
          AND m.id = ANY(CAST(:new AS uuid[]))"""),
                    {"map": json.dumps(ids), "a": agent, "new": list(set(ids.values()))})


def _records(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise ValidationError(f"line {number}", "is not JSON") from None
        if not isinstance(record, dict) or record.get("type") not in ("header", *KINDS):
            raise ValidationError(f"line {number}", "is not a memoryd export record")
        if record["type"] != "header" and not isinstance(record.get("data"), dict):
            raise ValidationError(f"line {number}", "has no data object")
        yield record


def _check_header(header: dict[str, Any] | None) -> None:
    if header is None or header.get("type") != "header" or header.get("format") != FORMAT:
        raise ValidationError("file", f"does not start with a {FORMAT} header")
    if header.get("version") != VERSION:
        raise ValidationError("file", f"is version {header.get('version')!r}; this memoryd "
                                      f"reads version {VERSION}")
    if not isinstance(header.get("embedding_model"), str):
        raise ValidationError("file", "its header names no embedding model")


_INSERT_MEMORIES = text(f"""
    INSERT INTO memories ({", ".join(STORED_COLUMNS)})
    SELECT {", ".join({"id": "CAST(x.item ->> 'new_id' AS uuid)",
                       "agent_id": "CAST(:agent AS text)",
                       "embedding": "CAST(x.item ->> 'embedding' AS vector)",
                       "embedding_model": "CAST(:model AS text)"}
                      .get(c, f"r.{c}") for c in STORED_COLUMNS)}
    FROM jsonb_array_elements(CAST(:batch AS jsonb)) AS x(item),
         jsonb_populate_record(NULL::memories, x.item -> 'data') AS r
    ON CONFLICT DO NOTHING
    RETURNING id
""")


def _memories(store: MemoryStore, session: Session, agent: str, batch: list[dict[str, Any]],
              result: Imported, ids: dict[str, str], source_model: str) -> None:
    model = store.embedder.name
    stale = [r for r in batch if r["data"].get("embedding_model", source_model) != model]
    if stale:
        vectors = store.embedder.embed([str(r["data"].get("content", "")) for r in stale])
        for record, vector in zip(stale, vectors, strict=True):
            record["embedding"] = to_pgvector(vector)
        result.reembedded = True
    for record in batch:
        record["new_id"] = str(uuid.uuid4())
    added = {str(r.id) for r in session.execute(_INSERT_MEMORIES, {
        "agent": agent, "model": model, "batch": json.dumps(batch)})}
    result.memories += len(added)
    result.memories_present += len(batch) - len(added)
    hashes = [str(r["data"].get("content_hash")) for r in batch]
    found: dict[str, str] = dict(session.execute(text(
        "SELECT content_hash, CAST(id AS text) FROM memories "
        "WHERE agent_id = :a AND content_hash = ANY(:h) AND valid_to IS NULL"),
        {"a": agent, "h": hashes}).all())
    for record, digest in zip(batch, hashes, strict=True):
        exported = str(record["data"].get("id"))
        if record["new_id"] in added:
            ids[exported] = record["new_id"]
        elif digest in found:  # the agent holds it already
            ids[exported] = found[digest]


def _other(session: Session, agent: str, record: dict[str, Any], result: Imported,
           ids: dict[str, str]) -> None:
    data = dict(record["data"], agent_id=agent)
    kind = record["type"]
    if kind == "session":
        data["messages"] = [dict(m, id=ids[str(m.get("id"))]) for m in data.get("messages") or []
                            if isinstance(m, dict) and str(m.get("id")) in ids]
        data["message_count"] = len(data["messages"])
        data["compacted_ids"] = [ids[str(i)] for i in data.get("compacted_ids") or []
                                 if str(i) in ids]
        result.sessions += _insert(session, "sessions", data)
    elif kind == "entity":
        result.entities += _insert(session, "kg_entities", data)
    elif kind == "relation":
        result.relations += _insert(session, "kg_relations", data)
    elif kind == "supersession":
        if str(data.get("old_id")) in ids and str(data.get("new_id")) in ids:
            data.update(old_id=ids[str(data["old_id"])], new_id=ids[str(data["new_id"])])
            result.supersessions += _insert_numbered(session, "memory_supersessions", data)
    elif kind == "version":
        if str(data.get("memory_id")) in ids:
            data["memory_id"] = ids[str(data["memory_id"])]
            result.versions += _insert_numbered(session, "memory_versions", data)
    elif str(data.get("source_id")) in ids and str(data.get("target_id")) in ids:
        data.update(source_id=ids[str(data["source_id"])], target_id=ids[str(data["target_id"])])
        result.links += _insert(session, "memory_links", data)


def _insert_numbered(session: Session, table: str, data: dict[str, Any]) -> int:
    """``_insert`` for a table whose rows this store numbers itself (``id``)."""
    columns = [c for c in _COLUMNS[table] if c != "id"]
    listed = ", ".join(columns)
    added = session.execute(text(f"""
        INSERT INTO {table} ({listed})
        SELECT {listed} FROM jsonb_populate_record(NULL::{table}, CAST(:d AS jsonb))
        ON CONFLICT DO NOTHING RETURNING 1"""), {"d": json.dumps(data)}).first()
    return 0 if added is None else 1


_COLUMNS = {model.__tablename__: tuple(c.name for c in model.__table__.columns)
            for model in (SupersessionRow, VersionRow)}


def _insert(session: Session, table: str, data: dict[str, Any]) -> int:
    """One row from its JSON form; 0 if a row with its key exists already."""
    added = session.execute(text(f"""
        INSERT INTO {table} SELECT * FROM jsonb_populate_record(NULL::{table}, CAST(:d AS jsonb))
        ON CONFLICT DO NOTHING RETURNING 1"""), {"d": json.dumps(data)}).first()
    return 0 if added is None else 1
