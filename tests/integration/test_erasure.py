"""Erasing one agent (``memoryd forget-agent``, ``MemoryClient.forget_agent``, ``DELETE
/v1/agents/{agent}``) on the real PostgreSQL, worker and gateway.

Two agents fill every table memoryd has; one is erased. What "every table" means is
read from the database's catalog, not from a list here, so a table added later is
checked too: no column named like ``agent`` holds the erased id, no row of any table
holds a word of its contents or its id, no index names it, and the other agent's rows
are exactly as they were."""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import redis
from sqlalchemy import text

from memoryd.client import MemoryClient
from memoryd.config import override_settings
from memoryd.memory import dead_letters, erasure
from memoryd.memory.agent_indexes import existing_indexes, index_name
from memoryd.memory.maintenance import restore, run_job
from memoryd.memory.maintenance.evicting import evict_ids
from memoryd.memory.store import MemoryStore
from memoryd.types import Erasure
from tests.support.cli import as_json, memoryd
from tests.support.gateway import bearer, make_key
from tests.support.maint import bulk_insert
from tests.support.workers import redis_db_url

pytestmark = pytest.mark.slow

LEAVER, STAYER = "leaver-7f3a/scout", "stayer-2b9c"
# A word of the leaver's contents that PostgreSQL's stemmer keeps as it is, so its term
# counts carry it too.
CANARY = "qxzv7731"
BULK = 24  # the leaver's bulk memories: past the lowered own-index line (20)
MEMORIES = 3 + BULK  # of _fill's four, one was merged away (evicted)


# --- filling every table for two agents ---------------------------------------------------

@pytest.fixture
def filled(store: MemoryStore, pg_url: str) -> Iterator[MemoryStore]:
    """Both agents in every table; the leaver large enough for an index of its own."""
    with override_settings(agent_index_min_memories="20"):
        indexing = MemoryStore(pg_url)
    try:
        for agent in (LEAVER, STAYER):
            _fill(indexing, agent, CANARY if agent == LEAVER else "plainword")
        bulk_insert(indexing, LEAVER, BULK, prefix=f"{CANARY} note")
        assert run_job(indexing, "index_agents").status == "ok"
        _fleet_runs(indexing)
        yield indexing
    finally:
        indexing.close()  # the next test's store fixture drops what index is left


def _fill(store: MemoryStore, agent: str, word: str) -> None:
    ids = [store.store(agent, f"{agent} said the {word} code {i} opens the shed.",
                       session_id=f"{word}-session", key=f"{word}-key-{i}").id
           for i in range(4)]
    store.kg_add(agent, {"id": f"{word}-person", "attributes": {"note": word},
                         "relations": [{"target": f"{word}-home", "type": "lives_at"}]})
    with store.session() as session:
        session.execute(text("INSERT INTO memory_links (agent_id, source_id, target_id, kind) "
                             "VALUES (:a, :s, :t, 'related')"),
                        {"a": agent, "s": ids[0], "t": ids[1]})
        evict_ids(session, [ids[2]], "merged", None)  # a merged-away copy
        evict_ids(session, [ids[3]], "expired", None)
        eviction = session.execute(text("SELECT eviction_id FROM evicted_memories "
                                         "WHERE memory_id = :m"), {"m": ids[3]}).scalar_one()
        dead_letters.record(session, task_id=str(uuid.uuid4()), task_name="memoryd.store",
                            queue="memory", agent_id=agent, deliveries=6, args=[],
                            kwargs={"agent_id": agent, "content": f"the {word} letter"})
        # A hand-made message: the agent only as the first positional argument.
        dead_letters.record(session, task_id=str(uuid.uuid4()), task_name="memoryd.store",
                            queue="memory", agent_id=None, deliveries=6,
                            args=[agent, f"the positional {word} letter"], kwargs={})
    restore(store, int(eviction))  # leaves a restored_evictions record
    assert run_job(store, "expire", agent_id=agent).status == "ok"
    make_key(store, agents=(agent,))


def _fleet_runs(store: MemoryStore) -> None:
    """Fleet-wide audit rows that name agents: a checkpoint's keyset, an error's text."""
    rows = [("reembed", {"checkpoint": {"agent": LEAVER, "id": "x"}, "reembedded": 3}, None),
            ("reembed", {"checkpoint": {"agent": STAYER, "id": "y"}}, None),
            ("deduplicate", {"merged": 1},
             f"IntegrityError: Key (agent_id, key)=({LEAVER}, {CANARY}-key-1) exists")]
    with store.session() as session:
        for job, stats, error in rows:
            session.execute(text(
                "INSERT INTO maintenance_runs (job, status, stats, error, finished_at) "
                "VALUES (:j, 'ok', CAST(:s AS jsonb), :e, now())"),
                {"j": job, "s": json.dumps(stats), "e": error})
    make_key(store, agents=(LEAVER, STAYER))
    make_key(store, prefixes=("",), admin=True)


