"""Microsoft Agent Framework providers over memoryd's working memory
(``pip install memoryd[agent-framework]``, tested with agent-framework-core 1.23).

The framework's session id names a thread of one memoryd agent (``identity.agent_id``
makes one agent per user of an app); a session without an id uses ``default_thread``.

- ``MemorydHistoryProvider``: the thread's messages are the agent's history. Loading reads
  working memory's messages; saving appends the messages the thread does not end with
  yet (the framework's ``filter_new_messages``, as ``InMemoryHistoryProvider`` does),
  compare-and-set against the version it read, so concurrent saves all land.
- ``MemorydContextProvider``: before a run, memoryd's turn context for the input (the
  thread's working state and newest messages, the long-term memories similar to it or
  naming its entities) as one message, as the framework's Mem0 provider adds its
  memories; after the run, the turn's messages appended to the thread.

Either stores the turn: with both, pass ``store_turns=False`` to the context provider.
Long-term memory gets a thread's messages on promotion, not from these providers: those
working memory trims (past 50 by default, it keeps the first 5 and last 40), and all of
them when the thread ends or sits idle past its TTL; they become session ``<session id>``.

A message is stored as its text (its contents' JSON when it has none), under memoryd's
role for it (``developer`` is ``system``, an unknown role ``assistant``); the message
itself rides along in the metadata unless role, text and author rebuild it exactly, so
tool calls and their results come back whole.

Not followed (docs/frameworks.md): the history holds working memory's window, so a long
thread loads its first and last messages, not all of them, and a replayed transcript is
told from new messages within that window only; NaN and infinity are refused (JSON).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from agent_framework import ContextProvider, HistoryProvider, Message
from agent_framework._sessions import filter_new_messages

from memoryd import validation as check
from memoryd.client import MemoryClient
from memoryd.errors import Conflict
from memoryd.types import ROLES
from memoryd.working.model import WorkingMessage, budget_of, thread_id, unit_of

if TYPE_CHECKING:
    from agent_framework import AgentSession, SessionContext, SupportsAgentRun

MESSAGE_KEY = "agent_framework_message"  # the metadata key of a message's whole form
DEFAULT_THREAD = "default"
SAVE_TRIES = 20  # compare-and-set attempts before a save gives up (Conflict)
_ROLES = {"developer": "system"}


def message_row(message: Message) -> dict[str, Any]:
    """The working-memory message of a framework message."""
    role = message.role if message.role in ROLES else _ROLES.get(message.role, "assistant")
    said = message.text
    content = said if said.strip() else json.dumps(
        [part.to_dict() for part in message.contents], ensure_ascii=False)
    name = message.author_name or None
    row: dict[str, Any] = {"role": role, "content": content}
    if name is not None:
        row["name"] = name
    whole = message.to_dict()
    if _plain(role, content, name).to_dict() != whole:
        row["metadata"] = {MESSAGE_KEY: whole}
    return row


def as_message(stored: WorkingMessage) -> Message:
    """The framework message a working-memory message holds; one another writer appended
    (the gateway, an MCP tool) is a plain message of its role and text."""
    whole = (stored.metadata or {}).get(MESSAGE_KEY)
    if isinstance(whole, Mapping):
        return Message.from_dict(dict(whole))
    return _plain(stored.role, stored.content, stored.name)


def _plain(role: str, content: str, name: str | None) -> Message:
    return Message(role, [content], author_name=name)


def input_query(messages: Sequence[Message]) -> str | None:
    """What the turn asks: its messages' text (the newest part, as much as a query
    holds), None when it has none."""
    said = "\n".join(m.text for m in messages if m.text.strip()).replace("\x00", " ")
    return said[-check.MAX_QUERY_CHARS:] if said.strip() else None


class _Thread:
    """The memoryd agent and the thread a session maps to."""

    def __init__(self, client: MemoryClient, agent_id: str, default_thread: str) -> None:
        self.client = client
        self.agent_id = check.agent_id(agent_id)
        self.default_thread = thread_id(default_thread)

    def of(self, session_id: str | None) -> str:
        return self.default_thread if session_id is None else thread_id(session_id)


class MemorydHistoryProvider(HistoryProvider):
    """The session's history as the messages of its memoryd thread. The flags are
    ``HistoryProvider``'s; ``skip_excluded`` is ``InMemoryHistoryProvider``'s."""

    DEFAULT_SOURCE_ID: ClassVar[str] = "memoryd"

    def __init__(self, client: MemoryClient, agent_id: str,
                 source_id: str = DEFAULT_SOURCE_ID, *, load_messages: bool = True,
                 store_inputs: bool = True, store_context_messages: bool = False,
                 store_context_from: set[str] | None = None, store_outputs: bool = True,
                 skip_excluded: bool = False, default_thread: str = DEFAULT_THREAD) -> None:
        super().__init__(source_id, load_messages=load_messages, store_inputs=store_inputs,
                         store_context_messages=store_context_messages,
                         store_context_from=store_context_from, store_outputs=store_outputs)
        self.thread = _Thread(client, agent_id, default_thread)
        self.skip_excluded = skip_excluded

    async def get_messages(self, session_id: str | None, *,
                           state: dict[str, Any] | None = None,
                           **kwargs: Any) -> list[Message]:
        held = await self.thread.client.aworking(self.thread.agent_id,
                                                 self.thread.of(session_id))
        messages = [as_message(stored) for stored in held.messages]
        if self.skip_excluded:
            messages = [m for m in messages if not m.additional_properties.get("_excluded")]
        return messages

    async def save_messages(self, session_id: str | None, messages: Sequence[Message], *,
                            state: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if messages:
            await asyncio.to_thread(self._save, self.thread.of(session_id), list(messages))

    def _save(self, thread: str, messages: list[Message]) -> None:
        """Append what the thread does not hold yet, against the version read: a save
        that lost the race to another reads again, so neither's messages are lost."""
        rows = [message_row(message) for message in messages]  # refused before any write
        client, agent = self.thread.client, self.thread.agent_id
        for _ in range(SAVE_TRIES):
            held = client.working(agent, thread)
            fresh = filter_new_messages([as_message(m) for m in held.messages], messages)
            if not fresh:
                return
            try:
                client.update_working(agent, thread, messages=rows[len(rows) - len(fresh):],
                                      expected_version=held.version)
                return
            except Conflict:
                continue
        raise Conflict(f"the thread moved on during {SAVE_TRIES} attempts to save")


