"""An AutoGen ``Memory`` kept in memoryd (``pip install memoryd[autogen]``).

``update_context`` recalls what memoryd holds for the last user message and adds it to
the model context as one system message, so an ``AssistantAgent`` given
``memory=[MemorydMemory(client, agent_id="planner")]`` answers with it in view. A memory
per user of an app is ``agent_id=identity.agent_id(app, user)``, which no other pair
shares.

As AutoGen's ``ChromaDBVectorMemory`` does: ``query`` answers only what passes a
relevance floor (``min_score``, default 0.7; ``_relevance``), each result's metadata
``score`` being the relevance compared (recall's own score is ``recall_score``); JSON
content must be a dict; and the memory is a component (``dump_component`` /
``load_component``): its config holds the agent, the options and the client's broker and
result backend, a URL that holds a password left out (the loaded memory's client then
connects as ``MemoryClient()`` does, from MEMORYD_BROKER_URL or the running memoryd).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Self
from urllib.parse import urlsplit

from autogen_core import CancellationToken, Component
from autogen_core.memory import (
    Memory,
    MemoryContent,
    MemoryMimeType,
    MemoryQueryResult,
    UpdateContextResult,
)
from autogen_core.model_context import ChatCompletionContext
from autogen_core.models import SystemMessage, UserMessage
from pydantic import BaseModel

from memoryd import validation as check
from memoryd.client import DEFAULT_TIMEOUT_S, MemoryClient
from memoryd.errors import ValidationError
from memoryd.integrations._relevance import (
    DEFAULT_MIN_SCORE,
    checked_min_score,
    relevance,
    relevant,
)
from memoryd.types import Erasure, Recalled

MIME_KEY = "mime_type"  # metadata key of the stored content's MIME type
_TEXT_TYPES = (MemoryMimeType.TEXT.value, MemoryMimeType.MARKDOWN.value)
HEADER = "Relevant memories (most relevant first):"


class MemorydMemoryConfig(BaseModel):
    """What ``load_component`` rebuilds a ``MemorydMemory`` from: plain data, no secret
    (a broker or result-backend URL holding a password is left out)."""

    agent_id: str
    limit: int = 5
    min_score: float | None = DEFAULT_MIN_SCORE
    broker_url: str | None = None
    result_backend: str | None = None
    timeout: float = DEFAULT_TIMEOUT_S


class MemorydMemory(Memory, Component[MemorydMemoryConfig]):
    """One memoryd agent as an AutoGen memory: ``add`` stores, ``query`` recalls the
    ``limit`` best that pass the relevance floor ``min_score`` (0 to 1; None: no floor)."""

    component_type = "memory"
    component_provider_override = "memoryd.integrations.autogen.MemorydMemory"
    component_config_schema = MemorydMemoryConfig

    def __init__(self, client: MemoryClient, *, agent_id: str, limit: int = 5,
                 min_score: float | None = DEFAULT_MIN_SCORE) -> None:
        self.client = client
        self.agent_id = check.agent_id(agent_id)
        self.limit = check.limit(limit)
        self.min_score = checked_min_score(min_score)
        self._owns_client = False  # a loaded component made its client: close closes it

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
        if not text.strip():
            return MemoryQueryResult(results=[])  # nothing asked, nothing relevant
        hits = await self.client.arecall(self.agent_id, text, limit=self.limit)
        return MemoryQueryResult(results=[as_content(hit)
                                          for hit in relevant(hits, self.min_score)])

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
        """Release the client if ``load_component`` made it; a caller's is the caller's."""
        if self._owns_client:
            self.client.close()

    def _to_config(self) -> MemorydMemoryConfig:
        broker, backend = client_urls(self.client)
        return MemorydMemoryConfig(
            agent_id=self.agent_id, limit=self.limit, min_score=self.min_score,
            broker_url=_shareable(broker), result_backend=_shareable(backend),
            timeout=self.client.timeout)

    @classmethod
    def _from_config(cls, config: MemorydMemoryConfig) -> Self:
        client = MemoryClient(config.broker_url, config.result_backend,
                              timeout=config.timeout)
        memory = cls(client, agent_id=config.agent_id, limit=config.limit,
                     min_score=config.min_score)
        memory._owns_client = True
        return memory


def client_urls(client: MemoryClient) -> tuple[str | None, str | None]:
    """The broker and result-backend URLs the client sends to. ``MemoryClient`` does not
    name them, so they are read from its Celery app's configuration."""
    conf = getattr(getattr(client, "_app", None), "conf", None)
    broker, backend = getattr(conf, "broker_url", None), getattr(conf, "result_backend", None)
    return (broker if isinstance(broker, str) else None,
            backend if isinstance(backend, str) else None)


def _shareable(url: str | None) -> str | None:
    """``url`` unless it holds a password (in its user part or its query)."""
    if url is None:
        return None
    try:
        parts = urlsplit(url)
        secret = parts.password is not None or "password" in parts.query.lower()
    except ValueError:
        return None  # a URL urllib cannot read is not written down either
    return None if secret else url


def as_text(content: MemoryContent) -> tuple[str, str]:
    """The text to store of a content, and its MIME type. JSON content must be a dict,
    as ``ChromaDBVectorMemory`` requires: JSON text that is not one would come back as
    another type, or as text."""
    mime = (content.mime_type.value if isinstance(content.mime_type, MemoryMimeType)
            else str(content.mime_type))
    if isinstance(content.content, dict):
        try:
            return json.dumps(content.content, allow_nan=False), MemoryMimeType.JSON.value
        except (TypeError, ValueError) as exc:
            raise ValidationError("content", f"is not JSON-serializable: {exc}") from None
    if mime == MemoryMimeType.JSON.value:
        raise ValidationError("content", "JSON content must be a dict")
    if isinstance(content.content, str) and mime in _TEXT_TYPES:
        return content.content, mime
    raise ValidationError("content", f"must be text, Markdown or JSON, got {mime}")


def as_content(hit: Recalled) -> MemoryContent:
    """A recalled memory as AutoGen content, with its id, relevance (``score``, what
    ``min_score`` compares) and recall's score in the metadata."""
    metadata = dict(hit.memory.metadata)
    mime = str(metadata.pop(MIME_KEY, MemoryMimeType.TEXT.value))
    body: str | dict[str, Any] = hit.memory.content
    if mime == MemoryMimeType.JSON.value:
        body = _json_object(hit.memory.content)
        if isinstance(body, str):
            mime = MemoryMimeType.TEXT.value  # maintenance rewrote it as prose
    return MemoryContent(content=body, mime_type=mime,
                         metadata={**metadata, "memory_id": str(hit.memory.id),
                                   "score": relevance(hit), "recall_score": hit.score})


def _json_object(text: str) -> dict[str, Any] | str:
    """The dict a JSON content was stored as, or ``text`` when it holds none."""
    try:
        body = json.loads(text)
    except ValueError:
        return text
    return body if isinstance(body, dict) else text


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
