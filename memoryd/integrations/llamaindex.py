"""LlamaIndex over memoryd (``pip install memoryd[llamaindex]``, tested with
llama-index-core 0.14.25).

- ``MemorydChatStore``: a ``BaseChatStore`` over working memory (for ``ChatMemoryBuffer``,
  ``ChatSummaryMemoryBuffer`` or direct use). Each key is a thread of one memoryd agent;
  ``get_keys`` lists the agent's live threads.
- ``MemorydMemoryBlock``: a ``BaseMemoryBlock`` for ``Memory`` over long-term memory.
  ``aget`` answers memoryd's turn context for the latest messages (as ``VectorMemoryBlock``
  queries with its last ``retrieval_context_window`` of them), in thread ``session_id``
  when ``Memory`` names one; ``aput`` stores the messages ``Memory`` flushes to it, in
  session ``session_id``.

A message is stored as its text (its blocks' JSON when it has none) under memoryd's role
for it (``developer`` is ``system``; ``chatbot`` and ``model`` are ``assistant``;
``function`` is ``tool``); the message itself rides along in the metadata unless role and
text rebuild it exactly, so tool calls, images and ``additional_kwargs`` come back whole.

Not followed, as working memory works (docs/frameworks.md):
- a thread keeps a window: past 50 messages (by default), its first 5 and last 40 (the
  rest go to long-term memory), so ``get_messages`` of a long thread is not all of it;
- working memory never drops a message: what a rewrite (``set_messages`` that is not an
  extension of the thread, ``delete_message``, ``add_message`` at an index) takes out
  goes to long-term memory, the thread is cleared (its variables
  and flags too) and the messages kept are appended again (so long-term memory lists them
  again when they are promoted); a message appended by someone else between the read and
  the clear leaves the thread for long-term memory. ``delete_messages`` ends the thread
  (all of it to long-term memory; the key is no longer listed). Appending
  (``add_message``) is one atomic update, safe beside any other writer;
- an index out of range (``delete_message``) and an empty history
  (``delete_last_message``) answer None, as LlamaIndex's own tests of ``SimpleChatStore``
  now expect (0.14.25's raises ``IndexError``);
- the store holds a client, so ``load_chat_store`` cannot rebuild it from a serialised
  ``ChatMemoryBuffer``: build the buffer again with ``chat_store=``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from llama_index.core.bridge.pydantic import ConfigDict, Field
from llama_index.core.llms import ChatMessage
from llama_index.core.memory.memory import BaseMemoryBlock
from llama_index.core.storage.chat_store.base import BaseChatStore

from memoryd import validation as check
from memoryd.client import MemoryClient
from memoryd.errors import Conflict
from memoryd.working.model import (
    MAX_THREADS_LISTED,
    WorkingMessage,
    budget_of,
    thread_id,
    unit_of,
    update_request,
)

MESSAGE_KEY = "llamaindex_message"  # the metadata key of a message's whole form
SET_TRIES = 20  # compare-and-set attempts of an extending set_messages
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
          "chatbot": "assistant", "model": "assistant", "tool": "tool", "function": "tool"}
_BATCH = 1000  # store_many's most items per call


def message_row(message: ChatMessage) -> dict[str, Any]:
    """The working-memory message of a LlamaIndex message."""
    role = _ROLES.get(str(message.role.value), "assistant")
    said = message.content or ""
    content = said if said.strip() else json.dumps(
        [block.model_dump(mode="json") for block in message.blocks], ensure_ascii=False)
    row: dict[str, Any] = {"role": role, "content": content}
    whole = json.loads(message.model_dump_json())
    if json.loads(ChatMessage(role=role, content=content).model_dump_json()) != whole:
        row["metadata"] = {MESSAGE_KEY: whole}
    return row


def as_chat_message(stored: WorkingMessage) -> ChatMessage:
    """The LlamaIndex message a working-memory message holds; one another writer appended
    is a plain message of its role and text."""
    whole = (stored.metadata or {}).get(MESSAGE_KEY)
    if isinstance(whole, dict):
        return ChatMessage.model_validate(whole)
    return ChatMessage(role=stored.role, content=stored.content)


def stored_row(stored: WorkingMessage) -> dict[str, Any]:
    """A held message as an update appends it again."""
    fields = {"role": stored.role, "content": stored.content, "name": stored.name,
              "metadata": stored.metadata}
    return {name: value for name, value in fields.items() if value is not None}


def messages_query(messages: list[ChatMessage]) -> str | None:
    """What the messages say (their text blocks, the newest part as much as a query
    holds), None when nothing."""
    said = " ".join(m.content or "" for m in messages).replace("\x00", " ")
    return said[-check.MAX_QUERY_CHARS:] if said.strip() else None


class MemorydChatStore(BaseChatStore):
    """Chat histories as the working-memory threads of ``agent_id``: key = thread id."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: MemoryClient = Field(exclude=True)
    agent_id: str

    def __init__(self, *, client: MemoryClient, agent_id: str, **data: Any) -> None:
        super().__init__(client=client, agent_id=check.agent_id(agent_id), **data)

    @classmethod
    def class_name(cls) -> str:
        return "MemorydChatStore"

    def get_messages(self, key: str) -> list[ChatMessage]:
        held = self.client.working(self.agent_id, thread_id(key))
        return [as_chat_message(stored) for stored in held.messages]

    def add_message(self, key: str, message: ChatMessage, idx: int | None = None) -> None:
        """Append ``message`` (one atomic update); at ``idx``, a rewrite."""
        row = message_row(message)
        if idx is not None:
            held = self.client.working(self.agent_id, thread_id(key))
            if idx < len(held.messages):
                rows = [stored_row(stored) for stored in held.messages]
                rows.insert(idx, row)
                self._replace(key, rows)
                return
        self.client.update_working(self.agent_id, thread_id(key), messages=[row])

    def set_messages(self, key: str, messages: list[ChatMessage]) -> None:
        """The thread's messages become ``messages``: an extension of what it holds is
        appended (compare-and-set, so nobody's message is lost), anything else rewrites."""
        rows = [message_row(message) for message in messages]
        for _ in range(SET_TRIES):
            held = self.client.working(self.agent_id, thread_id(key))
            have = [stored_row(stored) for stored in held.messages]
            if rows[:len(have)] != have:
                break
            if len(rows) == len(have) and held.version:
                return
            try:  # an empty update makes the key of an empty history, as SimpleChatStore
                self.client.update_working(self.agent_id, thread_id(key),
                                           messages=rows[len(have):],
                                           expected_version=held.version)
                return
            except Conflict:
                continue
        self._replace(key, rows)

    def delete_messages(self, key: str) -> list[ChatMessage] | None:
        """End the thread: its messages go to long-term memory (those read are answered)."""
        held = self.client.working(self.agent_id, thread_id(key))
        if not held.version:
            return None
        self.client.end_thread(self.agent_id, thread_id(key))
        return [as_chat_message(stored) for stored in held.messages]

    def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        """Take out the message at ``idx`` (a rewrite); None for no such key or index."""
        held = self.client.working(self.agent_id, thread_id(key))
        kept = list(held.messages)
        if not held.version or not -len(kept) <= idx < len(kept):
            return None
        taken = kept.pop(idx)
        self._replace(key, [stored_row(stored) for stored in kept])
        return as_chat_message(taken)

    def delete_last_message(self, key: str) -> ChatMessage | None:
        """Take out the newest message, atomically (working memory's pop: two callers
        never take the same one, and nothing else in the thread changes)."""
        popped = self.client.pop_message(self.agent_id, thread_id(key))
        return None if popped is None else as_chat_message(popped)

    def get_keys(self) -> list[str]:
        keys: list[str] = []
        while page := self.client.threads(self.agent_id, limit=MAX_THREADS_LISTED,
                                          offset=len(keys)):
            keys += [info.thread_id for info in page]
            if len(page) < MAX_THREADS_LISTED:
                break
        return keys

    def _replace(self, key: str, rows: list[dict[str, Any]]) -> None:
        """Working memory takes no message out of a thread: clear it (what it held goes
        to long-term memory) and append ``rows`` again."""
        update_request({"messages": rows}, self.client.working_store.limits)
        self.client.clear_working(self.agent_id, thread_id(key))
        self.client.update_working(self.agent_id, thread_id(key), messages=rows)


