"""The thin client on its own: what it imports, and that it validates every argument
before anything reaches the broker (no broker is needed for these tests)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from memoryd.client import MemoryClient
from memoryd.config import Settings
from memoryd.errors import MemorydError, ValidationError
from memoryd.validation import MAX_KG_DEPTH

HEAVY = ("sqlalchemy", "psycopg", "memoryd.memory", "memoryd.worker", "memoryd.tasks",
         "numpy", "onnxruntime", "alembic")
# The agent frameworks the adapters plug into: each comes with its own extra only.
FRAMEWORKS = ("langgraph", "agents", "google.adk", "autogen_core", "autogen_agentchat")
UUID = "6f0f5c8e-58a5-4b8a-9c55-6a1f0f2f7c11"


def test_importing_the_client_pulls_in_no_server_code_and_no_framework() -> None:
    script = (
        "import json, sys\n"
        "import memoryd.client\n"
        "import memoryd.integrations\n"
        "from memoryd.client import MemoryClient\n"
        "from memoryd.errors import ValidationError\n"
        "c = MemoryClient(broker_url='redis://127.0.0.1:1/0')\n"
        "try:\n"
        "    c.store('', 'x')\n"
        "except ValidationError:\n"
        "    pass\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=True)
    modules = json.loads(done.stdout)
    assert "memoryd.client" in modules and "celery" in modules
    loaded = [m for m in modules
              if any(m == h or m.startswith(h + ".") for h in (*HEAVY, *FRAMEWORKS))]
    assert loaded == []



@pytest.fixture
def black_hole() -> Iterator[socket.socket]:
    """A listening port that never answers: a client that connected would hang, and
    every connection attempt is left in the backlog for the test to see."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        yield listener


def _client_on(listener: socket.socket, **settings: Any) -> MemoryClient:
    port = listener.getsockname()[1]
    return MemoryClient(broker_url=f"redis://127.0.0.1:{port}/0", timeout=2.0,
                        settings=Settings(**settings))


def _connection_attempted(listener: socket.socket) -> bool:
    try:
        conn, _ = listener.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


BIG = "x" * 65