class MemorydContextProvider(ContextProvider):
    """memoryd's turn context before each run, the turn into working memory after it.

    ``limit``, ``budget`` and ``budget_unit`` are ``MemoryClient.context``'s;
    ``include_thread=False`` leaves the thread out of the context (its working state and
    messages: a ``MemorydHistoryProvider`` beside this one loads them already);
    ``store_turns=False`` stores nothing (that provider stores them)."""

    DEFAULT_SOURCE_ID: ClassVar[str] = "memoryd_context"

    def __init__(self, client: MemoryClient, agent_id: str,
                 source_id: str = DEFAULT_SOURCE_ID, *, limit: int = 10,
                 budget: int | None = None, budget_unit: str = "chars",
                 include_thread: bool = True, store_turns: bool = True,
                 default_thread: str = DEFAULT_THREAD) -> None:
        super().__init__(source_id)
        self.thread = _Thread(client, agent_id, default_thread)
        self.limit = check.limit(limit)
        self.budget, self.budget_unit = budget_of(budget), unit_of(budget_unit)
        self.include_thread = check.boolean("include_thread", include_thread)
        self.store_turns = check.boolean("store_turns", store_turns)

    async def before_run(self, *, agent: SupportsAgentRun, session: AgentSession,
                         context: SessionContext, state: dict[str, Any]) -> None:
        query = input_query(context.input_messages)
        if query is None:
            return
        thread = self.thread.of(context.session_id) if self.include_thread else None
        block: str = await self.thread.client.acontext(
            self.thread.agent_id, query, limit=self.limit, thread_id=thread,
            budget=self.budget, budget_unit=self.budget_unit)
        if block.strip():
            context.extend_messages(self, [Message("user", [block])])

    async def after_run(self, *, agent: SupportsAgentRun, session: AgentSession,
                        context: SessionContext, state: dict[str, Any]) -> None:
        if not self.store_turns:
            return
        turn = list(context.input_messages)
        if context.response is not None:
            turn += context.response.messages
        if turn:  # one append: atomic, whatever else writes to the thread
            await self.thread.client.aupdate_working(
                self.thread.agent_id, self.thread.of(context.session_id),
                messages=[message_row(message) for message in turn])
