"""Promotion of working memory into long-term memory, through the real worker: on end, on
trimming, on expiry, exactly once when a promoter dies on either side of its commit, and
across a Redis restart; erasure reaches working memory too."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import text

from memoryd.client import MemoryClient
from memoryd.config import Settings
from memoryd.embedded.redis import EmbeddedRedis
from memoryd.memory import promotion
from memoryd.memory.store import MemoryStore
from memoryd.types import Erasure, Memory
from memoryd.working.store import PREFIX, WorkingStore, thread_tag
from tests.integration.conftest import TEST_HOME

THREAD = "conversation-7"
SWEEP_WAIT_S = 60.0  # the session worker sweeps every 10 s; a lapsed claim waits one lease


def _say(*contents: str) -> list[dict[str, str]]:
    return [{"role": "user" if n % 2 == 0 else "assistant", "content": content}
            for n, content in enumerate(contents)]


def _until(found: Callable[[], Any], timeout: float = SWEEP_WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = found()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.25)


def _messages(client: MemoryClient, agent: str, count: int) -> list[Memory]:
    """The session's messages once there are ``count`` of them (or at the deadline)."""
    _until(lambda: len(client.session_messages(agent, THREAD)) >= count)
    return client.session_messages(agent, THREAD)


def test_ending_a_thread_makes_its_messages_the_sessions_in_order_repeats_included(
        client: MemoryClient, agent_id: str, worker: object) -> None:
    said = ("I need a table for two.", "yes", "For Friday evening?", "yes", "Done.")
    client.update_working(agent_id, THREAD, messages=_say(*said))
    done = client.end_thread(agent_id, THREAD)
    assert (done.promoted, done.already, done.ended) == (5, 0, True)
    messages = client.session_messages(agent_id, THREAD)
    assert [m.content for m in messages] == list(said)
    assert client.working(agent_id, THREAD).version == 0
    assert client.threads(agent_id) == []


def test_ending_a_thread_that_has_none_promotes_nothing(client: MemoryClient,
                                                        agent_id: str) -> None:
    done = client.end_thread(agent_id, "never-started")
    assert (done.promoted, done.ended) == (0, False)


def test_a_thread_reused_after_its_end_appends_to_the_same_session(
        client: MemoryClient, agent_id: str, worker: object) -> None:
    client.update_working(agent_id, THREAD, messages=_say("First visit."))
    client.end_thread(agent_id, THREAD)
    client.update_working(agent_id, THREAD, messages=_say("Second visit."))
    client.end_thread(agent_id, THREAD)
    assert [m.content for m in client.session_messages(agent_id, THREAD)] == [
        "First visit.", "Second visit."]


def test_trimmed_messages_reach_long_term_memory_at_once_and_the_rest_on_end(
        client: MemoryClient, agent_id: str, worker: object) -> None:
    said = [f"Turn {n} of a long conversation about gardening." for n in range(1, 56)]
    state = client.update_working(agent_id, THREAD, messages=_say(*said))
    assert len(state.messages) == 45
    trimmed = _messages(client, agent_id, 15)  # the first 5 go too, and stay
    assert [m.content for m in trimmed] == said[:15]
    assert [m.content for m in client.working(agent_id, THREAD).messages[:5]] == said[:5]
    client.end_thread(agent_id, THREAD)
    assert [m.content for m in client.session_messages(agent_id, THREAD)] == said


def test_a_thread_past_its_ttl_is_promoted_by_a_workers_sweep(
        client: MemoryClient, agent_id: str, worker: object) -> None:
    client.update_working(agent_id, THREAD, messages=_say("Short-lived note."),
                          ttl_seconds=1)
    messages = _messages(client, agent_id, 1)
    assert [m.content for m in messages] == ["Short-lived note."]
    assert client.threads(agent_id) == []
    assert client.working(agent_id, THREAD).version == 0


def _retired(client: MemoryClient, agent: str, said: tuple[str, ...]) -> str:
    client.update_working(agent, THREAD, messages=_say(*said))
    tag = client.working_store.retire(agent, THREAD)
    assert tag is not None
    return tag


def _lapse(working: WorkingStore, tag: str) -> None:
    """The promoter holding ``tag`` died: its claim lapses now."""
    working.redis.zadd(f"{PREFIX}work", {tag: 0})


def _ledger(store: MemoryStore, agent: str) -> int:
    with store.session() as session:
        return int(session.execute(text("SELECT count(*) FROM working_promotions "
                                        "WHERE agent_id = :a"), {"a": agent}).scalar_one())


