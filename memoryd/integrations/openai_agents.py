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

As the SDK's own sessions do: ``session_settings`` is normalised (None is
``SessionSettings()``, a dict becomes one and an unknown field is refused), an item may be
any JSON value and comes back as the same JSON type, and two concurrent ``pop_item`` calls
never return the same item (``forget`` is the claim: only one caller deletes a memory).
Deliberately not followed: a float that JSON cannot write (NaN, infinity) is refused, where
``SQLiteSession`` writes it as non-standard JSON (docs/frameworks.md).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, cast

from agents.items import TResponseInputItem
from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)
from pydantic import ValidationError as PydanticError

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


class SessionSettingsError(ValidationError, TypeError):
    """``session_settings`` refused: memoryd's ``ValidationError`` naming the field, and
    the ``TypeError`` the SDK's own sessions raise for it, so either catch holds."""


def normalised_settings(value: object) -> SessionSettings:
    """``session_settings`` as the SDK's built-in sessions keep it: None is
    ``SessionSettings()``, a dict is coerced by the SDK's own rule (unknown fields
    refused)."""
    if value is None:
        return SessionSettings()
    try:
        return coerce_session_settings(value)  # type: ignore[arg-type]
    except TypeError as exc:  # the SDK's message names fields and types, never values
        raise SessionSettingsError("session_settings", str(exc)) from None
    except PydanticError as exc:
        wrong = ", ".join(".".join(map(str, e["loc"])) for e in exc.errors())
        raise SessionSettingsError("session_settings", f"has a bad value for {wrong}") from None


