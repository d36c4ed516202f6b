"""Working memory through the thin client, against the real Redis and the session worker:
atomic updates under concurrent writers, compare-and-set, the trimming and variable
rules, refusals that change nothing, and isolation between agents."""

from __future__ import annotations

import multiprocessing
from datetime import UTC, datetime, timedelta

import pytest

from memoryd.client import MemoryClient
from memoryd.errors import Conflict, ContentTooLarge, ValidationError
from memoryd.working.model import WorkingMemory

THREAD = "thread-1"


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def _say(*contents: str, role: str = "user") -> list[dict[str, str]]:
    return [{"role": role, "content": content} for content in contents]


def test_an_update_comes_back_whole_from_get(client: MemoryClient, agent_id: str) -> None:
    client.update_working(agent_id, THREAD, messages=_say("Hello there"),
                          variables={"plan": {"steps": [1, 2], "big": 2**60}},
                          set_flags=["greeted"], increment={"turns": 2}, topic="weather",
                          entities=["Ana", "Porto"], tools={"active": [{"name": "search"}]},
                          importance=0.8)
    state = client.working(agent_id, THREAD)
    assert state.version == 1
    assert [(m.seq, m.role, m.content) for m in state.messages] == [(1, "user", "Hello there")]
    assert state.variables == {"plan": {"steps": [1, 2], "big": 2**60}}
    assert (state.flags, state.counters, state.topic) == (["greeted"], {"turns": 2}, "weather")
    assert state.entities == ["Ana", "Porto"]
    assert state.tools.active == [{"name": "search"}]
    assert state.importance == 0.8


def test_get_slides_the_deadline_and_counts_the_access(client: MemoryClient,
                                                       agent_id: str) -> None:
    first = client.update_working(agent_id, THREAD, messages=_say("hi"), ttl_seconds=600)
    again = client.working(agent_id, THREAD)
    assert again.access_count == first.access_count + 1
    assert again.expires_at is not None and first.expires_at is not None
    assert again.expires_at >= first.expires_at
    assert again.expires_at - datetime.now(UTC) <= timedelta(seconds=601)
    assert again.version == first.version  # a read is no update


def test_a_thread_never_written_reads_as_version_0_and_is_not_created(
        client: MemoryClient, agent_id: str) -> None:
    assert client.working(agent_id, "nobody-here").version == 0
    assert client.threads(agent_id) == []


def test_a_stale_expected_version_raises_conflict_and_changes_nothing(
        client: MemoryClient, agent_id: str) -> None:
    client.update_working(agent_id, THREAD, topic="one")
    client.update_working(agent_id, THREAD, topic="two", expected_version=1)
    with pytest.raises(Conflict):
        client.update_working(agent_id, THREAD, topic="three", expected_version=1)
    state = client.working(agent_id, THREAD)
    assert (state.version, state.topic) == (2, "two")


def _hammer(broker_url: str, agent_id: str, writer: int, rounds: int) -> None:
    with MemoryClient(broker_url=broker_url) as client:
        for n in range(rounds):
            client.update_working(agent_id, THREAD, increment={"hits": 1},
                                  variables={f"w{writer}": n})


def test_sixteen_processes_updating_one_thread_lose_no_update(
        client: MemoryClient, agent_id: str, worker_broker_url: str) -> None:
    rounds = 25
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_hammer, args=(worker_broker_url, agent_id, w, rounds))
               for w in range(16)]
    for process in writers:
        process.start()
    for process in writers:
        process.join(timeout=120)
        assert process.exitcode == 0
    state = client.working(agent_id, THREAD)
    assert state.counters == {"hits": 16 * rounds}
    assert state.version == 16 * rounds
    assert state.variables == {f"w{w}": rounds - 1 for w in range(16)}


