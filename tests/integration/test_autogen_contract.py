"""``MemorydMemory`` against AutoGen's memories, through a real worker: the cases of
autogen-core's ``ListMemory`` suite (python/packages/autogen-core/tests/test_memory.py)
run on both memories where their contracts meet (only the factory differs), and the
cases of autogen-ext's ``ChromaDBVectorMemory`` suite
(python/packages/autogen-ext/tests/memory/test_chroma_memory.py) on memoryd's alone:
chromadb is not installed here, and its default embedder downloads a model. Ported in
focus from microsoft/autogen (MIT). ``ListMemory`` answers every memory whatever the
query; memoryd's, like Chroma's, the relevant ones (docs/frameworks.md)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from autogen_core import ComponentModel
from autogen_core.memory import ListMemory, Memory, MemoryContent, MemoryMimeType
from autogen_core.model_context import BufferedChatCompletionContext
from autogen_core.models import UserMessage

from memoryd.client import MemoryClient
from memoryd.config import reset_settings
from memoryd.errors import ValidationError
from memoryd.integrations.autogen import MemorydMemory, MemorydMemoryConfig

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("worker")]

Factory = Callable[..., Memory]


@pytest.fixture(params=["memoryd", "reference"])
def make(request: pytest.FixtureRequest, client: MemoryClient) -> Iterator[Factory]:
    def factory() -> Memory:
        if request.param == "memoryd":
            return MemorydMemory(client, agent_id=f"agent-{uuid.uuid4()}")
        return ListMemory()

    yield factory


def _text(text: str, **metadata: Any) -> MemoryContent:
    return MemoryContent(content=text, mime_type=MemoryMimeType.TEXT, metadata=metadata or None)


# --- ListMemory's suite, on both ------------------------------------------------------------
def test_an_empty_memory_adds_nothing_to_the_context_and_finds_nothing(
        make: Factory) -> None:
    memory = make()

    async def run() -> None:
        context = BufferedChatCompletionContext(buffer_size=3)
        result = await memory.update_context(context)
        assert result.memories.results == [] and await context.get_messages() == []
        assert (await memory.query(_text("test"))).results == []

    asyncio.run(run())


def test_text_and_json_come_back_as_their_own_types_and_clear_forgets_them(
        make: Factory) -> None:
    memory = make()

    async def run() -> None:
        await memory.add(_text("The test value is kept as text."))
        await memory.add(MemoryContent(content={"key": "value", "test": True},
                                       mime_type=MemoryMimeType.JSON))
        found = (await memory.query(_text("test value"))).results
        assert {type(r.content) for r in found} == {str, dict}
        assert {"key": "value", "test": True} in [r.content for r in found]
        await memory.clear()
        assert (await memory.query(_text("test value"))).results == []

    asyncio.run(run())


def test_update_context_adds_one_system_message_with_the_memories(make: Factory) -> None:
    memory = make()

    async def run() -> None:
        await memory.add(_text("Test one: the user likes tea."))
        await memory.add(_text("Test two: the user likes green tea."))
        context = BufferedChatCompletionContext(buffer_size=3, initial_messages=[
            UserMessage(content="Which tea does the user like?", source="user")])
        result = await memory.update_context(context)
        messages = await context.get_messages()
        assert len(result.memories.results) == 2 and len(messages) == 2
        assert "Test one" in messages[-1].content and "Test two" in messages[-1].content

    asyncio.run(run())


def test_it_dumps_to_a_component_and_loads_back(make: Factory, worker_broker_url: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The test broker's URL holds a password, so the config leaves it out and the loaded
    memory's client finds the broker as ``MemoryClient()`` does: here, in the
    environment."""
    monkeypatch.setenv("MEMORYD_BROKER_URL", worker_broker_url)
    reset_settings()
    memory = make()

    async def run() -> None:
        await memory.add(_text("A note the loaded memory should find."))
        config = memory.dump_component()
        assert isinstance(config, ComponentModel) and config.component_type == "memory"
        loaded = Memory.load_component(json.loads(config.model_dump_json()))
        assert type(loaded) is type(memory)
        if isinstance(memory, ListMemory):
            return  # ListMemory's config carries its contents
        found = (await loaded.query("which note should be found?")).results
        assert [r.content for r in found] == ["A note the loaded memory should find."]
        await loaded.close()

    try:
        asyncio.run(run())
    finally:
        monkeypatch.delenv("MEMORYD_BROKER_URL")
        reset_settings()