class MemorydSession:
    """The SDK's ``Session`` protocol over one memoryd session of ``agent_id``."""

    def __init__(self, session_id: str, *, client: MemoryClient, agent_id: str,
                 session_settings: SessionSettings | Mapping[str, Any] | None = None
                 ) -> None:
        self.session_id = check.required_text("session_id", session_id)
        self.agent_id = check.agent_id(agent_id)
        self.client = client
        # Typed as the SDK's Session protocol types it (an attribute's type must match
        # exactly), though it is never None here.
        self.session_settings: SessionSettings | None = normalised_settings(
            session_settings)

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
        """Read the newest item and claim it by forgetting it: ``forget`` answers True
        to the one caller whose delete removed it, so a pop that lost the race reads
        again and claims the next newest, and two pops never return the same item."""
        while newest := self.client.session_messages(self.agent_id, self.session_id,
                                                     limit=1):
            if self.client.forget(self.agent_id, newest[0].id):
                return as_item(newest[0])
        return None

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
    is not JSON or is over memoryd's content limit. Any JSON value goes, as the SDK's
    sessions take it (``json.dumps``), and comes back as the same JSON type."""
    field = f"items[{index}]"
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
    return _item_of(memory.content, memory.metadata, memory.role)


def _item_of(content: str, metadata: Mapping[str, Any] | None,
             role: str | None) -> TResponseInputItem:
    found = metadata or {}
    text, stamp = found.get(ITEM_KEY), found.get(STAMP_KEY)
    if isinstance(text, str) and isinstance(stamp, str):
        item = json.loads(text)
        # Stamped in long-term memory; a working-memory message (and its promoted
        # memory) holds the item's text alone.
        if content in (_content(item, text, stamp), _content(item, text, None)):
            return cast(TResponseInputItem, item)
    role = role if role in ("user", "assistant", "system") else "system"
    return cast(TResponseInputItem, {"role": role, "content": content})


def _content(item: object, text: str, stamp: str | None) -> str:
    """What recall reads of an item: a message's text, else the item's JSON; stamped
    where memoryd would otherwise keep one memory for two equal items (working memory
    keeps both without a stamp, and its promotion lists both)."""
    said = item.get("content") if isinstance(item, Mapping) else None
    if isinstance(said, list):
        said = "\n".join(part["text"] for part in said
                         if isinstance(part, Mapping) and isinstance(part.get("text"), str))
    readable = said if isinstance(said, str) and said.strip() else text
    return readable if stamp is None else f"{readable}\n[{stamp}]"


def _role(item: object) -> str | None:
    """memoryd's role of a message item; calls, outputs, reasoning and items that are
    not objects get none, so the session repair never merges them."""
    if not isinstance(item, Mapping) or item.get("type", "message") != "message":
        return None
    return _MESSAGE_ROLES.get(str(item.get("role")))


class MemorydWorkingSession(MemorydSession):
    """The session's working-memory mode: items are appended to the thread
    ``session_id`` of memoryd's working memory (one Redis script, no worker), and reach
    long-term memory as that session's messages when the thread ends (``end_session``),
    idles past its TTL, or trims its oldest turns. Items read back: those already
    promoted, then those on their way and the thread's own, each once: every item's
    text ends with its own stamp, as in ``MemorydSession``, so two equal items stay two
    memories and the first turns a trim copied into long-term memory are recognised."""

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        wanted = resolve_session_limit(limit, self.session_settings)
        if wanted == 0:
            return []
        return await asyncio.to_thread(self._items,
                                       wanted if wanted and wanted > 0 else None)

    def _items(self, wanted: int | None) -> list[TResponseInputItem]:
        """Long-term memory's items, then those on their way there and the thread's own,
        in order, each once (by its stamp)."""
        state = self.client.working(self.agent_id, self.session_id, pending=True)
        by_seq = {m.seq: m for m in [*state.pending, *state.messages]}
        live = [by_seq[seq] for seq in sorted(by_seq)]
        if wanted is not None and len(live) >= wanted:  # the newest are all the thread's
            return [_item_of(m.content, m.metadata, m.role) for m in live[-wanted:]]
        kept = self.client.session_messages(self.agent_id, self.session_id, limit=wanted)
        stamps = {m.metadata.get(STAMP_KEY) for m in kept}
        items = [as_item(m) for m in kept]
        items += [_item_of(m.content, m.metadata, m.role) for m in live
                  if (m.metadata or {}).get(STAMP_KEY) not in stamps]
        return items if wanted is None else items[-wanted:]


    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` in order, in one atomic update; all are checked first."""
        limit = self.client.settings.max_content_bytes
        messages = [working_message(index, item, self.session_id, limit)
                    for index, item in enumerate(items)]
        if messages:
            await self.client.aupdate_working(self.agent_id, self.session_id,
                                              messages=messages)

    def _pop(self) -> TResponseInputItem | None:
        """The thread's newest item, taken atomically; its copy in long-term memory (a
        first turn a trim copied) goes too. With the thread empty, the newest promoted
        item is claimed as ``MemorydSession`` claims it."""
        popped = self.client.pop_message(self.agent_id, self.session_id)
        if popped is None:
            return super()._pop()
        stamp = (popped.metadata or {}).get(STAMP_KEY)
        if isinstance(stamp, str):
            for memory in self.client.list(self.agent_id, metadata={STAMP_KEY: stamp}).items:
                self.client.forget(self.agent_id, memory.id)
        return _item_of(popped.content, popped.metadata, popped.role)

    def _clear(self) -> None:
        """Every item goes: the thread is ended (its items promoted), then forgotten."""
        self.client.end_thread(self.agent_id, self.session_id)
        super()._clear()

    async def end_session(self) -> None:
        """End the thread now: its items become the long-term session's messages."""
        await self.client.aend_thread(self.agent_id, self.session_id)


def working_message(index: int, item: object, session_id: str,
                    max_bytes: int) -> dict[str, Any]:
    """The working-memory message of one item (checked as ``store_row`` checks it)."""
    row = store_row(index, item, session_id, max_bytes)
    return {"role": row["role"] or "tool", "content": row["content"],
            "metadata": row["metadata"]}
