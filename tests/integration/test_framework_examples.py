"""The framework examples in ``examples/``, run as written (as subprocesses, against the
session worker's broker, with a fresh agent each) and their output checked."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
EXAMPLES = Path(__file__).parents[2] / "examples"


def _run(name: str, service_env: dict[str, str]) -> list[str]:
    done = subprocess.run([sys.executable, str(EXAMPLES / name), f"example-{uuid.uuid4()}"],
                          env=service_env, capture_output=True, text=True, timeout=180,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_openai_agents_example_keeps_recalls_pops_and_clears_a_session(
        worker: object, service_env: dict[str, str]) -> None:
    assert _run("openai_agents_session.py", service_env) == [
        "user: My order number is 4711.", "assistant: Thanks, I found order 4711.",
        "recalled: My order number is 4711.", "popped: Thanks, I found order 4711.",
        "left: 0"]


def test_the_adk_example_finds_what_the_user_said_in_the_session(
        worker: object, service_env: dict[str, str]) -> None:
    lines = _run("adk_memory.py", service_env)
    # The agent's reply shares no word with the question: the relevance floor keeps it
    # out, as ADK's own memory service would.
    assert lines == ["user: Please ship my parcels to the office in Porto."]


def test_the_autogen_example_puts_the_recalled_memory_in_the_model_context(
        worker: object, service_env: dict[str, str]) -> None:
    assert _run("autogen_memory.py", service_env) == [
        "Relevant memories (most relevant first):", "1. The user prefers metric units."]