def test_a_promoter_dying_after_its_commit_leaves_nothing_written_twice(
        client: MemoryClient, store: MemoryStore, agent_id: str, worker: object) -> None:
    said = ("Alpha message.", "Beta message.", "Gamma message.")
    tag = _retired(client, agent_id, said)
    working = client.working_store
    assert promotion.write(store, working.read(tag)) == 3  # committed, never acknowledged
    _lapse(working, tag)
    assert _until(lambda: not working.redis.exists(f"{PREFIX}{tag}:meta"))
    assert [m.content for m in client.session_messages(agent_id, THREAD)] == list(said)
    assert _ledger(store, agent_id) == 3


def test_a_promoter_dying_before_its_commit_leaves_the_thread_to_the_next(
        client: MemoryClient, store: MemoryStore, agent_id: str, worker: object) -> None:
    said = ("One thing.", "Another thing.")
    tag = _retired(client, agent_id, said)  # claimed by this caller, who never promotes
    _lapse(client.working_store, tag)
    assert [m.content for m in _messages(client, agent_id, 2)] == list(said)
    assert _ledger(store, agent_id) == 2


def test_working_memory_and_its_pending_promotions_survive_a_redis_restart() -> None:
    # Beside the session's servers, where the service user may go (not in tmp_path).
    server = EmbeddedRedis(TEST_HOME / f"redis-restart-{uuid.uuid4().hex[:8]}")
    server.start()
    try:
        settings = Settings(working_redis_url=server.url)
        working = WorkingStore.from_settings(settings)
        said = [f"Line {n} before the restart." for n in range(60)]
        working.update("agent-restart", THREAD, {"messages": _say(*said)})
        before = working.get("agent-restart", THREAD)
        working.close()
        server.stop()
        server.start()
        working = WorkingStore.from_settings(settings)
        after = working.get("agent-restart", THREAD)
        assert after.messages == before.messages
        assert after.version == before.version
        tags = working.sweep() + [str(t) for t in working.redis.zrange(f"{PREFIX}work", 0, -1)]
        spilled = working.read(next(t for t in tags if t.endswith("}")))
        assert [m.content for m in spilled.messages] == said[:20]
        working.close()
    finally:
        server.stop()


def test_erasing_an_agent_deletes_its_working_memory(client: MemoryClient, agent_id: str,
                                                     worker: object) -> None:
    client.update_working(agent_id, THREAD, messages=_say("Something private."))
    client.update_working(agent_id, "second", topic="x")
    erased = client.forget_agent(agent_id)
    assert isinstance(erased, Erasure) and erased.complete
    assert client.threads(agent_id) == []
    assert client.working(agent_id, THREAD).version == 0
    for thread in (THREAD, "second"):
        assert client.working_store.redis.keys(f"{PREFIX}{thread_tag(agent_id, thread)}*") == []


def test_a_late_acknowledgement_never_trims_the_next_generations_spill(
        client: MemoryClient, agent_id: str) -> None:
    working = client.working_store  # straight to Redis: no promotion is sent meanwhile
    said = [f"Old line {n}." for n in range(60)]
    working.update(agent_id, THREAD, {"messages": _say(*said)})
    stale = working.read(thread_tag(agent_id, THREAD))  # a promoter reads, then stalls
    assert working.retire(agent_id, THREAD) is not None
    working.update(agent_id, THREAD, {"messages": _say(*(f"New line {n}." for n in range(60)))})
    working.ack(stale)
    fresh = working.read(thread_tag(agent_id, THREAD))
    assert [m.content for m in fresh.messages] == [f"New line {n}." for n in range(20)]


def test_overlapping_promoters_of_a_spill_never_trim_what_neither_read(
        client: MemoryClient, agent_id: str) -> None:
    working = client.working_store  # straight to Redis: no promotion is sent meanwhile
    tag = thread_tag(agent_id, THREAD)
    working.update(agent_id, THREAD, {"messages": _say(*(f"A{n}" for n in range(60)))})
    first = working.read(tag)  # head 5 and middle 15
    working.update(agent_id, THREAD, {"messages": _say(*(f"B{n}" for n in range(10)))})
    second = working.read(tag)  # the same, and the second trim's 10
    working.ack(first)
    working.update(agent_id, THREAD, {"messages": _say(*(f"C{n}" for n in range(10)))})
    working.ack(second)  # acknowledged last, having read more than the first
    left = working.read(tag)
    assert [m.seq for m in left.messages] == [m.seq for m in left.messages if m.seq > max(
        message.seq for message in second.messages)]
    assert len(left.messages) == 10