CASES: list[tuple[str, Callable[[MemoryClient], object], str]] = [
    # store: every argument
    ("agent empty", lambda c: c.store("", "text"), "agent_id"),
    ("agent blank", lambda c: c.store("   ", "text"), "agent_id"),
    ("agent not str", lambda c: c.store(42, "text"), "agent_id"),  # type: ignore[arg-type]
    ("agent too long", lambda c: c.store("a" * 256, "text"), "agent_id"),
    ("agent control char", lambda c: c.store("a\nb", "text"), "agent_id"),
    ("content empty", lambda c: c.store("a", ""), "content"),
    ("content not str", lambda c: c.store("a", b"bytes"), "content"),  # type: ignore[arg-type]
    ("content NUL", lambda c: c.store("a", "nul\x00byte"), "content"),
    ("content too big", lambda c: c.store("a", BIG), "content"),
    ("role", lambda c: c.store("a", "t", role="narrator"), "role"),
    ("session_id", lambda c: c.store("a", "t", session_id=""), "session_id"),
    ("key", lambda c: c.store("a", "t", key="k" * 513), "key"),
    ("category", lambda c: c.store("a", "t", category="gossip"), "category"),
    ("importance > 1", lambda c: c.store("a", "t", importance=1.5), "importance"),
    ("importance bool", lambda c: c.store("a", "t", importance=True), "importance"),
    ("tags str", lambda c: c.store("a", "t", tags="ui"), "tags"),
    ("tags too many", lambda c: c.store("a", "t", tags=[f"t{i}" for i in range(65)]), "tags"),
    ("tag control char", lambda c: c.store("a", "t", tags=["ok", "bad\x07"]), "tags"),
    ("source", lambda c: c.store("a", "t", source=7), "source"),
    ("metadata list", lambda c: c.store("a", "t", metadata=[1, 2]), "metadata"),
    ("metadata not JSON", lambda c: c.store("a", "t", metadata={"x": object()}), "metadata"),
    ("metadata NaN", lambda c: c.store("a", "t", metadata={"x": float("nan")}), "metadata"),
    ("expires_at naive", lambda c: c.store("a", "t", expires_at=datetime(2030, 1, 1)),
     "expires_at"),
    ("expires_at text", lambda c: c.store("a", "t", expires_at="soon"), "expires_at"),
    ("created_at", lambda c: c.store("a", "t", created_at=12), "created_at"),
    ("unknown field", lambda c: c.store("a", "t", colour="red"), "colour"),
    ("store wait=False", lambda c: c.store("", "t", wait=False), "agent_id"),
    ("supersedes str", lambda c: c.store("a", "t", supersedes=UUID), "supersedes"),
    ("supersedes id", lambda c: c.store("a", "t", supersedes=[UUID, "nope"]),
     "supersedes[1]"),
    ("supersedes too many", lambda c: c.store("a", "t", supersedes=[
        f"00000000-0000-4000-8000-{i:012d}" for i in range(101)]), "supersedes"),
    ("valid_from naive", lambda c: c.store("a", "t", valid_from=datetime(2020, 1, 1)),
     "valid_from"),
    ("actor blank", lambda c: c.store("a", "t", actor=" "), "actor"),
    ("store_many supersedes", lambda c: c.store_many("a", [{"content": "t",
                                                            "supersedes": ["x"]}]),
     "items[0].supersedes[0]"),
    ("store_many actor", lambda c: c.store_many("a", [{"content": "t"}], actor=7),  # type: ignore[arg-type]
     "actor"),
    # store_many
    ("items str", lambda c: c.store_many("a", "text"), "items"),  # type: ignore[arg-type]
    ("items empty", lambda c: c.store_many("a", []), "items"),
    ("item not mapping", lambda c: c.store_many("a", ["text"]), "items[0]"),  # type: ignore[list-item]
    ("item field", lambda c: c.store_many("a", [{"content": "ok"}, {"content": "t",
                                                 "importance": -1}]), "items[1].importance"),
    ("items too many", lambda c: c.store_many("a", [{"content": f"m{i}"} for i in range(1001)]),
     "items"),
    ("store_many agent", lambda c: c.store_many("", [{"content": "ok"}]), "agent_id"),
    # recall
    ("recall agent", lambda c: c.recall("", "q"), "agent_id"),
    ("query empty", lambda c: c.recall("a", " "), "query"),
    ("query NUL", lambda c: c.recall("a", "q\x00"), "query"),
    ("query too long", lambda c: c.recall("a", "q" * 8193), "query"),
    ("limit 0", lambda c: c.recall("a", "q", limit=0), "limit"),
    ("limit too big", lambda c: c.recall("a", "q", limit=1001), "limit"),
    ("limit bool", lambda c: c.recall("a", "q", limit=True), "limit"),
    ("limit str", lambda c: c.recall("a", "q", limit="5"), "limit"),  # type: ignore[arg-type]
    ("recall category", lambda c: c.recall("a", "q", category="x"), "category"),
    ("recall tags", lambda c: c.recall("a", "q", tags="x"), "tags"),
    ("recall session", lambda c: c.recall("a", "q", session_id=""), "session_id"),
    ("mode", lambda c: c.recall("a", "q", mode="slow"), "mode"),
    ("include_superseded str", lambda c: c.recall("a", "q", include_superseded="yes"),  # type: ignore[arg-type]
     "include_superseded"),
    ("as_of text", lambda c: c.recall("a", "q", as_of="yesterday"), "as_of"),
    ("as_of naive", lambda c: c.recall("a", "q", as_of=datetime(2020, 1, 1)), "as_of"),
    ("as_of future", lambda c: c.recall("a", "q", as_of="2999-01-01T00:00:00+00:00"), "as_of"),
    ("as_of too early", lambda c: c.recall("a", "q", as_of="0001-01-01T00:00:00+00:00"),
     "as_of"),
    ("context as_of", lambda c: c.context("a", "q", as_of=5), "as_of"),  # type: ignore[arg-type]
    ("list as_of", lambda c: c.list("a", as_of="x"), "as_of"),
    ("list include_superseded", lambda c: c.list("a", include_superseded=1),  # type: ignore[arg-type]
     "include_superseded"),
    ("kg_query as_of", lambda c: c.kg_query("a", "x", as_of="x"), "as_of"),
    # history, supersession and its undo
    ("history agent", lambda c: c.history("", UUID), "agent_id"),
    ("history id", lambda c: c.history("a", "nope"), "memory_id"),
    ("supersede id", lambda c: c.supersede("a", "nope", [UUID]), "memory_id"),
    ("supersede none", lambda c: c.supersede("a", UUID, []), "supersedes"),
    ("supersede old id", lambda c: c.supersede("a", UUID, ["x"]), "supersedes[0]"),
    ("supersede actor", lambda c: c.supersede("a", UUID, [UUID], actor=""), "actor"),
    ("unsupersede agent", lambda c: c.unsupersede("", UUID), "agent_id"),
    ("unsupersede id", lambda c: c.unsupersede("a", 12), "memory_id"),  # type: ignore[arg-type]
    # the review queue
    ("reviews status", lambda c: c.reviews(status="maybe"), "status"),
    ("reviews agent", lambda c: c.reviews(agent_id=""), "agent_id"),
    ("reviews limit", lambda c: c.reviews(limit=0), "limit"),
    ("accept review id", lambda c: c.accept_review(0), "review_id"),
    ("reject review id", lambda c: c.reject_review("7"), "review_id"),  # type: ignore[arg-type]
    # context
    ("context agent", lambda c: c.context("", "q"), "agent_id"),
    ("context query", lambda c: c.context("a", ""), "query"),
    ("context limit", lambda c: c.context("a", "q", limit=-1), "limit"),
    # forget / get
    ("forget agent", lambda c: c.forget("", UUID), "agent_id"),
    ("forget id", lambda c: c.forget("a", "not-a-uuid"), "memory_id"),
    ("get id", lambda c: c.get("a", "123"), "memory_id"),
    ("get agent", lambda c: c.get("", UUID), "agent_id"),
    # list
    ("list agent", lambda c: c.list(""), "agent_id"),
    ("list category", lambda c: c.list("a", category="nope"), "category"),
    ("list limit", lambda c: c.list("a", limit=0), "limit"),
    ("list offset", lambda c: c.list("a", offset=-1), "offset"),
    ("list offset bool", lambda c: c.list("a", offset=False), "offset"),
    # knowledge graph
    ("kg_add agent", lambda c: c.kg_add("", {"id": "x"}), "agent_id"),
    ("kg_add not mapping", lambda c: c.kg_add("a", "alice"), "entity"),  # type: ignore[arg-type]
    ("kg_add no id", lambda c: c.kg_add("a", {"type": "person"}), "entity.id"),
    ("kg_add blank id", lambda c: c.kg_add("a", {"id": " "}), "entity.id"),
    ("kg_add not an object", lambda c: c.kg_add("a", "x"), "entity"),  # type: ignore[arg-type]
    ("kg_add None", lambda c: c.kg_add("a", None), "entity"),  # type: ignore[arg-type]
    ("kg_add not JSON", lambda c: c.kg_add("a", {"id": "x", "attributes": {"x": {1, 2}}}),
     "entity.attributes"),
    ("kg_query agent", lambda c: c.kg_query("", "x"), "agent_id"),
    ("kg_query start", lambda c: c.kg_query("a", ""), "start_id"),
    ("kg_query depth low", lambda c: c.kg_query("a", "x", depth=-1), "depth"),
    ("kg_query depth high", lambda c: c.kg_query("a", "x", depth=MAX_KG_DEPTH + 1), "depth"),
    ("kg_query depth bool", lambda c: c.kg_query("a", "x", depth=True), "depth"),
    # sessions
    ("sessions agent", lambda c: c.sessions(""), "agent_id"),
    # maintenance
    ("run_job unknown", lambda c: c.run_job("vacuum"), "job"),
    ("metadata_values field", lambda c: c.metadata_values("a", ""), "field"),
    ("metadata_values filter", lambda c: c.metadata_values("a", "f", metadata={"k": [1]}),
     "metadata.k"),
    ("list order", lambda c: c.list("a", order="oldest"), "order"),
    ("run_job agent", lambda c: c.run_job("expire", agent_id=""), "agent_id"),
    ("run_job params", lambda c: c.run_job("expire", params=[("a", 1)]), "params"),  # type: ignore[arg-type]
    ("run_job params JSON", lambda c: c.run_job("expire", params={"x": object()}), "params"),
    # following a job by its id
    ("pending task id", lambda c: c.pending("not-a-uuid"), "task_id"),
    ("pending kind", lambda c: c.pending(UUID, "recall"), "kind"),  # type: ignore[call-overload]
    ("pending erasure agent", lambda c: c.pending(UUID, "forget_agent", agent_id=""),
     "agent_id"),
]


