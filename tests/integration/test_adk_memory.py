"""``MemorydMemoryService`` as Google ADK uses it: a session built with ADK's own
``InMemorySessionService``, its events appended as a runner would, added to memory (again
and again, as ADK does after each turn) and searched, through a real worker."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest
from google.adk.events.event import Event
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions import InMemorySessionService, Session
from google.genai import types

from memoryd.client import MemoryClient
from memoryd.errors import ValidationError
from memoryd.integrations.adk import MemorydMemoryService

pytestmark = pytest.mark.slow
WHEN = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC).timestamp()


def _said(author: str, text: str, *, at: float = WHEN) -> Event:
    role = "user" if author == "user" else "model"
    return Event(author=author, invocation_id="inv-1", timestamp=at,
                 content=types.Content(role=role, parts=[types.Part(text=text)]))


async def _session(app: str) -> tuple[InMemorySessionService, Session]:
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name=app, user_id="ana")
    for event in [
            _said("user", "I keep my bicycle in the garage behind the house."),
            _said("shop_agent", "Noted, I will remember that.", at=WHEN + 1),
            Event(author="shop_agent", content=types.Content(role="model", parts=[
                types.Part(function_call=types.FunctionCall(name="lookup", args={}))])),
            _said("user", "My favourite colour is teal.", at=WHEN + 2)]:
        await sessions.append_event(session, event)
    return sessions, session


@pytest.fixture
def app() -> str:
    return f"shop-{uuid.uuid4()}"


def test_a_session_added_again_and_again_is_stored_once_and_searched(
        worker: object, client: MemoryClient, app: str) -> None:
    service = MemorydMemoryService(client)

    async def run() -> None:
        sessions, session = await _session(app)
        await service.add_session_to_memory(session)
        await service.add_session_to_memory(session)
        await sessions.append_event(session, _said("user", "I moved to Porto.", at=WHEN + 3))
        await service.add_session_to_memory(session)
        stored = client.session_messages(f"{app}/ana", session.id)
        assert [m.content for m in stored] == [
            "I keep my bicycle in the garage behind the house.",
            "Noted, I will remember that.", "My favourite colour is teal.",
            "I moved to Porto."]
        found = await service.search_memory(app_name=app, user_id="ana",
                                            query="where is the bicycle kept?")
        best = found.memories[0]
        assert best.content.parts[0].text == stored[0].content
        assert best.author == "user" and best.content.role == "user"
        assert best.custom_metadata["session_id"] == session.id
        assert best.custom_metadata["event_id"] == session.events[0].id
        assert datetime.fromisoformat(best.timestamp).timestamp() == WHEN
        other = await service.search_memory(app_name=app, user_id="bob", query="bicycle")
        assert other.memories == []

    asyncio.run(run())


def test_event_deltas_and_explicit_memories_go_in_once_and_can_be_deleted(
        worker: object, client: MemoryClient, app: str) -> None:
    service = MemorydMemoryService(client)
    event = _said("user", "The meeting moved to Thursday.")
    entry = MemoryEntry(id="pref-1", author="ops", timestamp="2026-01-02T03:04:05",
                        content=types.Content(parts=[types.Part(text="Ana prefers tea.")]))

    async def run() -> None:
        for _ in range(2):
            await service.add_events_to_memory(app_name=app, user_id="ana", events=[event],
                                               custom_metadata={"channel": "chat"})
            await service.add_memory(app_name=app, user_id="ana", memories=[entry])
        event.content.parts[0].text = "The meeting moved to Friday."  # the event, edited
        await service.add_events_to_memory(app_name=app, user_id="ana", events=[event],
                                           custom_metadata={"channel": "chat"})
        page = client.list(f"{app}/ana")
        assert sorted(m.content for m in page.items) == [
            "Ana prefers tea.", "The meeting moved to Friday."]
        found = await service.search_memory(app_name=app, user_id="ana", query="meeting day")
        assert found.memories[0].custom_metadata["channel"] == "chat"
        await service.delete_memory(app_name=app, user_id="ana",
                                    memory_id=found.memories[0].id)
        assert [m.content for m in client.list(f"{app}/ana").items] == ["Ana prefers tea."]

    asyncio.run(run())


def test_a_bad_scope_or_timestamp_is_refused_by_name(worker: object, client: MemoryClient,
                                                     app: str) -> None:
    service = MemorydMemoryService(client)
    with pytest.raises(ValidationError) as refused:
        asyncio.run(service.search_memory(app_name="", user_id="ana", query="x"))
    assert refused.value.field == "app_name"
    late = MemoryEntry(timestamp="last tuesday",
                       content=types.Content(parts=[types.Part(text="Something.")]))
    with pytest.raises(ValidationError) as refused:
        asyncio.run(service.add_memory(app_name=app, user_id="ana", memories=[late]))
    assert refused.value.field == "memories[0].timestamp"


def test_search_memory_does_not_collide_on_slash_in_identifiers(
        worker: object, client: MemoryClient) -> None:
    """ADK's own test of its memory services (tests/unittests/memory/
    test_in_memory_memory_service.py), as it is, with the owner's search as the control."""
    service = MemorydMemoryService(client)

    async def run() -> None:
        await service.add_session_to_memory(Session(
            app_name="app/other-user", user_id="user", id="session-slashed-app",
            last_update_time=1000, events=[Event(
                id="event-slashed-app", invocation_id="inv-slashed-app", author="user",
                timestamp=12345,
                content=types.Content(parts=[types.Part(text="This is a secret.")]))]))
        result = await service.search_memory(app_name="app", user_id="other-user/user",
                                             query="secret")
        assert not result.memories
        owner = await service.search_memory(app_name="app/other-user", user_id="user",
                                            query="secret")
        assert [m.content.parts[0].text for m in owner.memories] == ["This is a secret."]
        assert owner.memories[0].custom_metadata["adk_scope"] == ["app/other-user", "user"]

    asyncio.run(run())


def test_pairs_with_separators_in_either_part_never_share_memories(
        worker: object, client: MemoryClient, app: str) -> None:
    # Every pair here shared an agent with another under the older "{app}/{user}", or
    # would share one under an encoding that left "%" or ":" unescaped.
    pairs = [(f"{app}/x", "y"), (app, "x/y"), (f"{app}%2Fx", "y"), (f"{app}%x", "y"),
             (f"{app}%25x", "y"), (f"{app}:x", "y"), (app, "x:y"), (f"{app}/", "x"),
             (app, "/x"), (f"{app}%", "x"), (app, "%x"), (f"{app}%2F", "x"),
             (app, "%2Fx"), (f"{app}\\", "x"), (app, "\\x")]
    service = MemorydMemoryService(client)

    async def run() -> None:
        for n, (app_name, user_id) in enumerate(pairs):
            await service.add_memory(app_name=app_name, user_id=user_id, memories=[
                MemoryEntry(id=f"m{n}", content=types.Content(
                    parts=[types.Part(text=f"Secret number {n} is kept here.")]))])
        for n, (app_name, user_id) in enumerate(pairs):
            found = await service.search_memory(app_name=app_name, user_id=user_id,
                                                query="which secret number is kept here?")
            assert [m.content.parts[0].text for m in found.memories] == [
                f"Secret number {n} is kept here."], (app_name, user_id)

    asyncio.run(run())
