"""The Alembic migrations on fresh databases: what ``upgrade`` creates, that it
is idempotent and safe from several processes at once, that ``downgrade``
removes it, and that the SQLAlchemy models mirror the migrated tables."""

from __future__ import annotations

import hashlib
import multiprocessing
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from memoryd.db import migrate as migrations
from memoryd.db.engine import make_engine
from memoryd.db.models import Base
from memoryd.embedded.postgres import EmbeddedPostgres
from memoryd.memory.rows import STORED_COLUMNS

HEAD = "0017"
TABLES = {"memories", "sessions", "kg_entities", "kg_relations", "memory_links",
          "maintenance_runs", "evicted_memories", "agent_term_stats", "agent_terms", "api_keys",
          "dead_letters", "restored_evictions", "memory_supersessions", "memory_versions",
          "working_promotions"}


@pytest.fixture
def fresh_db(pg_server: EmbeddedPostgres) -> Iterator[Any]:
    """A factory of empty databases on the test server (made as memoryd's are: migrated
    by the app role), all dropped afterwards."""
    created: list[tuple[str, Engine]] = []

    def make() -> tuple[str, Engine]:
        name = f"mig_{uuid.uuid4().hex}"
        pg_server.create_database(name)
        url = pg_server.url(name)
        engine = make_engine(url, pool_size=1)
        created.append((name, engine))
        return url, engine

    yield make
    with pg_server.connect_owner("postgres") as conn:
        for name, engine in created:
            engine.dispose()
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _tables(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(text(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"))
            .scalars())


def _indexes(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return {row.indexname: row.indexdef for row in conn.execute(text(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'"))}


def _extensions(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(text("SELECT extname FROM pg_extension")).scalars())


def _columns(engine: Engine) -> dict[str, set[str]]:
    with engine.connect() as conn:
        rows = conn.execute(text("""
            SELECT table_name, column_name FROM information_schema.columns
            WHERE table_schema = 'public'""")).all()
    columns: dict[str, set[str]] = {}
    for table, column in rows:
        columns.setdefault(table, set()).add(column)
    return columns


def test_upgrade_from_empty_creates_the_schema(fresh_db: Any) -> None:
    _, engine = fresh_db()
    assert _tables(engine) == set()
    assert migrations.current_revision(engine) is None

    migrations.upgrade(engine)

    assert _tables(engine) == TABLES | {"alembic_version"}
    assert {"vector", "pg_trgm"} <= _extensions(engine)
    assert migrations.current_revision(engine) == HEAD

    indexes = _indexes(engine)
    hnsw = indexes["ix_memories_embedding_hnsw"]
    assert "USING hnsw (embedding vector_cosine_ops)" in hnsw
    assert "ON public.memories" in hnsw
    assert "USING gin (memoryd_agent_lexemes((agent_id)::text, tsv))" in (
        indexes["ix_memories_agent_lexemes"])
    assert "ix_memories_agent_tsv" not in indexes
    assert indexes["uq_memories_agent_hash"].startswith("CREATE UNIQUE INDEX")
    assert "(agent_id, content_hash)" in indexes["uq_memories_agent_hash"]
    assert indexes["uq_memories_agent_key"].startswith("CREATE UNIQUE INDEX")
    assert "(agent_id, key) WHERE ((key IS NOT NULL) AND (valid_to IS NULL))" in (
        indexes["uq_memories_agent_key"])
    assert "(agent_id, content_hash) WHERE (valid_to IS NULL)" in (
        indexes["uq_memories_agent_hash"])
    assert "(agent_id, content_norm_hash)" in indexes["ix_memories_agent_norm_hash"]
    for index in ("ix_memories_agent_created", "ix_memories_agent_accessed",
                  "ix_memories_expires", "memories_pkey", "sessions_pkey",
                  "kg_entities_pkey", "kg_relations_pkey", "memory_links_pkey"):
        assert index in indexes

    with engine.connect() as conn:
        generated = dict(conn.execute(text("""
            SELECT column_name, is_generated FROM information_schema.columns
            WHERE table_name = 'memories' AND is_generated = 'ALWAYS'""")).all())
        dimension = conn.execute(text("""
            SELECT atttypmod FROM pg_attribute
            WHERE attrelid = 'memories'::regclass AND attname = 'embedding'""")).scalar_one()
    assert set(generated) == {"tsv", "content_norm_hash"}
    assert dimension == 384
    with engine.connect() as conn:
        stored = conn.execute(text("""
            SELECT column_name FROM information_schema.columns
            WHERE table_name = 'memories' AND is_generated = 'NEVER'
            ORDER BY ordinal_position""")).scalars().all()
    # Every statement that copies whole rows (restore, repair) takes its columns from this.
    assert tuple(stored) == STORED_COLUMNS


def test_upgrade_twice_is_a_no_op(fresh_db: Any) -> None:
    _, engine = fresh_db()
    migrations.upgrade(engine)
    _insert(engine, ["kept across re-runs"])
    schema = (_tables(engine), _indexes(engine), _columns(engine))

    migrations.upgrade(engine)

    assert migrations.current_revision(engine) == HEAD
    assert (_tables(engine), _indexes(engine), _columns(engine)) == schema
    with engine.connect() as conn:
        assert conn.execute(text("SELECT content FROM memories")).scalars().all() == [
            "kept across re-runs"]
        assert conn.execute(text("SELECT count(*) FROM alembic_version")).scalar_one() == 1


def _migrate_in_own_process(url: str, barrier: Any) -> None:
    engine = make_engine(url, pool_size=1)
    try:
        barrier.wait(timeout=60)
        migrations.upgrade(engine)
    finally:
        engine.dispose()


@pytest.mark.slow
def test_concurrent_upgrades_from_processes_all_succeed(fresh_db: Any) -> None:
    url, engine = fresh_db()
    processes = 4
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    workers = [ctx.Process(target=_migrate_in_own_process, args=(url, barrier))
               for _ in range(processes)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert [worker.exitcode for worker in workers] == [0] * processes

    assert migrations.current_revision(engine) == HEAD
    assert _tables(engine) == TABLES | {"alembic_version"}
    assert "ix_memories_embedding_hnsw" in _indexes(engine)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM alembic_version")).scalar_one() == 1


def test_downgrade_to_base_removes_the_tables(fresh_db: Any) -> None:
    _, engine = fresh_db()
    migrations.upgrade(engine)
    assert _tables(engine) >= TABLES

    migrations.downgrade(engine, "base")

    assert _tables(engine) & TABLES == set()
    assert migrations.current_revision(engine) is None
    # and it can come back
    migrations.upgrade(engine)
    assert _tables(engine) >= TABLES
    assert migrations.current_revision(engine) == HEAD


def test_models_mirror_the_migrated_tables(fresh_db: Any) -> None:
    _, engine = fresh_db()
    migrations.upgrade(engine)
    migrated = _columns(engine)
    migrated.pop("alembic_version")

    modelled = {name: {column.name for column in table.columns}
                for name, table in Base.metadata.tables.items()}
    assert set(modelled) == set(migrated)
    for table, columns in migrated.items():
        assert modelled[table] == columns, table


def test_models_agree_on_nullability(fresh_db: Any) -> None:
    _, engine = fresh_db()
    migrations.upgrade(engine)
    with engine.connect() as conn:
        rows = conn.execute(text("""
            SELECT table_name, column_name, is_nullable FROM information_schema.columns
            WHERE table_schema = 'public' AND table_name <> 'alembic_version'""")).all()
    migrated = {(t, c): nullable == "YES" for t, c, nullable in rows}
    mismatches = [(name, column.name)
                  for name, table in Base.metadata.tables.items() for column in table.columns
                  if column.nullable != migrated[(name, column.name)]]
    assert mismatches == []


def test_memories_leave_room_for_hot_updates(fresh_db: Any) -> None:
    _, engine = fresh_db()
    migrations.upgrade(engine)
    with engine.connect() as conn:
        options = conn.execute(text(
            "SELECT reloptions FROM pg_class WHERE relname = 'memories'")).scalar_one()
    assert "fillfactor=70" in options


def test_access_tracking_index_is_summarizing(fresh_db: Any) -> None:
    # BRIN keeps access bumps HOT: no re-insert into the HNSW graph.
    _, engine = fresh_db()
    migrations.upgrade(engine)
    with engine.connect() as conn:
        methods = dict(conn.execute(text("""
            SELECT c.relname, a.amname FROM pg_class c JOIN pg_am a ON a.oid = c.relam
            WHERE c.relname IN ('ix_memories_updated', 'ix_memories_agent_accessed')
        """)).all())
    # updated_at keeps its btree: consolidate's merge sweep walks it in order, and no
    # maintenance update sets it unless content changes.
    assert methods == {"ix_memories_updated": "btree", "ix_memories_agent_accessed": "brin"}


# Content whose normalized form (lowercased, punctuation and space runs made one space,
# trimmed) is the same, per group; "?!" and " " normalize to nothing.
_NORMALIZED_GROUPS = [["Hello, World!", "hello world", "  HELLO   world. ", "hello-world"],
                      ["Ship on Fridays", "SHIP ON FRIDAYS.", "ship, on fridays"],
                      ["hello worlds"]]


def _insert(engine: Engine, contents: list[str], agent: str = "a") -> None:
    """Rows as the schema at the current revision takes them (the model is named from
    revision 0012 on)."""
    with engine.begin() as conn:
        named = "embedding_model" in _columns(engine).get("memories", {})
        for content in contents:
            conn.execute(text(f"""
                INSERT INTO memories (agent_id, content, content_hash, category, importance,
                                      embedding{", embedding_model" if named else ""})
                VALUES (:a, :c, md5(:c), 'fact', 0.5,
                        CAST(array_fill(0.1, ARRAY[384]) AS vector)
                        {", 'minilm'" if named else ""})"""), {"c": content, "a": agent})


def test_upgrade_to_0012_records_the_configured_model_of_existing_memories(
        fresh_db: Any) -> None:
    _, engine = fresh_db()
    migrations.upgrade(engine, "0011")
    _insert(engine, ["stored before the model was recorded"])
    with engine.begin() as conn:
        conn.execute(text("""
            INSERT INTO evicted_memories (memory_id, agent_id, reason, data, embedding)
            VALUES (gen_random_uuid(), 'a', 'age', '{"content": "evicted before"}',
                    CAST(array_fill(0.1, ARRAY[384]) AS vector))"""))
    migrations.upgrade(engine)
    with engine.begin() as conn:
        models = conn.execute(text("SELECT embedding_model FROM memories")).scalars().all()
        evicted = conn.execute(text(
            "SELECT embedding_model FROM evicted_memories")).scalars().all()
        default = conn.execute(text("""
            SELECT column_default FROM information_schema.columns
            WHERE table_name = 'memories' AND column_name = 'embedding_model'""")).scalar()
    assert models == evicted == ["minilm"]  # the tests' configuration: MEMORYD_EMBED_INT8 off
    assert default is None  # every writer names its model from now on


def _norm_hashes(engine: Engine) -> dict[str, Any]:
    with engine.connect() as conn:
        return dict(conn.execute(text(
            "SELECT content, content_norm_hash FROM memories")).all())


def test_upgrade_from_0003_computes_the_normalized_hash_of_existing_rows(
        fresh_db: Any) -> None:
    from memoryd.memory.maintenance.deduplicate import normalized

    _, engine = fresh_db()
    migrations.upgrade(engine, "0003")
    _insert(engine, [c for group in _NORMALIZED_GROUPS for c in group] + ["?!", " "])

    migrations.upgrade(engine)

    hashes = _norm_hashes(engine)
    assert hashes["?!"] is None and hashes[" "] is None
    per_group = [{hashes[c] for c in group} for group in _NORMALIZED_GROUPS]
    assert all(len(group) == 1 and None not in group for group in per_group)
    assert len(set.union(*per_group)) == len(_NORMALIZED_GROUPS)
    # It is the md5 of exactly what deduplicate compares.
    with engine.connect() as conn:
        mismatched = conn.execute(text(f"""
            SELECT count(*) FROM memories m
            WHERE m.content_norm_hash IS DISTINCT FROM
                  CAST(md5(nullif({normalized("m")}, '')) AS uuid)""")).scalar_one()
    assert mismatched == 0


def test_normalized_hash_follows_content_edits_only(fresh_db: Any) -> None:
    _, engine = fresh_db()
    migrations.upgrade(engine)
    _insert(engine, ["Hello, World!"])
    before = _norm_hashes(engine)["Hello, World!"]
    with engine.begin() as conn:
        conn.execute(text("UPDATE memories SET confidence = 0.5, access_count = 3"))
    assert _norm_hashes(engine) == {"Hello, World!": before}
    with engine.begin() as conn:
        conn.execute(text("UPDATE memories SET content = 'hello world'"))
    assert _norm_hashes(engine) == {"hello world": before}
    with engine.begin() as conn:
        conn.execute(text("UPDATE memories SET content = 'Goodbye.'"))
    assert _norm_hashes(engine)["Goodbye."] not in (None, before)


def test_downgrade_to_0003_drops_the_normalized_hash(fresh_db: Any) -> None:
    _, engine = fresh_db()
    migrations.upgrade(engine)
    _insert(engine, ["Hello, World!"])
    migrations.downgrade(engine, "0003")
    assert "content_norm_hash" not in _columns(engine)["memories"]
    assert "ix_memories_agent_norm_hash" not in _indexes(engine)
    migrations.upgrade(engine)
    assert _norm_hashes(engine)["Hello, World!"] is not None


def test_evicted_memories_keep_their_embedding_inline(fresh_db: Any) -> None:
    # A moved memory is just over the 2 KB TOAST threshold: with the default target its
    # embedding went to the TOAST table (two heap rows and an index entry per eviction).
    _, engine = fresh_db()
    migrations.upgrade(engine)
    with engine.begin() as conn:
        options = conn.execute(text(
            "SELECT reloptions FROM pg_class WHERE relname = 'evicted_memories'")).scalar_one()
        conn.execute(text("""
            INSERT INTO evicted_memories (memory_id, agent_id, reason, data, embedding)
            SELECT gen_random_uuid(), 'a', 'age',
                   jsonb_build_object('content', (SELECT string_agg(md5(random()::text), '')
                                                  FROM generate_series(1, 20) WHERE i > 0)),
                   CAST(array_fill(0.1, ARRAY[384]) AS vector)
            FROM generate_series(1, 20) AS i"""))
        toasted = conn.execute(text("""
            SELECT pg_relation_size(reltoastrelid) FROM pg_class
            WHERE relname = 'evicted_memories'""")).scalar_one()
    assert "toast_tuple_target=4096" in options
    assert toasted == 0


def _storage(engine: Engine) -> dict[str, str]:
    with engine.begin() as conn:
        return {r.attname: r.attstorage for r in conn.execute(text("""
            SELECT attname, attstorage FROM pg_attribute
            WHERE attrelid = 'memories'::regclass AND attname IN ('embedding', 'tsv')"""))}


def test_long_memories_keep_embedding_and_lexemes_in_the_row(fresh_db: Any) -> None:
    # Recall reads every embedding and tsvector of a small agent: out of line, each cost
    # a TOAST lookup. A long content is the value that moves out instead.
    _, engine = fresh_db()
    migrations.upgrade(engine)
    _insert(engine, [" ".join(hashlib.md5(f"{i}-{j}".encode()).hexdigest()
                              for i in range(40)) for j in range(3)])
    with engine.begin() as conn:
        row = conn.execute(text("""
            SELECT count(*) AS n,
                   count(pg_column_toast_chunk_id(embedding)) AS embedding_out,
                   count(pg_column_toast_chunk_id(tsv)) AS tsv_out,
                   count(pg_column_toast_chunk_id(content)) AS content_out
            FROM memories""")).one()
    assert _storage(engine) == {"embedding": "m", "tsv": "m"}
    assert (row.n, row.embedding_out, row.tsv_out, row.content_out) == (3, 0, 0, 3)


def test_downgrade_to_0004_restores_default_storage(fresh_db: Any) -> None:
    _, engine = fresh_db()
    migrations.upgrade(engine)
    migrations.downgrade(engine, "0004")
    assert _storage(engine) == {"embedding": "e", "tsv": "x"}


def test_agent_lexemes_prefix_each_lexeme_with_the_agent_key(fresh_db: Any) -> None:
    # One GIN posting list per (agent, lexeme); over-long lexemes are left out so that
    # the prefix can never exceed tsvector's lexeme limit (the insert must not fail).
    _, engine = fresh_db()
    migrations.upgrade(engine)
    long_word = "x" * 1500
    _insert(engine, [f"Cats chase {long_word} mice"])
    with engine.begin() as conn:
        keys, prefix, plain = conn.execute(text("""
            SELECT tsvector_to_array(memoryd_agent_lexemes(agent_id, tsv)),
                   left(md5(agent_id), 12), tsvector_to_array(tsv) FROM memories""")).one()
    assert long_word in plain
    assert sorted(keys) == sorted(prefix + lexeme for lexeme in plain if lexeme != long_word)


def test_downgrade_to_0005_restores_the_agent_tsvector_index(fresh_db: Any) -> None:
    _, engine = fresh_db()
    migrations.upgrade(engine)
    migrations.downgrade(engine, "0005")
    indexes = _indexes(engine)
    assert "USING gin (agent_id, tsv)" in indexes["ix_memories_agent_tsv"]
    assert "ix_memories_agent_lexemes" not in indexes
    migrations.upgrade(engine)
    assert "ix_memories_agent_lexemes" in _indexes(engine)


def test_lexeme_index_keeps_no_pending_list(
        fresh_db: Any, pg_server: EmbeddedPostgres) -> None:
    # Every search would read the whole pending list: inserts go into the index itself.
    url, engine = fresh_db()
    migrations.upgrade(engine)
    _insert(engine, [f"Pending list check number {i}" for i in range(50)])
    # pgstattuple is the superuser's to install and to read.
    owner = make_engine(pg_server.owner_url(make_url(url).database or ""), pool_size=1)

    def state() -> tuple[Any, int]:
        with owner.begin() as conn:
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS pgstattuple"))
            options = conn.execute(text(
                "SELECT reloptions FROM pg_class WHERE relname = 'ix_memories_agent_lexemes'"
            )).scalar_one()
            pending = conn.execute(text(
                "SELECT pending_tuples FROM pgstatginindex('ix_memories_agent_lexemes')"
            )).scalar_one()
        return options, int(pending)

    assert state() == (["fastupdate=off"], 0)
    migrations.downgrade(engine, "0007")
    _insert(engine, [f"Pending again number {i}" for i in range(50)])
    assert state()[0] is None and state()[1] > 0  # the default: a pending list
    migrations.upgrade(engine)
    assert state() == (["fastupdate=off"], 0)  # and the upgrade merged it
    owner.dispose()