@pytest.mark.parametrize(("call", "field"), [(c, f) for _, c, f in CASES],
                         ids=[name for name, _, _ in CASES])
def test_every_argument_is_validated_before_sending(
        black_hole: socket.socket, call: Callable[[MemoryClient], object], field: str) -> None:
    client = _client_on(black_hole, max_content_bytes=64)
    started = time.monotonic()
    with pytest.raises(ValidationError) as caught:
        call(client)
    assert time.monotonic() - started < 2.0
    assert caught.value.field == field
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, MemorydError)
    assert str(caught.value).startswith(f"{field}: ")
    assert not _connection_attempted(black_hole)
    client.close()


def test_async_calls_validate_too(black_hole: socket.socket) -> None:
    client = _client_on(black_hole)

    async def scenario() -> None:
        with pytest.raises(ValidationError) as caught:
            await client.astore("a", "")
        assert caught.value.field == "content"
        with pytest.raises(ValidationError) as caught:
            await client.arecall("a", "q", limit=0)
        assert caught.value.field == "limit"
        with pytest.raises(ValidationError) as caught:
            await client.acontext("", "q")
        assert caught.value.field == "agent_id"

    asyncio.run(scenario())
    assert not _connection_attempted(black_hole)


def test_a_valid_call_does_reach_for_the_broker(black_hole: socket.socket) -> None:
    """The control for the tests above: the black hole does see a real attempt."""
    client = _client_on(black_hole)
    # Give up on the silent "broker" at once rather than after ~20 s of reconnects.
    client._app.conf.result_backend_transport_options = {"retry_policy": {
        "max_retries": 1, "interval_start": 0, "interval_step": 0.1, "interval_max": 0.1}}
    errors: list[BaseException] = []

    def send() -> None:
        try:
            client.store("a", "a valid memory", wait=False)
        except BaseException as exc:  # the broker never answers; it is closed below
            errors.append(exc)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    deadline = time.monotonic() + 10
    attempted = False
    while not attempted and time.monotonic() < deadline:
        attempted = _connection_attempted(black_hole)
        time.sleep(0.05)
    black_hole.close()
    sender.join(30)
    assert attempted
    assert not sender.is_alive()


