"""The client, HTTP, MCP and TypeScript examples in ``examples/``, run as written (as
subprocesses, against the session's worker and gateway, with a fresh agent each) and
their output checked against what the store then holds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memoryd.memory.store import MemoryStore
from tests.support.gateway import GatewayProcess, make_key
from tests.support.mcp_clients import TOOLS

pytestmark = pytest.mark.slow
EXAMPLES = Path(__file__).parents[2] / "examples"
NODE_TOOLS = Path(sys.prefix) / "node" / "node_modules"


def _run(command: list[str], env: dict[str, str], cwd: Path | None = None) -> list[str]:
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


def _contents(store: MemoryStore, agent: str) -> list[str]:
    return [m.content for m in store.list(agent).items]


def _with_venv_path(env: dict[str, str], **extra: str) -> dict[str, str]:
    """``env`` with the virtual environment's scripts (``memoryd``, ``python3``) first on
    the ``PATH``, as after activating it."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**env, "PATH": path, **extra}


def test_the_working_memory_example_keeps_a_thread_and_promotes_it(
        worker: object, service_env: dict[str, str], agent_id: str) -> None:
    lines = _run([sys.executable, str(EXAMPLES / "working_memory.py"), agent_id], service_env)
    assert lines[0] == "working: 1 dinner {'turns': 1} 1"
    assert lines[1].startswith("context: ") and "'similar'" in lines[1]
    assert "## Working memory" in lines and "Topic: dinner" in lines
    assert "user: Book dinner for Ana on Friday." in lines
    assert any("Ana is vegetarian" in line for line in lines)
    assert "promoted: 1" in lines
    assert lines[-1] == "session: ['Book dinner for Ana on Friday.']"


def test_the_client_example_stores_recalls_and_lists(
        worker: object, service_env: dict[str, str], store: MemoryStore,
        agent_id: str) -> None:
    lines = _run([sys.executable, str(EXAMPLES / "client.py"), agent_id], service_env)
    assert lines[0].startswith("recalled: User prefers dark mode (score ")
    components = lines[1].removeprefix("components: ")
    assert "'semantic': 1.0" in components and "'context'" in components
    (memory,) = store.list(agent_id).items
    assert lines[2:] == [f"listed: {memory.id} {memory.category} User prefers dark mode"]


def test_the_http_example_makes_a_key_stores_and_recalls_with_curl(
        gateway: GatewayProcess, service_env: dict[str, str], store: MemoryStore,
        agent_id: str) -> None:
    env = _with_venv_path(service_env, MEMORYD_URL=gateway.url)
    command = ["bash", str(EXAMPLES / "http.sh"), agent_id]
    stored, recalled = (json.loads(line) for line in _run(command, env))
    assert stored == {"id": stored["id"], "stored": True, "duplicate": False, "superseded": []}
    assert [(h["memory"]["id"], h["memory"]["content"]) for h in recalled] == [
        (stored["id"], "User prefers dark mode")]
    again, _ = (json.loads(line) for line in _run(command, env))
    assert again == {"id": stored["id"], "stored": False, "duplicate": True, "superseded": []}
    assert _contents(store, agent_id) == ["User prefers dark mode"]


def test_the_mcp_example_lists_the_tools_remembers_and_recalls_over_http(
        gateway: GatewayProcess, store: MemoryStore, agent_id: str) -> None:
    env = {"PATH": os.environ.get("PATH", ""), "MEMORYD_URL": gateway.url,
           "MEMORYD_KEY": make_key(store, agents=(agent_id,))}
    lines = _run([sys.executable, str(EXAMPLES / "mcp_http.py")], env)
    (memory,) = store.list(agent_id).items
    assert lines[0] == "tools: " + " ".join(sorted(TOOLS))
    assert lines[1] == f"Remembered (id {memory.id})."
    assert lines[2].startswith(f"1. [{memory.category}, score ")
    assert lines[2].endswith(f"id {memory.id}] The user's cat is called Miso.")


def test_the_typescript_example_compiles_strictly_as_a_module_and_runs(
        gateway: GatewayProcess, store: MemoryStore, agent_id: str, tmp_path: Path) -> None:
    """Compiled with the example's own tsconfig.json (``--strict`` repeated on the command
    line so that it cannot be dropped there) and run by Node from a folder holding only the
    output and the example's package.json, as ``npm start`` runs it."""
    tsc, node = NODE_TOOLS / ".bin" / "tsc", shutil.which("node")
    assert tsc.exists() and node, "./dev test installs TypeScript into .venv/node; Node.js 18+"
    example = EXAMPLES / "typescript"
    compiled = subprocess.run(
        [str(tsc), "--project", str(example), "--strict", "--outDir", str(tmp_path),
         "--typeRoots", str(NODE_TOOLS / "@types")],
        check=False, capture_output=True, text=True, timeout=120)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    shutil.copy(example / "package.json", tmp_path)
    env = {"PATH": os.environ.get("PATH", ""), "MEMORYD_URL": gateway.url,
           "MEMORYD_KEY": make_key(store, agents=(agent_id,))}
    lines = _run([node, "recall.js", agent_id], env, cwd=tmp_path)
    (memory,) = store.list(agent_id).items
    assert lines[0] == f"stored as {memory.id}"
    assert lines[1].startswith("User prefers dark mode ")
    assert _run([node, "recall.js", agent_id], env, cwd=tmp_path)[0] == \
        f"already stored as {memory.id}"
    assert _contents(store, agent_id) == ["User prefers dark mode"]


def test_the_typescript_example_pins_the_compiler_the_tests_use() -> None:
    """The example's package.json and the test tools' (tests/node) name the same
    TypeScript and Node types, so the example compiles for a reader as it does here."""
    pins = [json.loads((folder / "package.json").read_text())["devDependencies"]
            for folder in (EXAMPLES / "typescript", EXAMPLES.parent / "tests" / "node")]
    assert pins[0] == pins[1]
