"""The documents' commands, run as written against real services. Every ```bash block of
README.md and docs/ is either marked ``<!-- run -->`` on the line before it, and run here
against the session's database, worker and gateway, or listed in ``NOT_RUN`` with the reason
a test cannot run it; a new block must be one or the other. The HTTP five lines and the
curl lines are also checked for what they answer (the TypeScript example is
``examples/typescript``, run by test_examples). Only the agent and the gateway's address are swapped
for the test's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from memoryd.memory.store import MemoryStore
from tests.support.gateway import GatewayProcess, bearer, make_key

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_URL = "http://127.0.0.1:8765"
# Fails a curl line on an HTTP error (the documents' lines use -s only, for reading).
STRICT_CURL = 'set -euo pipefail\ncurl() { command curl --fail-with-body "$@"; echo; }\n'
RUN_MARK = "<!-- run -->"
BASH_BLOCK = re.compile(r"(?:^(<!-- run -->)\n)?^```bash\n(.*?)^```", re.S | re.M)
# The blocks no test runs, by document and first line, and why.
NOT_RUN = {
    ("README.md", "./dev up      # installs memoryd into .venv and starts it on its embedded "
                  "defaults"): "starts the whole stack in the foreground until Ctrl-C; test_up "
                               "runs `memoryd up` itself",
    ("README.md", "source .venv/bin/activate   # or call .venv/bin/memoryd"):
        "changes the calling shell; the tests put the virtual environment on PATH",
    ("http.md", "GW=http://127.0.0.1:8765 AUTH=\"Authorization: Bearer $KEY\""):
        "needs a key, an admin key, a memory and an eviction: run by "
        "test_every_curl_line_of_the_http_reference_succeeds",
    ("operations.md", "cp .env.example .env      # set POSTGRES_PASSWORD, REDIS_PASSWORD and "
                      "FLOWER_BASIC_AUTH (user:password)"):
        "docker compose: no Docker in the tests; test_deploy_files checks the files",
    ("operations.md", "pip install '.[server]' honcho && memoryd migrate && honcho start"):
        "installs packages and runs the Procfile's services until stopped; test_deploy_files "
        "checks the Procfile",
    ("operations.md", "memoryd restore-backup memoryd-2026-11-25.dump --yes"):
        "replaces the whole database the other tests use; test_portability restores one",
    ("architecture.md", "MEMORYD_RECALL_EXPAND=0 MEMORYD_RECALL_CONTEXT_WEIGHT=0.15 "
                        "MEMORYD_RECALL_TIME_BOOST=0"):
        "settings for the workers' environment, not a command",
}


def _text(name: str) -> str:
    return next(path for path in DOCUMENTS if path.name == name).read_text()


def _bash_blocks() -> list[tuple[str, str, bool]]:
    """Every ```bash block of the documents: (document, code, marked to run)."""
    return [(path.name, found.group(2), found.group(1) == RUN_MARK)
            for path in DOCUMENTS for found in BASH_BLOCK.finditer(path.read_text())]


def _block(document: str, after: str, language: str) -> str:
    """The first ```language block after the text ``after`` in a document."""
    text = _text(document)
    start = text.index(after)
    found = re.compile(rf"```{language}\n(.*?)```", re.S).search(text, start)
    assert found is not None, f"no {language} block after {after!r} in {document}"
    return found.group(1)


def _localize(code: str, gateway: GatewayProcess, agent: str) -> str:
    return (code.replace(README_URL, gateway.url).replace("agent-2", f"{agent}-2")
            .replace("agent-1", agent))


def _run_bash(script: str, env: dict[str, str], cwd: Path | None = None) -> str:
    done = subprocess.run(["bash", "-c", STRICT_CURL + script], check=False, env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return done.stdout


def _env(service_env: dict[str, str], **extra: str) -> dict[str, str]:
    path = f"{Path(sys.executable).parent}{os.pathsep}{service_env.get('PATH', '')}"
    return {**service_env, "PATH": path, **extra}


def test_the_http_five_lines_store_and_recall_through_a_key_they_create(
        gateway: GatewayProcess, service_env: dict[str, str], store: MemoryStore,
        agent_id: str) -> None:
    script = _localize(_block("README.md", "## HTTP in five lines", "bash"), gateway, agent_id)
    out = _run_bash(script, _env(service_env))
    stored, recalled, history = (json.loads(line) for line in out.split("\n") if line.strip())
    assert stored["duplicate"] is False and stored["superseded"] == [history["memory"]["id"]]
    assert recalled[0]["memory"]["content"] == "User prefers light mode"  # as of February
    assert recalled[0]["memory"]["agent_id"] == agent_id
    assert [v["cause"] for v in history["versions"]] == ["superseded"]


def test_every_curl_line_of_the_http_reference_succeeds(
        gateway: GatewayProcess, http: httpx.Client, service_env: dict[str, str],
        store: MemoryStore, agent_id: str) -> None:
    key = make_key(store, agents=(agent_id,))
    admin = make_key(store, prefixes=("",), admin=True)
    memory = str(store.store(agent_id, "A memory the examples read and then delete.").id)
    yesterday = datetime.now(UTC) - timedelta(days=1)
    evicted = str(store.store(agent_id, "An old reminder.", expires_at=yesterday).id)
    ran = http.post("/v1/jobs/expire/runs", headers=bearer(admin), json={"agent_id": agent_id})
    assert ran.json()["stats"]["expired"] == 1, ran.text

    script = _localize(_block("http.md", "## More with curl", "bash"), gateway, agent_id)
    assert script.count("curl ") >= 13
    out = _run_bash(script, _env(service_env, KEY=key, ADMIN=admin, ID=memory,
                                 EVICTED=evicted))
    answers = [json.loads(line) for line in out.split("\n") if line.strip()]
    assert {"id": memory, "deleted": True} in answers
    assert {"id": evicted, "restored": True} in answers
    assert store.get(agent_id, evicted) is not None
    assert "Alice leads project Atlas" in out


def test_every_bash_block_is_run_or_says_why_not() -> None:
    blocks = _bash_blocks()
    unclassified = [(name, code.splitlines()[0]) for name, code, run in blocks
                    if not run and (name, code.splitlines()[0]) not in NOT_RUN]
    assert not unclassified, f"mark these {RUN_MARK} or list them in NOT_RUN: {unclassified}"
    firsts = {(name, code.splitlines()[0]) for name, code, run in blocks if not run}
    stale = set(NOT_RUN) - firsts
    assert not stale, f"NOT_RUN names blocks no document has: {stale}"
    assert sum(run for _, _, run in blocks) >= 4


@pytest.mark.parametrize("document, code", [
    pytest.param(name, code, id=f"{name}:{code.splitlines()[0][:40]}")
    for name, code, run in _bash_blocks() if run])
def test_a_runnable_block_runs_as_written(
        document: str, code: str, gateway: GatewayProcess, service_env: dict[str, str],
        store: MemoryStore, agent_id: str, tmp_path: Path) -> None:
    store.store(agent_id, "Alice leads project Atlas", category="fact")
    script = _localize(code, gateway, agent_id)
    _run_bash(script, _env(service_env), cwd=tmp_path)


def test_the_client_five_lines_store_and_recall_through_the_worker(
        service_env: dict[str, str], worker: object, store: MemoryStore, agent_id: str,
        tmp_path: Path) -> None:
    code = _block("README.md", "## The client in five lines", "python").replace("agent-1", agent_id)
    done = subprocess.run([sys.executable, "-c", code], check=False, env=_env(service_env),
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("User prefers dark mode ")
    assert done.stdout.rstrip().endswith("User prefers light mode superseded")
    assert [m.content for m in store.list(agent_id).items] == ["User prefers dark mode"]
