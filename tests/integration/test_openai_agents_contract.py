"""``MemorydSession`` against the OpenAI Agents SDK's own ``SQLiteSession``, the same test
bodies run on both (only the factory differs): the cases of the SDK's session suites that
every session shares, ported in focus from openai/openai-agents-python (MIT):
tests/memory/test_session.py and tests/extensions/memory/test_sqlalchemy_session.py
(its concurrent pops), through a real worker."""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import SQLiteSession
from agents.memory import SessionSettings

from memoryd.client import MemoryClient
from memoryd.errors import ValidationError
from memoryd.integrations.openai_agents import MemorydSession

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("worker")]

Factory = Callable[..., Any]


@pytest.fixture(params=["memoryd", "reference"])
def make(request: pytest.FixtureRequest, client: MemoryClient, tmp_path: Path
         ) -> Iterator[Factory]:
    """A factory of sessions of one kind; the same session id is the same session, seen
    through another object (another process would open it so)."""
    agent = f"agent-{uuid.uuid4()}"
    opened: list[SQLiteSession] = []

    def factory(session_id: str = "chat", **options: Any) -> Any:
        if request.param == "memoryd":
            return MemorydSession(session_id, client=client, agent_id=agent, **options)
        session = SQLiteSession(session_id, tmp_path / "sessions.db", **options)
        opened.append(session)
        return session

    yield factory
    for session in opened:
        session.close()


def _contents(items: list[Any]) -> list[Any]:
    return [item.get("content") if isinstance(item, dict) else item for item in items]


def _said(*texts: str) -> list[Any]:
    return [{"role": ("user", "assistant")[n % 2], "content": t} for n, t in enumerate(texts)]


def test_items_are_added_read_and_cleared(make: Factory) -> None:
    async def run() -> None:
        session = make()
        await session.add_items(_said("Hello", "Hi there!"))
        assert _contents(await session.get_items()) == ["Hello", "Hi there!"]
        await session.clear_session()
        assert await session.get_items() == []

    asyncio.run(run())


def test_pop_item_takes_the_newest_until_none_and_only_from_its_session(
        make: Factory) -> None:
    async def run() -> None:
        session, other = make("one"), make("two")
        assert await session.pop_item() is None
        await session.add_items(_said("Hello", "Hi there!", "How are you?"))
        await other.add_items(_said("Elsewhere"))
        popped = [await session.pop_item() for _ in range(4)]
        assert _contents(popped[:3]) == ["How are you?", "Hi there!", "Hello"]
        assert popped[3] is None
        assert _contents(await other.get_items()) == ["Elsewhere"]

    asyncio.run(run())


def test_get_items_reads_the_latest_limit_in_order(make: Factory) -> None:
    async def run() -> None:
        session = make()
        said = [f"Message {n}" for n in range(6)]
        await session.add_items(_said(*said))
        assert _contents(await session.get_items(limit=2)) == said[-2:]
        assert _contents(await session.get_items(limit=4)) == said[-4:]
        assert _contents(await session.get_items(limit=10)) == said
        assert await session.get_items(limit=0) == []

    asyncio.run(run())


def test_unicode_and_sql_keywords_come_back_as_they_went_in(make: Factory) -> None:
    said = ["こんにちは", "😊👍", "Привет", "O'Reilly", "DROP TABLE sessions;",
            '"SELECT * FROM users WHERE name = "admin";"', "Robert'); DROP TABLE students;--"]

    async def run() -> None:
        session = make()
        await session.add_items(_said(*said))
        assert _contents(await session.get_items()) == said

    asyncio.run(run())


def test_items_added_from_several_threads_are_all_kept(make: Factory) -> None:
    session = make()

    def add(item: Any) -> None:
        asyncio.run(session.add_items([item]))

    with concurrent.futures.ThreadPoolExecutor(max_workers=5) as pool:
        list(pool.map(add, [{"role": "user", "content": f"Message {n}"} for n in range(10)]))
    found = asyncio.run(session.get_items())
    assert set(_contents(found)) == {f"Message {n}" for n in range(10)}


# --- concurrent pops ---------------------------------------------------------------------
def test_concurrent_pops_return_each_item_once_and_empty_the_session(make: Factory) -> None:
    """Once, a pop read the newest item then forgot it: two pops at once returned the same
    item. Two session objects pop at once too, as two processes would."""
    async def run() -> None:
        session, again = make(), make()
        said = [f"Item {n}" for n in range(8)]
        await session.add_items(_said(*said))
        popped = await asyncio.gather(*[(session, again)[n % 2].pop_item()
                                        for n in range(len(said))])
        assert sorted(_contents(popped)) == sorted(said)
        assert await session.get_items() == []
        assert await session.pop_item() is None

    asyncio.run(run())


def test_more_concurrent_pops_than_items_return_each_item_once_and_none_after(
        make: Factory) -> None:
    async def run() -> None:
        session = make()
        await session.add_items(_said("first", "second"))
        popped = await asyncio.gather(*[session.pop_item() for _ in range(5)])
        assert sorted(c for c in _contents(popped) if c is not None) == ["first", "second"]
        assert popped.count(None) == 3

    asyncio.run(run())


# --- session_settings ----------------------------------------------------------------------
def test_session_settings_default_to_empty_settings(make: Factory) -> None:
    session = make()
    assert isinstance(session.session_settings, SessionSettings)
    assert session.session_settings.limit is None


def test_session_settings_given_or_as_a_dict_are_normalised(make: Factory) -> None:
    given = make(session_settings=SessionSettings(limit=5))
    assert given.session_settings.limit == 5
    as_dict = make(session_settings={"limit": 0})
    assert isinstance(as_dict.session_settings, SessionSettings)
    assert as_dict.session_settings.limit == 0
    assert as_dict.session_settings.resolve({"limit": 4}).limit == 4


def test_unknown_session_settings_are_refused_by_name(make: Factory) -> None:
    with pytest.raises(TypeError, match="Unknown session settings: limitt") as refused:
        make(session_settings={"limitt": 1})
    with pytest.raises(TypeError):
        make(session_settings=["limit", 1])
    if not isinstance(refused.value, ValidationError):
        return  # the reference raises the SDK's TypeError alone
    assert refused.value.field == "session_settings"


def test_get_items_reads_the_settings_limit_unless_one_is_given(make: Factory) -> None:
    async def run() -> None:
        session = make(session_settings=SessionSettings(limit=3))
        said = [f"Message {n}" for n in range(5)]
        await session.add_items(_said(*said))
        assert _contents(await session.get_items()) == said[-3:]
        assert _contents(await session.get_items(limit=2)) == said[-2:]

    asyncio.run(run())


# --- items that are not JSON objects --------------------------------------------------------
def test_an_item_that_is_not_a_json_object_comes_back_as_the_same_json_type(
        make: Factory) -> None:
    """The SDK's sessions write any JSON value and read it back as it was; memoryd once
    refused all but objects."""
    odd: list[Any] = ["plain text", 42, 2.5, [1, "two", None], None, True, {"nested": [1]}]

    async def run() -> None:
        session = make()
        await session.add_items(odd)
        assert await session.get_items() == odd
        assert await session.pop_item() == {"nested": [1]}
        assert await session.pop_item() is True

    asyncio.run(run())
