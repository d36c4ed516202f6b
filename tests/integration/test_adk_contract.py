"""``MemorydMemoryService`` against Google ADK's own ``InMemoryMemoryService``, the same
test bodies run on both (only the factory differs): the cases of ADK's memory service
suite, ported in focus from google/adk-python (Apache-2.0):
tests/unittests/memory/test_in_memory_memory_service.py, through a real worker.

ADK's service answers the events sharing a word with the query, ranked by how many;
memoryd's answers recall's ranking, cut by a relevance floor (``min_score``). Where the
two differ on purpose (docs/frameworks.md), the test says so."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from google.adk.events.event import Event
from google.adk.memory import InMemoryMemoryService
from google.adk.memory.base_memory_service import BaseMemoryService
from google.adk.sessions.session import Session
from google.genai import types

from memoryd.client import MemoryClient
from memoryd.errors import ValidationError
from memoryd.integrations.adk import MemorydMemoryService

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("worker")]

Factory = Callable[..., BaseMemoryService]
USER, OTHER = "test-user", "another-user"
# Facts of one conversation, and queries: each related one shares a word with its fact,
# the unrelated ones share no word with any fact (ADK's service matches any word).
FACTS = ["Paris is known for the Eiffel Tower and amazing cuisine.",
         "Jupiter is the largest planet in our solar system.",
         "The user lives in Lisbon.", "The user's cat is called Miso.",
         "I keep my bicycle in the garage behind the house.", "My favourite colour is teal.",
         "The meeting moved to Friday.", "Ana prefers jasmine tea."]
RELATED = {"Tell me about Paris": 0, "Jupiter facts": 1, "Lisbon weather": 2,
           "bicycle garage": 4, "meeting day": 6, "jasmine": 7}
UNRELATED = ["explain photosynthesis", "stock market news", "christmas song lyrics",
             "cake recipe", "quantum chromodynamics lecture"]


@pytest.fixture(params=["memoryd", "reference"])
def make(request: pytest.FixtureRequest, client: MemoryClient) -> Iterator[Factory]:
    def factory(**options: Any) -> BaseMemoryService:
        if request.param == "memoryd":
            return MemorydMemoryService(client, **options)
        return InMemoryMemoryService()

    yield factory


@pytest.fixture
def app() -> str:
    return f"test-app-{uuid.uuid4()}"


def _event(tag: str, text: str | None, *, author: str = "user", at: float = 12345) -> Event:
    content = None if text is None else types.Content(parts=[types.Part(text=text)])
    return Event(id=f"event-{tag}", invocation_id=f"inv-{tag}", author=author, timestamp=at,
                 content=content)


def _session(app: str, user: str, sid: str, events: list[Event]) -> Session:
    return Session(app_name=app, user_id=user, id=sid, last_update_time=1000, events=events)


def _texts(found: Any) -> list[str]:
    return [m.content.parts[0].text for m in found.memories]


def _first_sessions(app: str) -> list[Session]:
    return [
        _session(app, USER, "session-1", [
            _event("1a", "The ADK is a great toolkit."), _event("1b", None, at=12346),
            _event("1c", "I agree. The Agent Development Kit (ADK) rocks!", author="model",
                   at=12347)]),
        _session(app, USER, "session-2", [_event("2a", "I like to code in Python.", at=54321)]),
        _session(app, OTHER, "session-3", [_event("3a", "This is a secret.", at=60000)])]


def test_searches_find_the_matching_events_of_their_user_only(make: Factory,
                                                              app: str) -> None:
    service = make()

    async def run() -> None:
        for session in _first_sessions(app):
            await service.add_session_to_memory(session)
        found = await service.search_memory(app_name=app, user_id=USER, query="Python")
        assert _texts(found) == ["I like to code in Python."]
        assert found.memories[0].author == "user"
        found = await service.search_memory(app_name=app, user_id=USER, query="development")
        assert _texts(found) == ["I agree. The Agent Development Kit (ADK) rocks!"]
        found = await service.search_memory(app_name=app, user_id=USER,
                                            query="How about ADK?")
        assert sorted(_texts(found)) == ["I agree. The Agent Development Kit (ADK) rocks!",
                                         "The ADK is a great toolkit."]
        assert (await service.search_memory(app_name=app, user_id=USER,
                                            query="nonexistent")).memories == []
        assert (await service.search_memory(app_name=app, user_id=USER,
                                            query="secret")).memories == []
        found = await service.search_memory(app_name=app, user_id=OTHER, query="secret")
        assert _texts(found) == ["This is a secret."]

    asyncio.run(run())


def test_a_blank_query_or_a_session_without_events_finds_nothing(make: Factory,
                                                                 app: str) -> None:
    service = make()

    async def run() -> None:
        await service.add_session_to_memory(_session(app, USER, "empty", []))
        assert (await service.search_memory(app_name=app, user_id=USER,
                                            query="anything")).memories == []
        for session in _first_sessions(app):
            await service.add_session_to_memory(session)
        for blank in ("", "   "):
            assert (await service.search_memory(app_name=app, user_id=USER,
                                                query=blank)).memories == []

    asyncio.run(run())


def test_a_slash_in_an_identifier_cannot_reach_another_pairs_memories(make: Factory,
                                                                      app: str) -> None:
    service = make()

    async def run() -> None:
        await service.add_session_to_memory(_session(f"{app}/other-user", "user", "s", [
            _event("slashed", "This is a secret.")]))
        assert (await service.search_memory(app_name=app, user_id="other-user/user",
                                            query="secret")).memories == []

    asyncio.run(run())


def test_memories_do_not_follow_later_changes_to_the_event_or_the_result(
        make: Factory, app: str) -> None:
    service = make()

    async def run() -> None:
        event = _event("tea", "I prefer jasmine tea.")
        await service.add_events_to_memory(app_name=app, user_id=USER, session_id="s",
                                           events=[event])
        assert event.content is not None and event.content.parts is not None
        event.content.parts[0].text = "I prefer coffee."
        first = await service.search_memory(app_name=app, user_id=USER, query="jasmine")
        assert _texts(first) == ["I prefer jasmine tea."]
        assert first.memories[0].content.parts is not None
        first.memories[0].content.parts.clear()
        again = await service.search_memory(app_name=app, user_id=USER, query="jasmine")
        assert _texts(again) == ["I prefer jasmine tea."]

    asyncio.run(run())


def test_an_event_added_again_under_its_id_is_kept_once(make: Factory, app: str) -> None:
    """Both keep one memory per event id; ADK's keeps the first text, memoryd the last
    (an edited event replaces what it said: docs/frameworks.md)."""
    service = make()

    async def run() -> None:
        await service.add_events_to_memory(app_name=app, user_id=USER, session_id="s",
                                           events=[_event("a", "The deploy is ready.")])
        await service.add_events_to_memory(app_name=app, user_id=USER, session_id="s",
                                           events=[_event("a", "The deploy is blocked.")])
        found = _texts(await service.search_memory(app_name=app, user_id=USER,
                                                   query="deploy"))
        kept = ("The deploy is blocked." if isinstance(service, MemorydMemoryService)
                else "The deploy is ready.")
        assert found == [kept]

    asyncio.run(run())


# --- the relevance floor --------------------------------------------------------------------
def _facts(app: str) -> Session:
    return _session(app, USER, "facts", [
        _event(f"f{n}", text, author="user" if n % 2 == 0 else "model", at=1000 + n)
        for n, text in enumerate(FACTS)])


def test_unrelated_queries_find_nothing_and_related_ones_find_their_fact(
        make: Factory, app: str) -> None:
    """Once, memoryd answered recall's best whatever the query: unrelated questions got
    memories (a session's events lend each other score, so these scored high)."""
    service = make()

    async def run() -> None:
        await service.add_session_to_memory(_facts(app))
        for query in UNRELATED:
            found = await service.search_memory(app_name=app, user_id=USER, query=query)
            assert found.memories == [], query
        for query, fact in RELATED.items():
            found = await service.search_memory(app_name=app, user_id=USER, query=query)
            assert _texts(found)[:1] == [FACTS[fact]], query

    asyncio.run(run())


def test_without_a_floor_memoryd_answers_recalls_best_whatever_the_query(
        client: MemoryClient, app: str) -> None:
    service = MemorydMemoryService(client, limit=3, min_score=None)

    async def run() -> None:
        await service.add_session_to_memory(_facts(app))
        for query in UNRELATED:
            found = await service.search_memory(app_name=app, user_id=USER, query=query)
            assert len(found.memories) == 3, query

    asyncio.run(run())


@pytest.mark.parametrize("floor", [-0.1, 1.5, float("nan"), "0.5", True])
def test_a_floor_outside_zero_to_one_is_refused_by_name(client: MemoryClient,
                                                        floor: object) -> None:
    with pytest.raises(ValidationError) as refused:
        MemorydMemoryService(client, min_score=floor)  # type: ignore[arg-type]
    assert refused.value.field == "min_score"


def test_concurrent_adds_and_searches_keep_every_event(make: Factory, app: str) -> None:
    """ADK's service is safe to use from several threads at once; so is memoryd's."""
    service = make()

    async def run() -> None:
        adds = [service.add_session_to_memory(_session(app, USER, f"s{n}", [
            _event(f"e{n}", f"fact about topic{n}")])) for n in range(8)]
        searches = [service.search_memory(app_name=app, user_id=USER, query="fact")
                    for _ in range(4)]
        await asyncio.gather(*adds, *searches)
        found = await service.search_memory(app_name=app, user_id=USER, query="fact")
        assert sorted(_texts(found)) == sorted(f"fact about topic{n}" for n in range(8))

    asyncio.run(run())
