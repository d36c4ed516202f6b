"""A Google ADK memory service kept in memoryd (``pip install memoryd[adk]``).

An ADK session's events with text go in as memories of one memoryd agent per app and
user, ``identity.agent_id(app_name, user_id)``: the two joined by ``/``, each with ``%``
and ``/`` escaped (``shop/ana``; app ``a/b`` and user ``c`` is ``a%2Fb/c``), so no two
(app, user) pairs share memories. They go in as messages of a memoryd session of the same
id, at the event's time, with the author, ids and the pair itself (``adk_scope``) in the
metadata. Each event is stored under a key of its own id, so adding a session again (ADK
does after every turn) adds only its new events. A key for one app's users is scoped to
the agent prefix ``app_prefix(app_name)``.

    runner = Runner(agent=agent, app_name="shop", session_service=sessions,
                    memory_service=MemorydMemoryService(MemoryClient()))

``search_memory`` answers recall's best ``limit`` that pass a relevance floor
(``min_score``, default 0.7; ``_relevance``): ADK's ``InMemoryMemoryService`` answers only
events sharing a word with the query, and so, at the default, does this service, ranked
by recall rather than by the number of shared words. Deliberately not followed (each in
docs/frameworks.md): an event added again under its id replaces the stored one (ADK's
keeps the first), a deleted event added again comes back (ADK's remembers deletions),
and an entry's id is memoryd's memory id (ADK's is the event id).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from google.adk.events.event import Event
from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions.session import Session
from google.genai import types

from memoryd import validation as check
from memoryd.client import MemoryClient
from memoryd.errors import ValidationError
from memoryd.integrations import identity
from memoryd.integrations._relevance import DEFAULT_MIN_SCORE, checked_min_score, relevant
from memoryd.types import Memory

_BATCH = 1000  # store_many's most items per call
# Metadata key of the (app_name, user_id) a memory was stored for: it tells the memories
# named by ``identity.agent_id`` from those of older memoryd (``memoryd rename-adk-agents``).
SCOPE_KEY = identity.ADK_SCOPE_KEY


def agent_of(app_name: str, user_id: str) -> str:
    """The memoryd agent that holds one user's memories of one ADK app (blank names
    are refused, naming ``app_name`` or ``user_id``)."""
    app = check.required_text("app_name", app_name)
    user = check.required_text("user_id", user_id)
    return identity.agent_id(app, user)


def app_prefix(app_name: str) -> str:
    """The agent-id prefix of every user of one ADK app: the ``--agent-prefix`` of a key
    for that app's users."""
    return identity.scope_prefix(check.required_text("app_name", app_name))


class MemorydMemoryService(BaseMemoryService):
    """ADK's ``BaseMemoryService``: what agents add is recalled by memoryd's ranking.

    ``limit``: the most memories a search answers; ``min_score``: the relevance floor
    (``_relevance.relevance``, 0 to 1; None answers recall's best ``limit`` whatever
    they are)."""

    def __init__(self, client: MemoryClient, *, limit: int = 10,
                 min_score: float | None = DEFAULT_MIN_SCORE) -> None:
        self.client = client
        self.limit = check.limit(limit)
        self.min_score = checked_min_score(min_score)

    async def add_session_to_memory(self, session: Session) -> None:
        await self.add_events_to_memory(app_name=session.app_name, user_id=session.user_id,
                                        events=session.events, session_id=session.id)

    async def add_events_to_memory(self, *, app_name: str, user_id: str,
                                   events: Sequence[Event], session_id: str | None = None,
                                   custom_metadata: Mapping[str, object] | None = None
                                   ) -> None:
        agent = agent_of(app_name, user_id)
        extra = check.metadata(custom_metadata) or {}
        rows = [row for event in events
                if (row := event_row(event, session_id, extra)) is not None]
        await asyncio.to_thread(self._store, agent, _scoped(rows, app_name, user_id))

    async def add_memory(self, *, app_name: str, user_id: str,
                         memories: Sequence[MemoryEntry],
                         custom_metadata: Mapping[str, object] | None = None) -> None:
        agent = agent_of(app_name, user_id)
        extra = check.metadata(custom_metadata) or {}
        rows = [row for index, entry in enumerate(memories)
                if (row := entry_row(index, entry, extra)) is not None]
        await asyncio.to_thread(self._store, agent, _scoped(rows, app_name, user_id))

    async def search_memory(self, *, app_name: str, user_id: str,
                            query: str) -> SearchMemoryResponse:
        agent = agent_of(app_name, user_id)
        if isinstance(query, str) and not query.strip():
            return SearchMemoryResponse(memories=[])  # no word to match, as ADK's answers
        hits = await self.client.arecall(agent, query, limit=self.limit)
        kept = relevant(hits, self.min_score)
        return SearchMemoryResponse(memories=[as_entry(hit.memory) for hit in kept])

    async def delete_memory(self, *, app_name: str, user_id: str,
                            memory_id: str | None = None) -> None:
        if memory_id:
            await asyncio.to_thread(self.client.forget, agent_of(app_name, user_id),
                                    memory_id)

    def _store(self, agent: str, rows: Sequence[dict[str, Any]]) -> None:
        for start in range(0, len(rows), _BATCH):
            self.client.store_many(agent, rows[start:start + _BATCH])


