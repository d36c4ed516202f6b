"""The README's HTTP examples, run as written against a real gateway: the five lines of
shell and every curl line (the TypeScript example is ``examples/typescript``, run by
test_examples). Only the agent and the gateway's address are swapped for the test's."""

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

README = (Path(__file__).parents[2] / "README.md").read_text()
README_URL = "http://127.0.0.1:8765"
# Fails a curl line on an HTTP error (the README's lines use -s only, for reading).
STRICT_CURL = 'set -euo pipefail\ncurl() { command curl --fail-with-body "$@"; echo; }\n'


def _block(after: str, language: str) -> str:
    """The first ```language block after the text ``after`` in the README."""
    start = README.index(after)
    found = re.compile(rf"```{language}\n(.*?)```", re.S).search(README, start)
    assert found is not None, f"no {language} block after {after!r}"
    return found.group(1)


def _localize(code: str, gateway: GatewayProcess, agent: str) -> str:
    return code.replace(README_URL, gateway.url).replace("agent-1", agent)


def _run_bash(script: str, env: dict[str, str]) -> str:
    done = subprocess.run(["bash", "-c", STRICT_CURL + script], check=False, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return done.stdout


def _env(service_env: dict[str, str], **extra: str) -> dict[str, str]:
    path = f"{Path(sys.executable).parent}{os.pathsep}{service_env.get('PATH', '')}"
    return {**service_env, "PATH": path, **extra}


def test_the_http_five_lines_store_and_recall_through_a_key_they_create(
        gateway: GatewayProcess, service_env: dict[str, str], store: MemoryStore,
        agent_id: str) -> None:
    script = _localize(_block("## HTTP in five lines", "bash"), gateway, agent_id)
    out = _run_bash(script, _env(service_env))
    stored, recalled = (json.loads(line) for line in out.split("\n") if line.strip())
    assert stored["duplicate"] is False
    assert recalled[0]["memory"]["content"] == "User prefers dark mode"
    assert recalled[0]["memory"]["agent_id"] == agent_id


def test_every_curl_line_of_the_readme_succeeds(
        gateway: GatewayProcess, http: httpx.Client, service_env: dict[str, str],
        store: MemoryStore, agent_id: str) -> None:
    key = make_key(store, agents=(agent_id,))
    admin = make_key(store, prefixes=("",), admin=True)
    memory = str(store.store(agent_id, "A memory the examples read and then delete.").id)
    yesterday = datetime.now(UTC) - timedelta(days=1)
    evicted = str(store.store(agent_id, "An old reminder.", expires_at=yesterday).id)
    ran = http.post("/v1/jobs/expire/runs", headers=bearer(admin), json={"agent_id": agent_id})
    assert ran.json()["stats"]["expired"] == 1, ran.text

    script = _localize(_block("More with curl", "bash"), gateway, agent_id)
    assert script.count("curl ") >= 13
    out = _run_bash(script, _env(service_env, KEY=key, ADMIN=admin, ID=memory,
                                 EVICTED=evicted))
    answers = [json.loads(line) for line in out.split("\n") if line.strip()]
    assert {"id": memory, "deleted": True} in answers
    assert {"id": evicted, "restored": True} in answers
    assert store.get(agent_id, evicted) is not None
    assert "Alice leads project Atlas" in out
