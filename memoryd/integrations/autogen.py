"""An AutoGen ``Memory`` kept in memoryd (``pip install memoryd[autogen]``).

``update_context`` recalls what memoryd holds for the last user message and adds it to
the model context as one system message, so an ``AssistantAgent`` given
``memory=[MemorydMemory(client, agent_id="planner")]`` answers with it in view. A memory
per user of an app is ``agent_id=identity.agent_id(app, user)``, which no other pair
shares.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from autogen_core import CancellationToken
from autogen_core.memory import (
    Memory,
    MemoryContent,
    MemoryMimeType,
    MemoryQueryResult,
    UpdateContextResult,
)
from autogen_core.model_context import ChatCompletionContext
from autogen_core.models import SystemMessage, UserMessage

from memoryd import validation as check
from memoryd.client import MemoryClient
from memoryd.errors import ValidationError
from memoryd.types import Erasure, Recalled

MIME_KEY = "mime_type"  # metadata key of the stored content's MIME type
_TEXT_TYPES = (MemoryMimeType.TEXT.value, MemoryMimeType.MARKDOWN.value)
HEADER = "Relevant memories (most relevant first):"


class MemorydMemory(Memory):
    """One memoryd agent as an AutoGen memory: ``add`` stores, ``query`` recalls the
    ``limit`` best."""

    def __init__(self, client: MemoryClient, *, agent_id: str, limit: int = 5) -> None:
        self.client = client
        self.agent_id = check.agent_id(agent_id)
        self.limit = check.limit(limit)

    async def add(self, content: MemoryContent,
                  cancellation_token: CancellationToken | None = None) -> None:
        """Store text, Markdown or JSON content; other kinds are refused, not dropped."""
        text, mime = as_text(content)
        metadata = {**(check.metadata(content.metadata) or {}), MIME_KEY: mime}
        await self.client.astore(self.agent_id, text, metadata=metadata)

    async def query(self, query: str | MemoryContent,
                    cancellation_token: CancellationToken | None = None,
                    **kwargs: Any) -> MemoryQueryResult:
        text = as_text(query)[0] if isinstance(query, MemoryContent) else query
        hits = await self.client.arecall(self.agent_id, text, limit=self.limit)
        return MemoryQueryResult(results=[as_content(hit) for hit in hits])

    async def update_context(self, model_context: ChatCompletionContext
                             ) -> UpdateContextResult:
        """Add the memories recalled for the last user message as one system message."""
        asked = last_user_text(await model_context.get_messages())
        found = await self.query(asked) if asked else MemoryQueryResult(results=[])
        if found.results:
            lines = [f"{n}. {_shown(item.content)}" for n, item in enumerate(found.results, 1)]
            await model_context.add_message(SystemMessage(content="\n".join([HEADER, *lines])))
        return UpdateContextResult(memories=found)

    async def clear(self) -> None:
        """Erase everything memoryd holds of this agent (``MemoryClient.forget_agent``)."""
        await asyncio.to_thread(self._erase)

    def _erase(self) -> None:
        while True:  # an erasure whose time budget ran out goes on when called again
            erased = self.client.forget_agent(self.agent_id)
            assert isinstance(erased, Erasure)
            if erased.complete:
                return

    async def close(self) -> None:
        """Nothing to release: the client belongs to the caller."""


def as_text(content: MemoryContent) -> tuple[str, str]:
    """The text to store of a content, and its MIME type."""
    mime = (content.mime_type.value if isinstance(content.mime_type, MemoryMimeType)
            else str(content.mime_type))
    if isinstance(content.content, dict):
        try:
            return json.dumps(content.content, allow_nan=False), MemoryMimeType.JSON.value
        except (TypeError, ValueError) as exc:
            raise ValidationError("content", f"is not JSON-serializable: {exc}") from None
    if isinstance(content.content, str) and mime in (*_TEXT_TYPES, MemoryMimeType.JSON.value):
        return content.content, mime
    raise ValidationError("content", f"must be text, Markdown or JSON, got {mime}")


def as_content(hit: Recalled) -> MemoryContent:
    """A recalled memory as AutoGen content, with its id and score in the metadata."""
    metadata = dict(hit.memory.metadata)
    mime = str(metadata.pop(MIME_KEY, MemoryMimeType.TEXT.value))
    body: str | dict[str, Any] = hit.memory.content
    if mime == MemoryMimeType.JSON.value:
        try:
            body = json.loads(hit.memory.content)
        except ValueError:
            mime = MemoryMimeType.TEXT.value  # maintenance rewrote it as prose
    return MemoryContent(content=body, mime_type=mime,
                         metadata={**metadata, "memory_id": str(hit.memory.id),
                                   "score": hit.score})


def _shown(body: object) -> str:
    return json.dumps(body) if isinstance(body, dict) else str(body)


def last_user_text(messages: list[Any]) -> str | None:
    """The text of the newest user message (its text parts, images left out), or None."""
    for message in reversed(messages):
        if isinstance(message, UserMessage):
            parts = [message.content] if isinstance(message.content, str) else message.content
            text = "\n".join(part for part in parts if isinstance(part, str))
            return text if text.strip() else None
    return None