# --- ChromaDBVectorMemory's suite, on memoryd's --------------------------------------------
def test_a_related_query_finds_its_memory_and_an_unrelated_one_finds_nothing(
        client: MemoryClient, agent_id: str) -> None:
    """Chroma's strict matching; once, memoryd answered recall's best whatever was
    asked."""
    memory = MemorydMemory(client, agent_id=agent_id)

    async def run() -> None:
        await memory.add(_text("Specific technical details about quantum computing"))
        await memory.add(_text("Paris is known for the Eiffel Tower and amazing cuisine."))
        found = (await memory.query("quantum computing details")).results
        assert [r.content for r in found] == [
            "Specific technical details about quantum computing"]
        assert all(r.metadata and r.metadata["score"] >= 0.7 for r in found)
        for unrelated in ("recipe for cake", "best football team in Spain",
                          "how to install python packages"):
            assert (await memory.query(unrelated)).results == [], unrelated
        context = BufferedChatCompletionContext(buffer_size=5, initial_messages=[
            UserMessage(content="recipe for cake", source="user")])
        assert (await memory.update_context(context)).memories.results == []
        assert len(await context.get_messages()) == 1

    asyncio.run(run())


def test_without_a_floor_every_query_gets_recalls_best(client: MemoryClient,
                                                       agent_id: str) -> None:
    memory = MemorydMemory(client, agent_id=agent_id, min_score=None)

    async def run() -> None:
        await memory.add(_text("Specific technical details about quantum computing"))
        assert len((await memory.query("recipe for cake")).results) == 1

    asyncio.run(run())


def test_binary_content_and_json_that_is_not_a_dict_are_refused_by_name(
        client: MemoryClient, agent_id: str) -> None:
    """Chroma refuses both with a ValueError; memoryd's ValidationError is one, naming
    ``content``. JSON text once went in and came back as another type, or as text."""
    memory = MemorydMemory(client, agent_id=agent_id)

    async def run() -> None:
        with pytest.raises(ValueError, match=r"Unsupported|must be text") as refused:
            await memory.add(MemoryContent(content=b"binary data",
                                           mime_type=MemoryMimeType.BINARY))
        assert isinstance(refused.value, ValidationError) and refused.value.field == "content"
        for text in ("not a dict", "[1, 2]", '"text"', '{"a": 1}'):
            with pytest.raises(ValueError, match="JSON content must be a dict") as refused:
                await memory.add(MemoryContent(content=text, mime_type=MemoryMimeType.JSON))
            assert isinstance(refused.value, ValidationError)
        assert client.list(agent_id).total == 0

    asyncio.run(run())


def test_metadata_comes_back_with_its_types(client: MemoryClient, agent_id: str) -> None:
    memory = MemorydMemory(client, agent_id=agent_id)

    async def run() -> None:
        text = "Test content with specific metadata"
        await memory.add(_text(text, test_category="test", test_priority=1,
                               test_weight=0.5, test_verified=True))
        result = (await memory.query(text)).results[0]
        assert result.metadata is not None
        assert result.metadata["test_category"] == "test"
        assert result.metadata["test_priority"] == 1
        assert isinstance(result.metadata["test_weight"], float)
        assert result.metadata["test_verified"] is True
        assert isinstance(result.metadata["score"], float)

    asyncio.run(run())


def test_its_component_config_is_plain_data_without_a_password(agent_id: str) -> None:
    secret = "s3cret-pw"
    with MemoryClient(broker_url=f"redis://:{secret}@127.0.0.1:1/0", timeout=7.0) as client:
        config = MemorydMemory(client, agent_id=agent_id, limit=3,
                               min_score=0.4).dump_component()
    assert config.provider == "memoryd.integrations.autogen.MemorydMemory"
    assert secret not in config.model_dump_json()
    assert MemorydMemoryConfig.model_validate(config.config) == MemorydMemoryConfig(
        agent_id=agent_id, limit=3, min_score=0.4, timeout=7.0)


def test_concurrent_adds_are_all_found(client: MemoryClient, agent_id: str) -> None:
    memory = MemorydMemory(client, agent_id=agent_id, limit=10)

    async def run() -> None:
        await asyncio.gather(*[memory.add(_text(f"Planet fact number {n}."))
                               for n in range(6)])
        found = (await memory.query("planet fact")).results
        assert sorted(str(r.content) for r in found) == [f"Planet fact number {n}."
                                                    for n in range(6)]

    asyncio.run(run())
