"""``MemorydMemory`` as AutoGen uses it: an agent's ``BufferedChatCompletionContext``
gains one system message with what memoryd recalls for the last user message, through
a real worker."""

from __future__ import annotations

import asyncio

import pytest
from autogen_core.memory import MemoryContent, MemoryMimeType
from autogen_core.model_context import BufferedChatCompletionContext
from autogen_core.models import AssistantMessage, SystemMessage, UserMessage

from memoryd.client import MemoryClient
from memoryd.errors import ValidationError
from memoryd.integrations.autogen import HEADER, MemorydMemory

pytestmark = pytest.mark.slow


def _text(text: str) -> MemoryContent:
    return MemoryContent(content=text, mime_type=MemoryMimeType.TEXT)


def test_update_context_adds_the_memories_recalled_for_the_last_user_message(
        worker: object, client: MemoryClient, agent_id: str) -> None:
    memory = MemorydMemory(client, agent_id=agent_id, limit=2)
    context = BufferedChatCompletionContext(buffer_size=10, initial_messages=[
        UserMessage(content="Hello there.", source="user"),
        AssistantMessage(content="Hi! How can I help?", source="planner"),
        UserMessage(content="Which city does the user live in?", source="user")])

    async def run() -> None:
        await memory.add(_text("The user lives in Lisbon."))
        await memory.add(_text("The user's cat is called Miso."))
        await memory.add(MemoryContent(content={"diet": "vegetarian"},
                                       mime_type=MemoryMimeType.JSON, metadata={"from": "form"}))
        result = await memory.update_context(context)
        messages = await context.get_messages()
        assert len(messages) == 4 and isinstance(messages[-1], SystemMessage)
        # The cat shares "user" with the question, but too little to pass the floor.
        assert messages[-1].content == HEADER + "\n1. The user lives in Lisbon."
        assert [r.content for r in result.memories.results] == ["The user lives in Lisbon."]
        asked = await memory.query("which diet does the user keep?")
        diet = [r for r in asked.results if r.mime_type == MemoryMimeType.JSON.value]
        assert diet[0].content == {"diet": "vegetarian"}
        assert diet[0].metadata is not None and diet[0].metadata["from"] == "form"
        await memory.close()

    asyncio.run(run())


def test_a_context_without_a_user_message_gains_nothing(
        worker: object, client: MemoryClient, agent_id: str) -> None:
    memory = MemorydMemory(client, agent_id=agent_id)
    context = BufferedChatCompletionContext(buffer_size=4, initial_messages=[
        AssistantMessage(content="I am ready.", source="planner")])

    async def run() -> None:
        await memory.add(_text("Something worth remembering."))
        result = await memory.update_context(context)
        assert result.memories.results == []
        assert len(await context.get_messages()) == 1

    asyncio.run(run())


def test_clear_forgets_the_agents_memories_and_binary_content_is_refused_by_name(
        worker: object, client: MemoryClient, agent_id: str) -> None:
    memory = MemorydMemory(client, agent_id=agent_id)

    async def run() -> None:
        await memory.add(_text("A note to be cleared."))
        with pytest.raises(ValidationError) as refused:
            await memory.add(MemoryContent(content=b"\x89PNG",
                                           mime_type=MemoryMimeType.BINARY))
        assert refused.value.field == "content"
        assert client.list(agent_id).total == 1
        await memory.clear()
        assert client.list(agent_id).total == 0
        assert (await memory.query("note")).results == []

    asyncio.run(run())
