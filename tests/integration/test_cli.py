"""The ``memoryd`` command as a user runs it: ``python -m memoryd ...`` subprocesses on
the test PostgreSQL and Redis, client commands answered by the session worker."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from memoryd.memory.store import MemoryStore
from tests.conftest import TEST_HOME
from tests.support.cli import as_json, memoryd
from tests.support.service_user import opened_for_service_user

pytestmark = pytest.mark.slow

UUID_RE = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


@pytest.fixture
def agent() -> str:
    return f"cli-{uuid.uuid4()}"


def test_migrate_is_idempotent(service_env: dict[str, str], store: MemoryStore) -> None:
    first = memoryd(service_env, "migrate")
    assert re.fullmatch(r"database at revision \S+\n", first.stdout)
    again = memoryd(service_env, "migrate")
    assert again.stdout == first.stdout
    with store.session() as session:
        version = session.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
    assert version in first.stdout


@pytest.mark.usefixtures("worker")
def test_store_recall_list_context_forget(service_env: dict[str, str], store: MemoryStore,
                                          agent: str) -> None:
    stored = memoryd(service_env, "store", agent, "The user prefers dark mode.",
                     "--category", "preference", "--tag", "ui", "--importance", "0.9",
                     "--metadata", "origin=cli")
    match = re.fullmatch(rf"stored ({UUID_RE})\n", stored.stdout)
    assert match, stored.stdout
    memory_id = match.group(1)
    with store.session() as session:
        row = session.execute(text(
            "SELECT agent_id, content, category, tags, metadata FROM memories WHERE id = :id"),
            {"id": memory_id}).one()
    assert tuple(row) == (agent, "The user prefers dark mode.", "preference", ["ui"],
                          {"origin": "cli"})

    again = as_json(memoryd(service_env, "store", agent, "The user prefers dark mode.",
                            "--json"))
    assert again == {"id": memory_id, "stored": False, "duplicate": True, "superseded": []}
    other = as_json(memoryd(service_env, "store", agent, "Deploys happen on Thursdays.",
                            "--json"))
    assert other["stored"] is True

    # Recall: a table for people...
    table = memoryd(service_env, "recall", agent, "which theme does the user like?").stdout
    lines = table.splitlines()
    assert lines[0].split() == ["score", "category", "id", "content"]
    assert set(lines[1]) <= {"-", " "}
    assert len(lines) == 4
    assert memory_id in lines[2] and "preference" in lines[2]
    assert lines[2].endswith("The user prefers dark mode.")
    float(lines[2].split()[0])
    # ... and JSON for scripts.
    hits = as_json(memoryd(service_env, "recall", agent, "which theme does the user like?",
                           "--json", "--limit", "1"))
    assert len(hits) == 1
    assert hits[0]["memory"]["id"] == memory_id
    assert set(hits[0]["components"]) == {"semantic", "keyword", "recency", "importance",
                                          "confidence", "context"}

    page = as_json(memoryd(service_env, "list", agent, "--json"))
    assert page["total"] == 2
    assert {m["id"] for m in page["items"]} == {memory_id, other["id"]}

    block = memoryd(service_env, "context", agent, "user interface theme").stdout
    assert block.startswith("## Relevant memories\n")
    assert "- The user prefers dark mode." in block

    forgotten = memoryd(service_env, "forget", agent, memory_id)
    assert forgotten.stdout == "forgotten\n"
    missing = memoryd(service_env, "forget", agent, memory_id, check=False)
    assert missing.returncode == 1 and missing.stdout == "no such memory\n"
    with store.session() as session:
        assert session.execute(text("SELECT id FROM memories WHERE agent_id = :a"),
                               {"a": agent}).scalars().all() == [uuid.UUID(other["id"])]


@pytest.mark.usefixtures("worker")
def test_client_command_validation_error_exits_2(service_env: dict[str, str]) -> None:
    done = memoryd(service_env, "recall", "", "query", check=False)
    assert done.returncode == 2
    assert done.stderr.strip().endswith("ValidationError: agent_id: must be a non-empty string")
    assert "Traceback" not in done.stderr


@pytest.mark.usefixtures("worker")
def test_store_takes_metadata_as_repeatable_key_values_and_prints_only_its_result(
        service_env: dict[str, str], store: MemoryStore, agent: str) -> None:
    stored = memoryd(service_env, "store", agent, "The atlas project ships in May.",
                     "--metadata", "project=atlas", "--metadata", "priority=2",
                     "--metadata", 'owners=["ana", "bo"]', "--metadata", "note=a=b {",
                     "--metadata", "flag=true")
    match = re.fullmatch(rf"stored ({UUID_RE})\n", stored.stdout)
    assert match, stored.stdout
    assert stored.stderr == ""
    with store.session() as session:
        metadata = session.execute(text("SELECT metadata FROM memories WHERE id = :id"),
                                   {"id": match.group(1)}).scalar_one()
    assert metadata == {"project": "atlas", "priority": 2, "owners": ["ana", "bo"],
                        "note": "a=b {", "flag": True}
    # The same pairs find it again through --where.
    hits = as_json(memoryd(service_env, "recall", agent, "when does atlas ship?", "--json",
                           "--where", "project=atlas", "--where", "priority=2"))
    assert [h["memory"]["id"] for h in hits] == [match.group(1)]

    bad = memoryd(service_env, "store", agent, "Another memory.", "--metadata", "project",
                  check=False)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr == "memoryd: error: ValidationError: metadata: expected NAME=VALUE\n"
    with store.session() as session:
        assert session.execute(text("SELECT count(*) FROM memories WHERE agent_id = :a"),
                               {"a": agent}).scalar_one() == 1


def test_jobs_run_takes_params_as_key_values_and_prints_only_its_result(
        service_env: dict[str, str], store: MemoryStore, agent: str) -> None:
    expired_id = _expired_memory(store, agent)
    done = memoryd(service_env, "jobs", "run", "evict", "--param", "max_age_days=60",
                   "--param", "cap=500", "--dry-run")
    assert re.fullmatch(r"evict: ok \(run (\d+)\) \{.*\}\n", done.stdout), done.stdout
    assert done.stderr == ""
    with store.session() as session:
        params = session.execute(text(
            "SELECT params FROM maintenance_runs WHERE job = 'evict'")).scalar_one()
    assert params == {"max_age_days": 60, "cap": 500}

    expired = memoryd(service_env, "jobs", "run", "expire", "--agent", agent, "--json")
    assert as_json(expired)["stats"]["expired"] == 1 and expired.stderr == ""
    assert expired_id not in _memory_ids(store, agent)


def test_a_wrong_job_parameter_or_job_name_is_refused_with_the_valid_ones(
        service_env: dict[str, str], store: MemoryStore) -> None:
    import inspect

    from memoryd.memory.maintenance.evict import evict
    from memoryd.schedules.names import JOB_NAMES

    wrong = memoryd(service_env, "jobs", "run", "evict", "--param", "max_age=60",
                    check=False)
    assert wrong.returncode == 2 and wrong.stdout == ""
    [line] = wrong.stderr.splitlines()
    assert line.startswith("memoryd: error: ValidationError: params.max_age: is not a "
                           "parameter of job 'evict'; its parameters: ")
    named = line.rpartition("its parameters: ")[2].split(", ")
    assert named == [*list(inspect.signature(evict).parameters)[1:], "batch_size"]
    with store.session() as session:  # refused before any run was recorded
        assert session.execute(text("SELECT count(*) FROM maintenance_runs")).scalar_one() == 0

    unknown = memoryd(service_env, "jobs", "run", "evicct", check=False)
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert "argument job: invalid choice; choose from " in unknown.stderr
    assert "evicct" not in unknown.stderr
    assert all(job in unknown.stderr for job in JOB_NAMES)
    usage = memoryd(service_env, "jobs", "run", "--help").stdout
    assert "--param NAME=VALUE" in usage and "JSON, else a string" in usage


CANARY = "sk-live-canary-4417"


@pytest.mark.parametrize(("argv", "said"), [
    (["jobs", "run", CANARY], "argument job: invalid choice; choose from "),
    (["jobs", "history", "--job", CANARY], "argument --job: invalid choice; choose from "),
    ([CANARY], "argument COMMAND: invalid choice; choose from "),
    (["dlq", "list", "--limit", CANARY], "argument --limit: must be an integer"),
    (["gateway", "--port", CANARY], "argument --port: must be an integer"),
    (["recall", "agent-1", "q", "--limit", CANARY], "argument --limit: must be an integer"),
    (["store", "agent-1", "x", "--importance", CANARY], "argument --importance: must be a number"),
    (["forget-agent", "agent-1", f"--yes={CANARY}"], "argument --yes: takes no value"),
    (["store", "agent-1", "x", f"--s={CANARY}"],
     "ambiguous option: could be --session-id, --source"),
    (["forget-agent", "agent-1", CANARY, f"--x={CANARY}"],
     "unrecognized arguments (not shown): see --help"),
])
def test_a_mistyped_command_line_names_the_argument_and_never_echoes_the_value(
        tmp_path: Path, argv: list[str], said: str) -> None:
    """argparse's refusals of a typed value name the argument and what it expects (a
    secret pasted in the wrong place stays off the terminal); status 2 and the usage
    line as before."""
    env = {"PATH": "/usr/bin:/bin", "MEMORYD_DATA_DIR": str(tmp_path / "data")}
    done = memoryd(env, *argv, check=False, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("usage: memoryd")
    assert said in done.stderr.splitlines()[-1], done.stderr
    assert CANARY not in done.stderr


def test_jobs_list_shows_each_job_with_its_queue_schedule_and_parameters(
        service_env: dict[str, str]) -> None:
    from memoryd.schedules.names import JOB_NAMES

    env = {**service_env, "MEMORYD_SCHEDULE_CORTEX": "off",
           "MEMORYD_SCHEDULE_EVICT": "15 2 * * *", "MEMORYD_MAINTENANCE_BATCH_SIZE": "321"}
    jobs = {job["job"]: job for job in as_json(memoryd(env, "jobs", "list", "--json"))}
    assert list(jobs) == list(JOB_NAMES)
    assert {job["queue"] for job in jobs.values()} == {"maintenance"}
    assert (jobs["cortex"]["schedule"], jobs["evict"]["schedule"]) == ("off", "15 2 * * *")
    assert jobs["expire"]["schedule"] == "0 * * * *"
    evict = {p["name"]: (p["type"], p["default"]) for p in jobs["evict"]["parameters"]}
    assert evict["max_age_days"] == ("float", 30) and evict["cap"] == ("int", 10000)
    assert evict["batch_size"] == ("int", 321)  # the setting's value
    assert [p["name"] for p in jobs["index_agents"]["parameters"]] == ["batch_size"]
    assert jobs["expire"]["description"] == "Remove memories whose expires_at has passed."

    human = memoryd(env, "jobs", "list")
    assert human.stderr == ""
    assert "evict: queue maintenance, schedule 15 2 * * * (UTC)\n" in human.stdout
    assert "cortex: queue maintenance, schedule off\n" in human.stdout
    assert re.search(r"^    merge\s+bool\s+true$", human.stdout, re.MULTILINE), human.stdout
    assert re.search(r"^    batch_size\s+int\s+321$", human.stdout, re.MULTILINE)


def test_evicted_list_shows_evictions_and_merges_with_their_survivor_and_restore_command(
        service_env: dict[str, str], store: MemoryStore, agent: str) -> None:
    from tests.support.maint import add, days_ago

    expired_id = _expired_memory(store, agent)
    loser = add(store, agent, "Hello, World!", created_at=days_ago(3))
    survivor = add(store, agent, "hello world", created_at=days_ago(2))
    other_agent = f"{agent}-other"
    add(store, other_agent, "Good bye, World!", created_at=days_ago(3))
    add(store, other_agent, "good bye world", created_at=days_ago(2))
    memoryd(service_env, "jobs", "run", "expire")
    memoryd(service_env, "jobs", "run", "deduplicate")

    rows = as_json(memoryd(service_env, "evicted", "list", "--agent", agent, "--json"))
    assert [(r["memory_id"], r["reason"], r["survivor_id"]) for r in rows] == [
        (str(loser), "duplicate", str(survivor)), (expired_id, "expired", None)]
    assert all("content" not in r and r["agent_id"] == agent for r in rows)
    assert rows[0]["eviction_id"] > rows[1]["eviction_id"]  # newest first
    assert all(r["restore"].endswith(f" restore {r['eviction_id']}") for r in rows)
    merged = as_json(memoryd(service_env, "evicted", "list", "--reason", "duplicate",
                             "--json"))
    assert {r["agent_id"] for r in merged} == {agent, other_agent}
    assert {r["reason"] for r in merged} == {"duplicate"}

    human = memoryd(service_env, "evicted", "list", "--agent", agent)
    assert human.stderr == ""
    lines = human.stdout.splitlines()
    assert lines[0].split() == ["eviction", "agent", "reason", "evicted", "memory", "survivor"]
    assert lines[2].split()[2:3] == ["duplicate"] and lines[2].endswith(str(survivor))
    assert "Hello" not in human.stdout and "reminder" not in human.stdout  # no contents
    assert lines[-1].endswith(f"restore {rows[0]['eviction_id']})")
    shown = memoryd(service_env, "evicted", "list", "--agent", agent, "--show-content")
    assert shown.stdout.splitlines()[0].split()[-1] == "content"
    assert "Hello, World!" in shown.stdout

    # The command printed restores the memory, run as printed.
    done = subprocess.run(["bash", "-c", rows[1]["restore"]], env=service_env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"restored {expired_id}\n", "")
    assert expired_id in _memory_ids(store, agent)
    left = as_json(memoryd(service_env, "evicted", "list", "--agent", agent, "--json"))
    assert [r["memory_id"] for r in left] == [str(loser)]


@pytest.mark.usefixtures("worker")
def test_a_worker_at_info_logs_no_line_per_task(worker: Any, client: Any, agent: str) -> None:
    before = worker.log_path.stat().st_size
    for i in range(20):
        client.store(agent, f"Quiet memory number {i}.")
    assert client.recall(agent, "quiet memory")  # each store finished before this ran
    with worker.log_path.open("rb") as log:
        log.seek(before)
        since = log.read().decode(errors="replace")
    # Celery's "Task memoryd.store[<id>] received" and "... succeeded in 0.01s".
    assert not re.search(r"Task memoryd\.\w+\[", since), since[-2000:]


def _expired_memory(store: MemoryStore, agent: str) -> str:
    past = datetime.now(UTC) - timedelta(days=1)
    store.store(agent, "A memory that is here to stay.")
    return str(store.store(agent, "A reminder for yesterday's meeting.", expires_at=past).id)


def _memory_ids(store: MemoryStore, agent: str) -> set[str]:
    with store.session() as session:
        return {str(i) for i in session.execute(
            text("SELECT id FROM memories WHERE agent_id = :a"), {"a": agent}).scalars()}


def test_jobs_run_history_and_restore(service_env: dict[str, str], store: MemoryStore,
                                      agent: str) -> None:
    expired_id = _expired_memory(store, agent)

    dry = as_json(memoryd(service_env, "jobs", "run", "expire", "--dry-run", "--json"))
    assert dry["job"] == "expire" and dry["status"] == "ok"
    assert dry["stats"]["expired"] == 1
    assert expired_id in _memory_ids(store, agent)  # a dry run changes nothing

    real = as_json(memoryd(service_env, "jobs", "run", "expire", "--agent", agent, "--json"))
    assert real["status"] == "ok" and real["stats"]["expired"] == 1
    assert expired_id not in _memory_ids(store, agent)
    assert len(_memory_ids(store, agent)) == 1

    human = memoryd(service_env, "jobs", "run", "expire").stdout
    assert re.fullmatch(r"expire: ok \(run \d+\) \{.*\"expired\": 0.*\}\n", human), human

    history = as_json(memoryd(service_env, "jobs", "history", "--json"))
    assert [(r["job"], r["status"], r["dry_run"], r["agent_id"]) for r in history] == [
        ("expire", "ok", False, None), ("expire", "ok", False, agent),
        ("expire", "ok", True, None)]
    assert history[1]["id"] == real["run_id"]
    assert history[1]["stats"]["expired"] == 1
    table = memoryd(service_env, "jobs", "history", "--job", "expire", "--limit", "1"
                    ).stdout.splitlines()
    assert table[0].split() == ["run", "job", "status", "agent", "started", "stats"]
    assert len(table) == 3 and " all " in table[2]

    restored = memoryd(service_env, "restore", expired_id)
    assert restored.stdout == f"restored {expired_id}\n"
    assert expired_id in _memory_ids(store, agent)
    with store.session() as session:
        assert session.execute(text("SELECT count(*) FROM evicted_memories")).scalar_one() == 0
        content = session.execute(text("SELECT content FROM memories WHERE id = :id"),
                                  {"id": expired_id}).scalar_one()
    assert content == "A reminder for yesterday's meeting."

    gone = memoryd(service_env, "restore", expired_id, check=False)
    assert gone.returncode == 2
    assert "NotFound" in gone.stderr and expired_id in gone.stderr


@pytest.mark.usefixtures("worker")
def test_status_shows_workers_queues_and_jobs(service_env: dict[str, str], store: MemoryStore,
                                              agent: str) -> None:
    from memoryd.memory.maintenance import run_job

    _expired_memory(store, agent)
    assert run_job(store, "expire").status == "ok"
    status = as_json(memoryd(service_env, "status", "--json"))
    assert "error" not in status
    assert any(name.startswith("memory-maintenance@") for name in status["workers"]), \
        status["workers"]
    assert status["queues"] == {"memory": 0, "maintenance": 0}
    assert status["jobs"]["expire"]["status"] == "ok"
    assert status["jobs"]["expire"]["stats"]["expired"] == 1

    human = memoryd(service_env, "status").stdout
    assert human.startswith("workers: memory")
    assert "queue memory: 0 waiting" in human
    assert re.search(r"^expire\s+ok\s", human, re.MULTILINE)
    assert re.search(r"^cortex\s+never", human, re.MULTILINE)


def test_status_with_an_unreachable_broker_is_a_status_not_a_crash(
        service_env: dict[str, str], store: MemoryStore) -> None:
    from memoryd.embedded._proc import free_port

    env = {**service_env, "MEMORYD_BROKER_URL": f"redis://127.0.0.1:{free_port()}/0"}
    status = as_json(memoryd(env, "status", "--json", timeout=120))
    assert status["workers"] == []
    assert status["error"].startswith("broker unreachable")


def test_stats(service_env: dict[str, str], store: MemoryStore, agent: str) -> None:
    store.store_many(agent, [{"content": "fact one"}, {"content": "fact two"},
                             {"content": "We chose Redis.", "category": "decision"}])
    store.store(f"{agent}-small", "only one")
    rows = as_json(memoryd(service_env, "stats", "--json"))
    assert rows == [
        {"agent_id": agent, "total": 3, "categories": {"decision": 1, "fact": 2}},
        {"agent_id": f"{agent}-small", "total": 1, "categories": {"fact": 1}},
    ]
    table = memoryd(service_env, "stats", "--limit", "1").stdout.splitlines()
    assert table[0].split() == ["agent", "category", "memories", "agent", "total"]
    assert len(table) == 4
    assert table[2].split() == [agent, "decision", "1", "3"]


@pytest.mark.parametrize(("variable", "value", "message", "command"), [
    ("MEMORYD_SCHEDULE_EVICT", "99 * * * *", "MEMORYD_SCHEDULE_EVICT: bad minute '99'",
     ("migrate",)),
    ("MEMORYD_SCHEDULE_EVICT", "99 * * * *", "MEMORYD_SCHEDULE_EVICT", ("worker",)),
    ("MEMORYD_TIMEZONE", "Mars/Olympus", "unknown timezone 'Mars/Olympus'",
     ("store", "a", "text")),
    ("MEMORYD_TIMEZONE", "Mars/Olympus", "MEMORYD_TIMEZONE", ("jobs", "run", "expire")),
    ("MEMORYD_DATABASE_URL", "mysql://localhost/x", "MEMORYD_DATABASE_URL", ("up",)),
])
def test_bad_configuration_fails_before_doing_anything(
        tmp_path: Any, variable: str, value: str, message: str, command: tuple[str, ...]
        ) -> None:
    from memoryd.embedded._proc import free_port

    # Nothing listens on these: a command that tried to connect would fail differently
    # (or hang), and the data dir must stay untouched.
    port = free_port()
    env = {"PATH": "/usr/bin:/bin", "MEMORYD_DATA_DIR": str(tmp_path / "data"),
           "MEMORYD_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{port}/memoryd",
           "MEMORYD_BROKER_URL": f"redis://127.0.0.1:{port}/0", variable: value}
    started = time.monotonic()
    done = memoryd(env, *command, check=False, timeout=60)
    assert time.monotonic() - started < 15
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("memoryd: error: ConfigError: invalid memoryd configuration")
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "data").exists()


def test_memoryd_runs_as_a_file_as_celery_restarts_it() -> None:
    """A worker given SIGHUP off a terminal re-executes ``python .../memoryd/__main__.py``;
    memoryd's logging module must not shadow the standard library's then."""
    import memoryd

    main_file = Path(memoryd.__file__).parent / "__main__.py"
    done = subprocess.run([sys.executable, str(main_file), "--help"], capture_output=True,
                          text=True, timeout=60, check=False, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: memoryd")


def test_an_unreachable_database_is_one_line_and_exit_code_3(
        service_env: dict[str, str]) -> None:
    from memoryd.embedded._proc import free_port

    env = {**service_env,
           "MEMORYD_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{free_port()}/memoryd"}
    done = memoryd(env, "status", check=False)
    assert done.returncode == 3
    assert done.stderr.startswith("memoryd: error: Unavailable: connection failed")
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


@contextlib.contextmanager
def _something_on_redis_default_port() -> Iterator[None]:
    """A Redis on 6379, as on many machines: memoryd must not take it for its own. The
    one already there is left alone; else one is started for the test (beside the
    session's servers, where no pytest session makes the directories private)."""
    from memoryd.embedded._proc import port_open
    from memoryd.embedded.redis import EmbeddedRedis

    if port_open(6379):
        yield
        return
    own = opened_for_service_user(Path(tempfile.mkdtemp(dir=TEST_HOME)))
    redis = EmbeddedRedis(own / "redis-6379", 6379)
    redis.start()
    try:
        yield
    finally:
        redis.stop()


def test_with_no_broker_configured_and_no_stack_running_commands_say_so_in_one_line(
        tmp_path: Path) -> None:
    """No MEMORYD_BROKER_URL and no `memoryd up` on the data directory (none ever, or
    one killed, its runtime.json left behind): the client commands and `memoryd mcp`
    exit 3 with one line instead of waiting on whatever listens on 6379."""
    data_dir = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
    env["MEMORYD_DATA_DIR"] = str(data_dir)
    expected = (f"memoryd: error: NoBrokerConfigured: no broker configured: "
                f"MEMORYD_BROKER_URL is unset and no `memoryd up` runs on "
                f"MEMORYD_DATA_DIR={data_dir}; start one there, or set MEMORYD_DATA_DIR or "
                f"MEMORYD_BROKER_URL")
    killed = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                            capture_output=True, text=True, check=True)
    with _something_on_redis_default_port():
        for left_behind in (False, True):
            if left_behind:
                data_dir.mkdir()
                (data_dir / "runtime.json").write_text(json.dumps(
                    {"pid": int(killed.stdout), "broker_url": "redis://127.0.0.1:6379/0"}))
            for command in (("store", "a", "x"), ("recall", "a", "what?"),
                            ("mcp", "--agent", "a")):
                done = memoryd(env, *command, check=False, timeout=60)
                assert done.returncode == 3, (command, done.stderr)
                assert done.stderr.splitlines() == [expected], command
                assert done.stdout == ""


