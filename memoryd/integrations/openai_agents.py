"""An OpenAI Agents SDK ``Session`` kept in memoryd (``pip install memoryd[openai-agents]``).

Each item is one message of a memoryd session, in order, so compaction, repair and the
cortex see the conversation. The memory's content is the item's text, for recall; the
item itself rides along as its exact JSON text in the metadata, so it comes back as it
went in. memoryd keeps one memory per distinct content and agent, and a conversation may
repeat itself ("yes", "yes"): each content therefore ends with a short stamp of its own.

    session = MemorydSession("chat-42", client=MemoryClient(), agent_id="support-bot")
    result = await Runner.run(agent, "Hello", session=session)

The session id is memoryd's session id as it is, within the agent; an agent per user of
an app is ``identity.agent_id(app, user)``, which no other pair shares.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, cast

from agents.items import TResponseInputItem
from agents.memory.session_settings import SessionSettings, resolve_session_limit

from memoryd import validation as check
from memoryd.client import MemoryClient
from memoryd.errors import ContentTooLarge, ValidationError
from memoryd.types import Memory

# Metadata keys of an item's memory: its JSON text, its session and its content's stamp.
ITEM_KEY = "openai_agents_item"
SESSION_KEY = "openai_agents_session"
STAMP_KEY = "openai_agents_stamp"
_MESSAGE_ROLES = {"user": "user", "assistant": "assistant", "system": "system",
                  "developer": "system"}
_BATCH = 1000  # store_many's most items per call


class MemorydSession:
    """The SDK's ``Session`` protocol over one memoryd session of ``agent_id``."""

    def __init__(self, session_id: str, *, client: MemoryClient, agent_id: str,
                 session_settings: SessionSettings | None = None) -> None:
        self.session_id = check.required_text("session_id", session_id)
        self.agent_id = check.agent_id(agent_id)
        self.client = client
        self.session_settings = session_settings

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The latest ``limit`` items (all when None), oldest first; like ``SQLiteSession``,
        0 reads none and a negative limit reads all."""
        wanted = resolve_session_limit(limit, self.session_settings)
        if wanted == 0:
            return []
        memories = await asyncio.to_thread(
            self.client.session_messages, self.agent_id, self.session_id,
            limit=wanted if wanted is not None and wanted > 0 else None)
        return [as_item(memory) for memory in memories]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` in order; all are checked before any is sent."""
        limit = self.client.settings.max_content_bytes
        rows = [store_row(index, item, self.session_id, limit)
                for index, item in enumerate(items)]
        await asyncio.to_thread(self._store, rows)

    def _store(self, rows: Sequence[dict[str, Any]]) -> None:
        for start in range(0, len(rows), _BATCH):
            self.client.store_many(self.agent_id, rows[start:start + _BATCH])

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item; None when the session is empty."""
        return await asyncio.to_thread(self._pop)

    def _pop(self) -> TResponseInputItem | None:
        newest = self.client.session_messages(self.agent_id, self.session_id, limit=1)
        if not newest:
            return None
        self.client.forget(self.agent_id, newest[0].id)
        return as_item(newest[0])

    async def clear_session(self) -> None:
        """Forget every message of the session, and the items compaction folded away."""
        await asyncio.to_thread(self._clear)

    def _clear(self) -> None:
        listed = self.client.session_messages(self.agent_id, self.session_id)
        for memory in listed:
            self.client.forget(self.agent_id, memory.id)
        folded = {SESSION_KEY: self.session_id}
        while page := self.client.list(self.agent_id, metadata=folded, limit=1000).items:
            for memory in page:
                self.client.forget(self.agent_id, memory.id)


def store_row(index: int, item: object, session_id: str, max_bytes: int) -> dict[str, Any]:
    """The ``store_many`` item of one session item; refused, naming ``items[index]``, if it
    is not a JSON object or is over memoryd's content limit."""
    field = f"items[{index}]"
    if not isinstance(item, Mapping):
        raise ValidationError(field, "must be a JSON object")
    try:
        text = json.dumps(item, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(field, f"is not JSON-serializable: {exc}") from None
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise ContentTooLarge(field, f"is {size} bytes of JSON, at most {max_bytes}")
    stamp = uuid.uuid4().hex[:16]
    return {"content": _content(item, text, stamp), "role": _role(item),
            "session_id": session_id,
            "metadata": {ITEM_KEY: text, SESSION_KEY: session_id, STAMP_KEY: stamp}}


def as_item(memory: Memory) -> TResponseInputItem:
    """The item a memory holds, exactly; a message the session's maintenance wrote or
    rewrote (a compaction summary, a merged run) comes back as a plain message."""
    text, stamp = memory.metadata.get(ITEM_KEY), memory.metadata.get(STAMP_KEY)
    if isinstance(text, str) and isinstance(stamp, str):
        item = json.loads(text)
        if memory.content == _content(item, text, stamp):
            return cast(TResponseInputItem, item)
    role = memory.role if memory.role in ("user", "assistant", "system") else "system"
    return cast(TResponseInputItem, {"role": role, "content": memory.content})


def _content(item: Mapping[str, Any], text: str, stamp: str) -> str:
    """What recall reads of an item: a message's text, else the item's JSON."""
    said = item.get("content")
    if isinstance(said, list):
        said = "\n".join(part["text"] for part in said
                         if isinstance(part, Mapping) and isinstance(part.get("text"), str))
    readable = said if isinstance(said, str) and said.strip() else text
    return f"{readable}\n[{stamp}]"


def _role(item: Mapping[str, Any]) -> str | None:
    """memoryd's role of a message item; calls, outputs and reasoning get none, so the
    session repair never merges them."""
    if item.get("type", "message") != "message":
        return None
    return _MESSAGE_ROLES.get(str(item.get("role")))