class MemorydMemoryBlock(BaseMemoryBlock[str]):
    """Long-term memory as a block of ``Memory``: ``limit``, ``budget`` and
    ``budget_unit`` are ``MemoryClient.context``'s."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = Field(default="LongTermMemory", description="The name of the memory block.")
    client: MemoryClient = Field(exclude=True)
    agent_id: str
    limit: int = 10
    budget: int | None = None
    budget_unit: str = "chars"
    retrieval_context_window: int = 5

    def __init__(self, *, client: MemoryClient, agent_id: str, limit: int = 10,
                 budget: int | None = None, budget_unit: str = "chars",
                 retrieval_context_window: int = 5, **data: Any) -> None:
        super().__init__(client=client, agent_id=check.agent_id(agent_id),
                         limit=check.limit(limit), budget=budget_of(budget),
                         budget_unit=unit_of(budget_unit),
                         retrieval_context_window=check.limit(
                             retrieval_context_window, "retrieval_context_window"), **data)

    async def _aget(self, messages: list[ChatMessage] | None = None,
                    session_id: str | None = None, **block_kwargs: Any) -> str:
        query = messages_query((messages or [])[-self.retrieval_context_window:])
        if query is None:
            return ""
        thread = None if session_id is None else thread_id(session_id)
        block: str = await self.client.acontext(
            self.agent_id, query, limit=self.limit, thread_id=thread, budget=self.budget,
            budget_unit=self.budget_unit)
        return block

    async def _aput(self, messages: list[ChatMessage]) -> None:
        """Store the messages with text, each in the session ``Memory`` named (the
        ``session_id`` it put in ``additional_kwargs``, taken out again as
        ``VectorMemoryBlock`` does)."""
        items = []
        for message in messages:
            session = message.additional_kwargs.pop("session_id", None)
            if message.content and message.content.strip():
                items.append({"content": message.content, "session_id": session,
                              "role": _ROLES.get(str(message.role.value), "assistant")})
        for start in range(0, len(items), _BATCH):
            await asyncio.to_thread(self.client.store_many, self.agent_id,
                                    items[start:start + _BATCH])