@pytest.mark.parametrize("option", ["--processes", "--concurrency"])
def test_a_worker_with_no_processes_is_refused_before_it_connects(
        tmp_path: Path, option: str) -> None:
    from memoryd.embedded._proc import free_port

    port = free_port()  # nothing listens: a worker that tried to connect would fail otherwise
    env = {"PATH": "/usr/bin:/bin", "MEMORYD_DATA_DIR": str(tmp_path / "data"),
           "MEMORYD_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{port}/memoryd",
           "MEMORYD_BROKER_URL": f"redis://127.0.0.1:{port}/0"}
    done = memoryd(env, "worker", "--queues", "memory", option, "0", check=False, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == f"memoryd: error: ConfigError: {option} must be at least 1"


def test_a_command_whose_reader_stops_reading_exits_quietly(tmp_path: Path) -> None:
    """``memoryd jobs list | head -2``: the lines the reader wanted, no error on stderr,
    and the status a Unix tool ended by SIGPIPE has (or 0, when everything fitted into
    the pipe before the reader left): not "Unavailable: Broken pipe"."""
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
           "MEMORYD_DATA_DIR": str(tmp_path / "data")}
    command = f"{sys.executable} -m memoryd jobs list"
    piped = subprocess.run(["bash", "-c", f"{command} | head -2; exit ${{PIPESTATUS[0]}}"],
                           env=env, capture_output=True, text=True, timeout=120, check=False)
    assert piped.stderr == "" and piped.returncode in (0, 141), piped
    assert len(piped.stdout.splitlines()) == 2

    # The reader gone before the first line: every write fails.
    reader, writer = os.pipe()
    os.close(reader)
    try:
        gone = subprocess.run([sys.executable, "-m", "memoryd", "jobs", "list"], env=env,
                              stdin=subprocess.DEVNULL, stdout=writer, stderr=subprocess.PIPE,
                              text=True, timeout=120, check=False)
    finally:
        os.close(writer)
    assert (gone.returncode, gone.stderr) == (141, "")
