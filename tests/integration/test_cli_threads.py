"""``memoryd threads list|show|end`` as a user runs them: ``python -m memoryd`` subprocesses
on the test Redis, a thread ended by hand promoted by the session worker."""

from __future__ import annotations

import uuid

import pytest

from memoryd.client import MemoryClient
from tests.support.cli import as_json, memoryd

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("worker")]

CANARY = "canary-0c9a-do-not-echo"


@pytest.fixture
def agent() -> str:
    return f"cli-{uuid.uuid4()}"


def test_threads_are_listed_shown_and_ended(service_env: dict[str, str],
                                            client: MemoryClient, agent: str) -> None:
    client.update_working(agent, "chat/1", topic="travel", variables={"city": "Porto"},
                          set_flags=["located"], messages=[
                              {"role": "user", "content": "I live in Porto."},
                              {"role": "assistant", "content": "Noted."}])

    lines = memoryd(service_env, "threads", "list", agent).stdout.splitlines()
    assert lines[0].split() == ["thread", "expires"] and set(lines[1]) <= {"-", " "}
    assert [line.split()[0] for line in lines[2:]] == ["chat/1"]
    listed = as_json(memoryd(service_env, "threads", "list", agent, "--json"))
    assert [t["thread_id"] for t in listed] == ["chat/1"]

    shown = memoryd(service_env, "threads", "show", agent, "chat/1").stdout
    assert "travel" in shown and '{"city": "Porto"}' in shown and "located" in shown
    assert [line.split(maxsplit=4)[3:] for line in shown.splitlines()[-2:]] == [
        ["user", "I live in Porto."], ["assistant", "Noted."]]
    state = as_json(memoryd(service_env, "threads", "show", agent, "chat/1", "--json"))
    assert (state["version"], [m["content"] for m in state["messages"]]) == (
        1, ["I live in Porto.", "Noted."])

    ended = memoryd(service_env, "threads", "end", agent, "chat/1")
    assert ended.stdout == "ended: 2 messages promoted to session chat/1\n"
    assert [m.content for m in client.session_messages(agent, "chat/1")] == [
        "I live in Porto.", "Noted."]
    assert memoryd(service_env, "threads", "list", agent, "--json").stdout.strip() == "[]"


def test_a_thread_with_no_working_memory_is_a_no_op(service_env: dict[str, str],
                                                    client: MemoryClient, agent: str) -> None:
    shown = memoryd(service_env, "threads", "show", agent, "nothing", check=False)
    assert (shown.returncode, shown.stdout) == (1, "no working memory for this thread\n")
    ended = memoryd(service_env, "threads", "end", agent, "nothing", "--json", check=False)
    assert ended.returncode == 1
    assert (as_json(ended)["ended"], as_json(ended)["promoted"]) == (False, 0)
    assert client.threads(agent) == []


@pytest.mark.parametrize(("args", "field"), [
    (("show", "AGENT", f"\x01{CANARY}"), "thread_id"),
    (("end", "AGENT", "x" * 600 + CANARY), "thread_id"),
    (("list", "AGENT", "--limit", "0"), "limit"),
])
def test_a_refused_command_names_the_field_and_never_its_value(
        service_env: dict[str, str], agent: str, args: tuple[str, ...], field: str) -> None:
    done = memoryd(service_env, "threads", *(agent if a == "AGENT" else a for a in args),
                   check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("memoryd: error: ValidationError: ") and field in done.stderr
    assert CANARY not in done.stderr + done.stdout and "Traceback" not in done.stderr