# --- what the catalog says is left -----------------------------------------------------------

def _tables(session: Any) -> list[str]:
    return list(session.execute(text(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = "
        "current_schema() AND table_type = 'BASE TABLE' ORDER BY 1")).scalars())


def agent_column_rows(store: MemoryStore, agent: str) -> dict[str, int]:
    """Rows per ``table.column`` whose agent column (any column named like ``agent``,
    found in the catalog) holds ``agent``, or lists it."""
    found: dict[str, int] = {}
    with store.session() as session:
        columns = session.execute(text(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND column_name LIKE '%agent%'")).all()
        assert {c.table_name for c in columns} >= {"memories", "dead_letters", "api_keys"}
        for table, column, kind in columns:
            match = (f'CAST(:a AS text) = ANY(CAST("{column}" AS text[]))' if kind == "ARRAY"
                     else f'CAST("{column}" AS text) = :a')
            n = session.execute(text(f'SELECT count(*) FROM "{table}" WHERE {match}'),
                                {"a": agent}).scalar_one()
            if n:
                found[f"{table}.{column}"] = int(n)
    return found


def rows_containing(store: MemoryStore, needle: str) -> dict[str, int]:
    """Rows per table (every table of the schema) whose text, all columns, holds ``needle``."""
    found: dict[str, int] = {}
    with store.session() as session:
        for table in _tables(session):
            n = session.execute(text(f'SELECT count(*) FROM "{table}" t '
                                     "WHERE strpos(CAST(t AS text), :n) > 0"),
                                {"n": needle}).scalar_one()
            if n:
                found[table] = int(n)
    return found


def indexes_naming(store: MemoryStore, agent: str) -> list[str]:
    with store.session() as session:
        return list(session.execute(text(
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
            "AND strpos(indexdef, :a) > 0"), {"a": agent}).scalars())


def snapshot(store: MemoryStore, agent: str) -> dict[str, list[str]]:
    """Every row naming ``agent``, as text, per table (keys apart: the key shared with
    the erased agent changes, on purpose)."""
    rows: dict[str, list[str]] = {}
    with store.session() as session:
        for table in _tables(session):
            if table != "api_keys":
                rows[table] = sorted(session.execute(text(
                    f'SELECT CAST(t AS text) FROM "{table}" t '
                    "WHERE strpos(CAST(t AS text), :a) > 0"), {"a": agent}).scalars())
    return rows


def key_agents(store: MemoryStore) -> list[list[str]]:
    with store.session() as session:
        return sorted(list(r) for r in session.execute(text(
            "SELECT agents FROM api_keys")).scalars())


def assert_erased(store: MemoryStore) -> None:
    assert agent_column_rows(store, LEAVER) == {}
    assert rows_containing(store, CANARY) == {}
    assert rows_containing(store, LEAVER) == {}
    assert indexes_naming(store, LEAVER) == []
    assert index_name(LEAVER) not in _index_names(store)


def _index_names(store: MemoryStore) -> set[str]:
    with store.engine.connect() as conn:
        return set(existing_indexes(conn))


def _audit(store: MemoryStore) -> list[Any]:
    with store.session() as session:
        return list(session.execute(text(
            "SELECT id, status, agent_id, params, stats, error FROM maintenance_runs "
            "WHERE job = 'forget_agent' ORDER BY id")))


# --- the domain function ------------------------------------------------------------------

def test_an_erased_agent_leaves_no_row_in_any_table_and_the_other_agent_is_untouched(
        filled: MemoryStore) -> None:
    store = filled
    assert index_name(LEAVER) in _index_names(store)  # the large agent had its own index
    assert {"memories.agent_id", "evicted_memories.agent_id", "dead_letters.agent_id",
            "agent_terms.agent_id", "api_keys.agents"} <= set(agent_column_rows(store, LEAVER))
    assert "restored_evictions" in rows_containing(store, str(_restored_memory(store)))
    kept = snapshot(store, STAYER)
    before = erasure.preview(store, LEAVER)
    assert before.deleted["memories"] == MEMORIES and before.index_dropped

    done = erasure.forget_agent(store, LEAVER, batch_size=2)

    assert done.complete and done.index_dropped
    assert (done.deleted, done.scrubbed) == (before.deleted, before.scrubbed)
    assert done.deleted["memories"] == MEMORIES and done.deleted["evicted_memories"] == 1
    assert done.deleted["dead_letters"] == 2 and done.deleted["restored_evictions"] == 1
    assert done.deleted["api_keys"] == 1 and done.scrubbed["api_keys"] == 1
    assert done.scrubbed["maintenance_runs"] == 2
    assert_erased(store)
    assert snapshot(store, STAYER) == kept
    assert [agents for agents in key_agents(store) if agents] == [[STAYER], [STAYER]]
    assert store.list(STAYER).total == 3

    [audit] = _audit(store)
    assert (audit.status, audit.agent_id, audit.error) == ("ok", None, None)
    assert audit.params == {"agent_sha256": hashlib.sha256(LEAVER.encode()).hexdigest()}
    assert audit.stats["deleted"] == done.deleted and audit.stats["complete"] is True
    with store.session() as session:
        scrubbed = {r.error or json.dumps(r.stats, sort_keys=True) for r in session.execute(
            text("SELECT stats, error FROM maintenance_runs "
                 "WHERE job IN ('reembed', 'deduplicate')"))}
    assert scrubbed == {'{"reembedded": 3}', json.dumps({"checkpoint": {"agent": STAYER,
                                                                         "id": "y"}}),
                        erasure.ERROR_REMOVED}


def _restored_memory(store: MemoryStore) -> uuid.UUID:
    with store.session() as session:
        return session.execute(text(
            "SELECT r.memory_id FROM restored_evictions r JOIN memories m "
            "ON m.id = r.memory_id WHERE m.agent_id = :a"), {"a": LEAVER}).scalar_one()


def test_erasing_an_erased_agent_again_changes_nothing(filled: MemoryStore) -> None:
    erasure.forget_agent(filled, LEAVER)
    kept = snapshot(filled, STAYER)
    again = erasure.forget_agent(filled, LEAVER)
    assert again.complete and not again.index_dropped
    assert set(again.deleted.values()) == {0} and set(again.scrubbed.values()) == {0}
    assert snapshot(filled, STAYER) == kept
    assert [a.status for a in _audit(filled)] == ["ok", "ok"]


def test_an_erasure_cut_short_goes_on_where_it_stopped_when_run_again(
        filled: MemoryStore) -> None:
    store = filled
    expected = erasure.preview(store, LEAVER)
    # What a killed run leaves: its audit row still 'running'.
    with store.session() as session:
        session.execute(text(
            "INSERT INTO maintenance_runs (job, params, status) VALUES ('forget_agent', "
            "jsonb_build_object('agent_sha256', CAST(:h AS text)), 'running')"),
            {"h": erasure.agent_digest(LEAVER)})
    parts = []
    while not parts or not parts[-1].complete:
        parts.append(erasure.forget_agent(store, LEAVER, batch_size=3, time_budget_s=0))
        assert len(parts) < 200
    assert len(parts) > 5 and not any(p.index_dropped for p in parts[:-1])
    assert parts[-1].index_dropped
    for table, n in expected.deleted.items():
        assert sum(p.deleted[table] for p in parts) == n, table
    assert_erased(store)
    audit = _audit(store)
    assert audit[0].status == "failed" and audit[0].error == erasure.INTERRUPTED
    assert [a.stats["complete"] for a in audit[1:]] == [False] * (len(parts) - 1) + [True]


def test_a_preview_changes_nothing(filled: MemoryStore) -> None:
    kept = {agent: snapshot(filled, agent) for agent in (LEAVER, STAYER)}
    seen = erasure.preview(filled, LEAVER)
    assert seen.run_id is None and not seen.complete and seen.deleted["sessions"] == 1
    assert {agent: snapshot(filled, agent) for agent in (LEAVER, STAYER)} == kept
    assert _audit(filled) == []


# --- the surfaces: a worker, the gateway, the command line --------------------------------

def test_the_client_erases_an_agent_on_a_worker(
        filled: MemoryStore, client: MemoryClient, worker: Any) -> None:
    kept = snapshot(filled, STAYER)
    done = client.forget_agent(LEAVER, timeout=120)
    assert isinstance(done, Erasure) and done.complete and done.index_dropped
    assert done.deleted["memories"] == MEMORIES
    assert_erased(filled)
    assert snapshot(filled, STAYER) == kept
    again = client.forget_agent(LEAVER, timeout=120)
    assert isinstance(again, Erasure) and set(again.deleted.values()) == {0}


FOLLOW_UP_DB = 4  # the follow-up test's own broker database


def test_a_worker_out_of_time_leaves_the_rest_to_follow_up_tasks(
        filled: MemoryStore, spawn_worker: Callable[..., Any], redis_url: str) -> None:
    broker = redis_db_url(redis_url, FOLLOW_UP_DB)
    redis.Redis.from_url(broker).flushdb()
    spawn_worker(FOLLOW_UP_DB, concurrency=1, queues="memory", MEMORYD_PRELOAD_MODELS="false",
                 MEMORYD_MAINTENANCE_TIME_BUDGET_S="0.001",
                 MEMORYD_MAINTENANCE_BATCH_SIZE="3").wait_ready()
    kept = snapshot(filled, STAYER)
    with MemoryClient(broker_url=broker, timeout=120) as client:
        first = client.forget_agent(LEAVER)
    assert isinstance(first, Erasure) and not first.complete
    deadline = time.monotonic() + 180
    while not any(run.stats.get("complete") for run in _audit(filled)):
        assert time.monotonic() < deadline, _audit(filled)
        time.sleep(0.5)
    assert len(_audit(filled)) > 2
    assert_erased(filled)
    assert snapshot(filled, STAYER) == kept


def test_only_an_admin_key_with_write_erases_an_agent_over_http(
        filled: MemoryStore, http: httpx.Client) -> None:
    store = filled
    kept = {agent: snapshot(store, agent) for agent in (LEAVER, STAYER)}
    refused = [make_key(store, agents=(LEAVER,)),
               make_key(store, prefixes=("",)),
               make_key(store, prefixes=("",), admin=True, read_only=True)]
    for key in refused:
        answer = http.delete(f"/v1/agents/{LEAVER}", headers=bearer(key))
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"]["type"] == "forbidden"
    admin = bearer(make_key(store, prefixes=("",), admin=True))
    for path, field in ((f"/v1/agents/{'x' * 300}", "agent_id"),
                        ("/v1/agents/bad%01agent", "agent_id"),
                        (f"/v1/agents/{LEAVER}/memories", "agent_id")):
        answer = http.delete(path, headers=admin)
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["field"] == field
    assert {agent: snapshot(store, agent) for agent in (LEAVER, STAYER)} == kept

    done = http.delete(f"/v1/agents/{LEAVER}", headers=admin)
    assert done.status_code == 200, done.text
    assert done.json()["complete"] is True
    assert done.json()["deleted"]["memories"] == MEMORIES
    assert_erased(store)
    assert snapshot(store, STAYER) == kept[STAYER]
    # Not the leaver: the queued erasure may run while the next test fills it again.
    queued = http.delete(f"/v1/agents/nobody-{uuid.uuid4()}", headers=admin,
                         params={"wait": "false"})
    assert queued.status_code == 202, queued.text
    assert queued.json()["job"] == "forget_agent" and queued.json()["task_id"]


def test_the_command_line_shows_what_would_go_and_erases_only_with_yes(
        filled: MemoryStore, service_env: dict[str, str], client: MemoryClient,
        worker: Any) -> None:
    kept = {agent: snapshot(filled, agent) for agent in (LEAVER, STAYER)}
    asked = memoryd(service_env, "forget-agent", LEAVER, check=False)
    assert asked.returncode == 2 and "--yes" in asked.stderr
    assert "memories" in asked.stdout and str(MEMORIES) in asked.stdout
    shown = memoryd(service_env, "forget-agent", LEAVER, "--json", check=False)
    assert json.loads(shown.stdout)["deleted"]["memories"] == MEMORIES
    assert {agent: snapshot(filled, agent) for agent in (LEAVER, STAYER)} == kept

    erased = memoryd(service_env, "forget-agent", LEAVER, "--yes", "--json")
    done = as_json(erased)
    assert done["complete"] is True and done["deleted"]["memories"] == MEMORIES
    assert_erased(filled)
    assert snapshot(filled, STAYER) == kept[STAYER]
    # The rest (the agent's stored results, the broker's files) is a worker's: the task
    # it was given is named, and followed to its end here, so that it cannot erase what
    # the next test stores for the same agent.
    given = re.search(r"a worker deletes the agent's task results and compacts the "
                      r"broker's files \(task ([0-9a-f-]{36})\)", erased.stderr)
    assert given, erased.stderr
    assert LEAVER not in erased.stderr
    rest = client.pending(given.group(1), "forget_agent", agent_id=LEAVER).get(timeout=120)
    assert rest.complete and set(rest.deleted.values()) == {0}


def test_an_agent_id_of_pattern_characters_is_found_as_a_whole_word_only(
        store: MemoryStore) -> None:
    odd = "team (a)/[b]*.x+?|^$\\ ü#&~'"
    store.store(odd, "The odd agent's note.")
    errors = {odd: f"ValueError: agent <{odd}> refused", odd + "0": f"ValueError: {odd}0 kept",
              "x" + odd: f"ValueError: x{odd} kept"}
    with store.session() as session:
        for error in errors.values():
            session.execute(text("INSERT INTO maintenance_runs (job, status, error) "
                                 "VALUES ('evict', 'failed', :e)"), {"e": error})
    done = erasure.forget_agent(store, odd)
    assert done.deleted["memories"] == 1 and done.scrubbed["maintenance_runs"] == 1
    with store.session() as session:
        left = set(session.execute(text("SELECT error FROM maintenance_runs "
                                        "WHERE job = 'evict'")).scalars())
    assert left == {erasure.ERROR_REMOVED, errors[odd + "0"], errors["x" + odd]}
    assert agent_column_rows(store, odd) == {}