def test_client_without_broker_url_uses_the_runtime_file(tmp_path: Path) -> None:
    (tmp_path / "runtime.json").write_text(json.dumps(
        {"pid": os.getpid(), "broker_url": "redis://127.0.0.1:6390/3"}))
    client = MemoryClient(settings=Settings(data_dir=tmp_path))
    assert client._app.conf.broker_url == "redis://127.0.0.1:6390/3"
    assert client._app.conf.result_backend == "redis://127.0.0.1:6390/3"
    assert list(client._app.conf.accept_content) == ["json"]
    assert client._app.conf.task_serializer == "json"


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_a_client_with_no_broker_configured_and_no_stack_running_says_so(
        tmp_path: Path) -> None:
    """No guess at a Redis on its default port: a runtime.json a killed stack left
    behind (its process gone) counts as no stack."""
    from memoryd.errors import ConfigError, NoBrokerConfigured

    for left in (None, {"pid": _dead_pid(), "broker_url": "redis://127.0.0.1:6390/3"}):
        if left is not None:
            (tmp_path / "runtime.json").write_text(json.dumps(left))
        with pytest.raises(NoBrokerConfigured) as refused:
            MemoryClient(settings=Settings(data_dir=tmp_path))
        assert isinstance(refused.value, ConfigError)
        message = str(refused.value)
        assert "\n" not in message and str(tmp_path) in message
        assert "MEMORYD_BROKER_URL" in message and "MEMORYD_DATA_DIR" in message


def test_the_worker_app_without_a_broker_refuses_to_connect_anywhere(tmp_path: Path) -> None:
    """Importing the tasks needs no broker; connecting does, and says which is missing
    rather than trying a default broker."""
    from celery import current_app

    from memoryd.errors import NoBrokerConfigured
    from memoryd.worker.app import create_app

    previous = current_app._get_current_object()  # create_app makes its app the current one
    try:
        app = create_app(Settings(data_dir=tmp_path))
        assert list(app.conf.accept_content) == ["json"]
        with pytest.raises(NoBrokerConfigured):
            app.control.ping(timeout=0.5)
        with pytest.raises(NoBrokerConfigured):
            app.send_task("memoryd.store", kwargs={})
        configured = create_app(Settings(data_dir=tmp_path,
                                         broker_url="redis://127.0.0.1:1/0"))
        assert configured.conf.broker_url == "redis://127.0.0.1:1/0"
    finally:
        previous.set_current()


def test_the_client_and_the_worker_share_one_celery_configuration(tmp_path: Path) -> None:
    from memoryd.worker.app import worker_config

    settings = Settings(data_dir=tmp_path, broker_url="redis://127.0.0.1:6390/3")
    client = MemoryClient(settings=settings)
    worker = worker_config(settings)
    for key in ("broker_url", "task_serializer", "accept_content",
                "result_accept_content", "task_routes", "broker_transport_options",
                "result_expires"):
        assert client._app.conf[key] == worker[key], key
    # The same Redis for results; the worker writes them through its own backend class.
    assert worker["result_backend"] == (
        f"memoryd.broker.redis_results:ResultBackend+{client._app.conf.result_backend}")