def _scoped(rows: Sequence[dict[str, Any]], app_name: str, user_id: str
            ) -> list[dict[str, Any]]:
    """The rows with their (app_name, user_id) in the metadata, over any given there."""
    scope = [app_name, user_id]
    return [{**row, "metadata": {**row["metadata"], SCOPE_KEY: scope}} for row in rows]


def event_row(event: Event, session_id: str | None,
              extra: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``store_many`` item of an event, or None for one without text (a tool call)."""
    text = _text(event.content)
    if text is None:
        return None
    when = datetime.fromtimestamp(event.timestamp, UTC)
    metadata = {**extra, "author": event.author, "event_id": event.id,
                "invocation_id": event.invocation_id}
    row: dict[str, Any] = {"content": text, "role": _role(event.author, event.content),
                           "key": f"adk-event:{event.id}" if event.id else None,
                           "created_at": when, "source": "adk"}
    if session_id is not None:
        row["session_id"] = session_id
        metadata["session_id"] = session_id
    return {**row, "metadata": metadata}


def entry_row(index: int, entry: MemoryEntry,
              extra: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``store_many`` item of an explicit memory, or None for one without text."""
    text = _text(entry.content)
    if text is None:
        return None
    metadata = {**extra, **entry.custom_metadata, "author": entry.author}
    return {"content": text, "role": _role(entry.author, entry.content),
            "key": f"adk-memory:{entry.id}" if entry.id else None,
            "created_at": _when(f"memories[{index}].timestamp", entry.timestamp),
            "source": "adk", "metadata": metadata}


def _when(field: str, stamp: str | None) -> datetime | None:
    """An entry's ISO timestamp; ADK writes local time without a zone, read as such."""
    if stamp is None:
        return None
    try:
        parsed = datetime.fromisoformat(stamp)
    except ValueError:
        raise ValidationError(field, f"is not an ISO-8601 timestamp: {stamp!r:.40}") from None
    return parsed if parsed.tzinfo is not None else parsed.astimezone()


def as_entry(memory: Memory) -> MemoryEntry:
    role = "user" if memory.role == "user" else "model"
    author = memory.metadata.get("author")
    return MemoryEntry(id=str(memory.id), author=author if isinstance(author, str) else None,
                       content=types.Content(role=role, parts=[types.Part(text=memory.content)]),
                       timestamp=memory.created_at.isoformat(),
                       custom_metadata=dict(memory.metadata))


def _text(content: types.Content | None) -> str | None:
    """The text of a content's parts (the model's thoughts left out), or None."""
    parts = content.parts if content is not None and content.parts else []
    text = "\n".join(part.text for part in parts if part.text and not part.thought)
    return text if text.strip() else None


def _role(author: str | None, content: types.Content | None) -> str:
    said_by = content.role if content is not None and content.role else author
    return "user" if said_by == "user" else "assistant"