def test_compare_and_set_loops_of_many_writers_apply_each_change_once(
        client: MemoryClient, agent_id: str) -> None:
    client.update_working(agent_id, THREAD, variables={"n": 0})

    def bump() -> None:
        while True:
            state = client.working(agent_id, THREAD)
            try:
                client.update_working(agent_id, THREAD, variables={
                    "n": state.variables["n"] + 1}, expected_version=state.version)
                return
            except Conflict:
                continue

    import threading
    threads = [threading.Thread(target=bump) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert client.working(agent_id, THREAD).variables["n"] == 8


def test_a_thread_over_50_messages_keeps_the_first_5_and_the_last_40(
        client: MemoryClient, agent_id: str) -> None:
    state = client.update_working(agent_id, THREAD, messages=_say(
        *(f"Message {n} of the thread" for n in range(1, 52))))
    assert [m.seq for m in state.messages] == [*range(1, 6), *range(12, 52)]
    assert state.promoted == 6


def test_more_than_100_variables_lose_the_least_recently_set(client: MemoryClient,
                                                              agent_id: str) -> None:
    client.update_working(agent_id, THREAD, variables={f"v{n}": n for n in range(100)})
    client.update_working(agent_id, THREAD, variables={"v0": "again"})
    state = client.update_working(agent_id, THREAD, variables={"v100": 100})
    assert len(state.variables) == 100
    assert state.variables["v0"] == "again"
    assert "v1" not in state.variables
    assert "v2" in state.variables


@pytest.mark.parametrize(("update", "field"), [
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": "  "}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "ok"}], "verbs": 1}, "verbs"),
    ({"variables": {"deep": _nested(40)}},
     "variables.deep"),
    ({"set_flags": [f"f{n}" for n in range(300)]}, "set_flags"),
    ({"increment": {"c": 2**60}}, "increment.c"),
    ({"topic": "x\x00y"}, "topic"),
    ({"ttl_seconds": 0}, "ttl_seconds"),
])
def test_a_refused_update_names_its_field_and_changes_nothing(
        client: MemoryClient, agent_id: str, update: dict[str, object], field: str) -> None:
    before = client.update_working(agent_id, THREAD, messages=_say("kept"))
    with pytest.raises(ValidationError) as refused:
        client.update_working(agent_id, THREAD, update)
    assert refused.value.field == field
    _unchanged(client.working(agent_id, THREAD), before)


def test_a_message_over_the_content_limit_is_refused_as_too_large(
        client: MemoryClient, agent_id: str) -> None:
    huge = "x" * (client.settings.max_content_bytes + 1)
    with pytest.raises(ContentTooLarge) as refused:
        client.update_working(agent_id, THREAD, messages=_say(huge))
    assert refused.value.field == "messages[0].content"
    assert client.working(agent_id, THREAD).version == 0


def test_a_counter_pushed_out_of_range_refuses_the_whole_update(
        client: MemoryClient, agent_id: str) -> None:
    before = client.update_working(agent_id, THREAD, increment={"c": 2**52})
    with pytest.raises(ValidationError) as refused:
        client.update_working(agent_id, THREAD, messages=_say("not appended"),
                              increment={"c": 2**52})
    assert refused.value.field == "increment.c"
    _unchanged(client.working(agent_id, THREAD), before)


def _unchanged(after: WorkingMemory, before: WorkingMemory) -> None:
    assert after.version == before.version
    assert after.messages == before.messages
    assert (after.variables, after.flags, after.counters, after.topic) == (
        before.variables, before.flags, before.counters, before.topic)


def test_one_agents_thread_is_not_another_agents(client: MemoryClient, agent_id: str) -> None:
    client.update_working(agent_id, THREAD, messages=_say("mine"))
    other = f"{agent_id}-other"
    assert client.working(other, THREAD).version == 0
    assert client.threads(other) == []
    assert [t.thread_id for t in client.threads(agent_id)] == [THREAD]


def test_clear_empties_the_thread_and_keeps_it_alive(client: MemoryClient,
                                                     agent_id: str) -> None:
    client.update_working(agent_id, THREAD, messages=_say("one", "two"), topic="t",
                          variables={"a": 1}, set_flags=["f"], increment={"c": 1})
    state = client.clear_working(agent_id, THREAD)
    assert (state.messages, state.variables, state.flags, state.counters, state.topic) == (
        [], {}, [], {}, None)
    assert state.version == 2
    assert state.promoted == 2
    nxt = client.update_working(agent_id, THREAD, messages=_say("three"))
    assert [m.seq for m in nxt.messages] == [3]


def test_concurrent_pops_each_take_a_different_message(client: MemoryClient,
                                                       agent_id: str) -> None:
    import threading

    client.update_working(agent_id, THREAD, messages=_say(*(f"m{n}" for n in range(20))))
    taken: list[str] = []

    def pop() -> None:
        while (message := client.pop_message(agent_id, THREAD)) is not None:
            taken.append(message.content)

    poppers = [threading.Thread(target=pop) for _ in range(4)]
    for popper in poppers:
        popper.start()
    for popper in poppers:
        popper.join(timeout=60)
    assert sorted(taken) == sorted(f"m{n}" for n in range(20))
    assert client.working(agent_id, THREAD).messages == []
    assert client.pop_message(agent_id, THREAD) is None


def test_messages_on_their_way_to_long_term_memory_are_listed_only_when_asked(
        client: MemoryClient, agent_id: str) -> None:
    working = client.working_store  # straight to Redis: nothing is promoted meanwhile
    working.update(agent_id, THREAD, {"messages": _say(*(f"m{n}" for n in range(60)))})
    assert client.working(agent_id, THREAD).pending == []
    pending = client.working(agent_id, THREAD, pending=True).pending
    assert [m.content for m in pending] == [f"m{n}" for n in range(20)]


def test_an_update_given_both_as_a_mapping_and_as_keywords_is_refused(
        client: MemoryClient, agent_id: str) -> None:
    with pytest.raises(ValidationError) as refused:
        client.update_working(agent_id, THREAD, {"topic": "one"}, topic="two")
    assert refused.value.field == "update"
    assert client.working(agent_id, THREAD).version == 0
