"""memoryd as MCP tools, with the official ``mcp`` SDK: remember, remember_status, recall,
forget, context, list_memories, history, kg_add and kg_query; and a thread's working memory:
working, update_working, clear_working, end_thread and threads.

No tool takes an agent id. The agent is bound to the connection by a ``Binding``: over
streamable HTTP, the API key's agent (or the ``X-Memoryd-Agent`` header's, if the key
covers it), checked at every call; over stdio, the ``--agent`` the command was started
with. Whatever a prompt-injected model puts in the arguments, it reaches only that agent.

Tools are thin: one ``MemoryClient`` call each, run in a worker thread so the event loop
keeps serving other connections. Results are text an LLM reads plus structured content.
A refused call says memoryd's type, field and message, never the caller's value: not in
the tool's error (the SDK's own would quote pydantic's ``input_value``), nor in the
SDK's log line of it. A message that is not JSON-RPC is refused the same way
(``jsonrpc_message``), before the SDK's transport would quote it. An argument a tool
does not take (``actor``, say: who made a change comes from the key) is refused too,
by name, rather than silently dropped.

A store that outlives the wait is not a failure: the broker holds it and a worker writes
it, so ``remember`` answers that the memory is accepted, with the task id that
``remember_status`` follows (``memoryd.gateway.accepted``, as the HTTP store's 202).
"""
# No `from __future__ import annotations`: the SDK reads these signatures at run time.

import json
import logging
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, Protocol, TypeVar
from uuid import UUID

import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    CallToolResult,
    InputRequiredResult,
    TextContent,
    ToolAnnotations,
    jsonrpc_message_adapter,
)
from pydantic import BaseModel, Field
from pydantic import ValidationError as PydanticValidationError

from memoryd import validation as check
from memoryd.auth.scope import Permission
from memoryd.client import MemoryClient, Pending
from memoryd.errors import ValidationError
from memoryd.gateway import access, problems
from memoryd.gateway.accepted import AcceptedTasks, TaskAccepted
from memoryd.gateway.access import Verifier
from memoryd.gateway.problems import UNREACHABLE
from memoryd.types import (
    Added,
    Entity,
    History,
    Memory,
    Page,
    Recalled,
    RecallMode,
    Relation,
    StoreResult,
)
from memoryd.working.model import (
    MessageIn,
    Promotion,
    ThreadInfo,
    ToolState,
    TurnContext,
    WorkingMemory,
)

T = TypeVar("T")
INSTRUCTIONS = (
    "Long-term memory for this agent. Call `recall` before answering anything that may "
    "depend on earlier conversations, and `remember` for facts, preferences and decisions "
    "worth keeping. Memories are private to this agent.")


class Binding(Protocol):
    """Which agent a tool call acts for, after checking it may do ``permission``, and
    who the changes it makes are recorded as made by."""

    def agent(self, ctx: Context, permission: Permission) -> str: ...

    def actor(self, ctx: Context) -> str | None: ...


class FixedAgent:
    """stdio: the agent named on the command line (whoever runs the command holds the
    broker's credentials, and is trusted with every agent anyway)."""

    def __init__(self, agent_id: str) -> None:
        self.agent_id = check.agent_id(agent_id)

    def agent(self, ctx: Context, permission: Permission) -> str:
        return self.agent_id

    def actor(self, ctx: Context) -> str | None:
        return None  # a local process, like the Python client


class KeyBinding:
    """Streamable HTTP: the request's API key decides, at every call."""

    def __init__(self, verifier: Verifier) -> None:
        self.verifier = verifier

    def agent(self, ctx: Context, permission: Permission) -> str:
        headers = ctx.headers or {}
        scope = access.authenticate(self.verifier, headers)
        agent_id = access.bound_agent(scope, headers)
        scope.require(agent_id, permission)
        return agent_id

    def actor(self, ctx: Context) -> str | None:
        return access.actor(access.authenticate(self.verifier, ctx.headers or {}))


class Recollection(BaseModel):
    memories: list[Recalled]


class Forgotten(BaseModel):
    id: str
    forgotten: bool


class Entities(BaseModel):
    entities: list[Entity]


class Remembered(BaseModel):
    """What ``remember`` and ``remember_status`` answer: the memory once a worker wrote
    it (``status`` "done"), or, while none has, "pending" and the ``task_id`` to follow.
    One object either way: an MCP tool's output schema is an object."""

    status: Literal["done", "pending"]
    id: UUID | None = None
    stored: bool = False
    duplicate: bool = False
    superseded: list[UUID] = Field(default_factory=list)
    task_id: str | None = None

    @classmethod
    def of(cls, outcome: StoreResult | TaskAccepted) -> "Remembered":
        if isinstance(outcome, TaskAccepted):
            return cls(status="pending", task_id=outcome.task_id)
        return cls(status="done", **outcome.model_dump())

    def said(self) -> str:
        if self.task_id is not None:
            return (f"Accepted: a worker will write this memory (task {self.task_id}); "
                    "call remember_status with that task id to see it stored.")
        done = f"{'Already remembered' if self.duplicate else 'Remembered'} (id {self.id})"
        if self.superseded:
            done += f"; it replaces {', '.join(str(old) for old in self.superseded)}"
        return done + "."


AS_OF = Field(description=(
    "Answer with what was true at this ISO-8601 time (with its timezone), replaced "
    "memories included if they held then"))


def _replaced(memory: Memory) -> str:
    """How a listing marks a memory that no longer holds."""
    if memory.current:
        return ""
    return f", replaced by {memory.superseded_by}" if memory.superseded_by else ", replaced"


def _history_text(found: History) -> str:
    """A memory's history as lines a model reads: now, then each earlier state."""
    memory = found.memory
    lines = [f"Now{'' if memory.current else ' (replaced)'}: {memory.content}"]
    lines += [f"- {v.changed_at.isoformat()} {v.cause}"
              + (f" by {v.actor}" if v.actor else "")
              + (f": was {v.data['content']}" if "content" in v.data else "")
              for v in found.versions]
    lines += [f"- {s.decided_at.isoformat()} {s.new_id} replaces {s.old_id} ({s.cause}, "
              f"{s.status})" for s in found.supersessions]
    return "\n".join(lines)


class Threads(BaseModel):
    threads: list[ThreadInfo]


THREAD = Field(description="The conversation thread's id (it becomes the session's id in "
                           "long-term memory)")


def _working_text(state: WorkingMemory) -> str:
    """A thread's working memory as lines a model reads (the structured content has all)."""
    if state.version == 0:
        return f"Thread {state.thread_id} holds no working memory."
    lines = [f"Thread {state.thread_id}, version {state.version}"
             + (f", expires {state.expires_at.isoformat()}" if state.expires_at else "")]
    named = (("Topic", state.topic), ("Entities", ", ".join(state.entities)),
             ("Flags", ", ".join(state.flags)),
             ("Counters", ", ".join(f"{k}={v}" for k, v in state.counters.items())),
             ("Variables", json.dumps(state.variables, ensure_ascii=False)
              if state.variables else ""))
    lines += [f"{label}: {value}" for label, value in named if value]
    if state.promoted:
        lines.append(f"({state.promoted} earlier messages are in long-term memory)")
    lines += [f"{m.seq}. {m.role}: {m.content}" for m in state.messages]
    return "\n".join(lines)


def _result(text: str, structured: BaseModel) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)],
                          structured_content=structured.model_dump(mode="json"))


class MemoryTools:
    """The tools of one server: a client to the workers and a way to bind the agent."""

    def __init__(self, client: MemoryClient, binding: Binding,
                 accepted: AcceptedTasks) -> None:
        self.client = client
        self.binding = binding
        self.accepted = accepted

    async def _call(self, ctx: Context, permission: Permission,
                    work: Callable[[str], T]) -> T:
        try:
            agent_id = await anyio.to_thread.run_sync(self.binding.agent, ctx, permission)
            return await anyio.to_thread.run_sync(work, agent_id)
        except UNREACHABLE:
            raise ToolError("memoryd is unavailable right now; try again later") from None
        except Exception as exc:  # memoryd's own words only, whatever failed
            raise ToolError(problems.said(exc)) from None

    async def remember(
        self, ctx: Context,
        content: Annotated[str, Field(description="What to remember, as a self-contained "
                                                  "statement (who, what, when).")],
        category: Annotated[str | None, Field(description=(
            "fact, preference, decision, task, context, event, reflection or summary; "
            "left out, memoryd classifies it"))] = None,
        importance: Annotated[float | None, Field(ge=0, le=1, description=(
            "0 to 1; how much this should outlive other memories"))] = None,
        tags: Annotated[list[str] | None, Field(description="Short labels to filter on")] = None,
        session_id: Annotated[str | None, Field(description="The conversation it came from")]
        = None,
        supersedes: Annotated[list[str] | None, Field(description=(
            "Ids of memories this one replaces (from recall): they stay as history, no "
            "longer recalled"))] = None,
        valid_from: Annotated[str | None, Field(description=(
            "When this became true, ISO-8601 with its timezone; left out, now"))] = None,
    ) -> Annotated[CallToolResult, Remembered]:
        fields: dict[str, Any] = {
            k: v for k, v in {"category": category, "importance": importance, "tags": tags,
                              "session_id": session_id, "supersedes": supersedes,
                              "valid_from": valid_from}.items() if v is not None}

        def store(agent: str) -> StoreResult | TaskAccepted:
            pending = self.client.store(agent, content, wait=False,
                                        actor=self.binding.actor(ctx), **fields)
            assert isinstance(pending, Pending)
            return self.accepted.wait_or_accept(pending, agent)

        remembered = Remembered.of(await self._call(ctx, "write", store))
        return _result(remembered.said(), remembered)

    async def remember_status(
        self, ctx: Context,
        task_id: Annotated[str, Field(description="The task id remember answered with")],
    ) -> Annotated[CallToolResult, Remembered]:
        outcome = await self._call(ctx, "write", lambda agent: self.accepted.outcome(
            agent, task_id))
        if isinstance(outcome, list):  # an HTTP batch of this agent's, not remember's
            raise ToolError(problems.said(ValidationError(
                "task_id", "is a batch store's; follow it over HTTP")))
        remembered = Remembered.of(outcome)
        return _result(remembered.said(), remembered)

    async def recall(
        self, ctx: Context,
        query: Annotated[str, Field(description="What you want to know, in plain words")],
        limit: Annotated[int, Field(ge=1, le=100, description="At most this many")] = 10,
        category: Annotated[str | None, Field(description="Only this category")] = None,
        tags: Annotated[list[str] | None, Field(description="Only memories with all of "
                                                            "these tags")] = None,
        mode: Annotated[RecallMode, Field(description="'fast', or 'deep' for a wider, slower "
                                               "search")] = "fast",
        since: Annotated[str | None, Field(description=(
            "Only memories created at or after this ISO-8601 time, with its timezone, "
            "e.g. 2026-11-18T00:00:00Z"))] = None,
        until: Annotated[str | None, Field(description="Only memories created before this "
                                                       "ISO-8601 time")] = None,
        metadata: Annotated[dict[str, Any] | None, Field(description=(
            "Only memories whose metadata has each of these keys with exactly this "
            "value"))] = None,
        include_superseded: Annotated[bool, Field(description=(
            "Also memories that were replaced, each marked with what replaced it"))] = False,
        as_of: Annotated[str | None, AS_OF] = None,
    ) -> Annotated[CallToolResult, Recollection]:
        found = await self._call(ctx, "read", lambda agent: self.client.recall(
            agent, query, limit=limit, category=category, tags=tags, mode=mode,
            since=since, until=until, metadata=metadata,
            include_superseded=include_superseded, as_of=as_of))
        lines = [f"{i}. [{r.memory.category}, score {r.score:.2f}, id {r.memory.id}"
                 f"{_replaced(r.memory)}] {r.memory.content}" for i, r in enumerate(found, 1)]
        return _result("\n".join(lines) or "Nothing relevant remembered.",
                       Recollection(memories=found))

    async def forget(
        self, ctx: Context,
        memory_id: Annotated[str, Field(description="The id of the memory to delete, as "
                                                    "recall or list_memories gave it")],
    ) -> Annotated[CallToolResult, Forgotten]:
        done = await self._call(ctx, "write",
                                lambda agent: self.client.forget(agent, memory_id))
        text = f"Forgot {memory_id}." if done else f"No memory {memory_id} to forget."
        return _result(text, Forgotten(id=memory_id, forgotten=done))

    async def context(
        self, ctx: Context,
        query: Annotated[str, Field(description="The task or question at hand")],
        limit: Annotated[int, Field(ge=1, le=100, description="Memories to include")] = 10,
        as_of: Annotated[str | None, AS_OF] = None,
        thread_id: Annotated[str | None, Field(description=(
            "The conversation's thread: its working memory and recent messages join the "
            "context"))] = None,
        budget: Annotated[int | None, Field(ge=1, le=10_000_000, description=(
            "The block's size limit, in budget_unit"))] = None,
        budget_unit: Annotated[Literal["chars", "tokens"], Field(description=(
            "chars, or tokens (estimated as 4 characters each)"))] = "chars",
    ) -> Annotated[CallToolResult, TurnContext]:
        found = await self._call(ctx, "read", lambda agent: self.client.context(
            agent, query, limit=limit, as_of=as_of, thread_id=thread_id, budget=budget,
            budget_unit=budget_unit, structured=True))
        return _result(found.context or "Nothing relevant remembered.", found)

    async def list_memories(
        self, ctx: Context,
        category: Annotated[str | None, Field(description="Only this category")] = None,
        limit: Annotated[int, Field(ge=1, le=200, description="Page size")] = 20,
        offset: Annotated[int, Field(ge=0, le=check.MAX_BIGINT,
                                     description="Memories to skip")] = 0,
        include_superseded: Annotated[bool, Field(description=(
            "Also memories that were replaced, marked"))] = False,
        as_of: Annotated[str | None, AS_OF] = None,
    ) -> Annotated[CallToolResult, Page]:
        page = await self._call(ctx, "read", lambda agent: self.client.list(
            agent, category=category, limit=limit, offset=offset,
            include_superseded=include_superseded, as_of=as_of))
        lines = [f"- [{m.category}, id {m.id}{_replaced(m)}] {m.content}" for m in page.items]
        header = f"{len(page.items)} of {page.total} memories (from {offset}):"
        return _result("\n".join([header, *lines]), page)

    async def history(
        self, ctx: Context,
        memory_id: Annotated[str, Field(description="The memory's id, as recall or "
                                                    "list_memories gave it")],
    ) -> Annotated[CallToolResult, History]:
        found = await self._call(ctx, "read",
                                 lambda agent: self.client.history(agent, memory_id))
        return _result(_history_text(found), found)

    async def kg_add(
        self, ctx: Context,
        id: Annotated[str, Field(description="The entity's name or id, e.g. 'Alice'")],
        type: Annotated[str, Field(description="person, project, place, ...")] = "entity",
        attributes: Annotated[dict[str, Any] | None, Field(description="Facts about it")]
        = None,
        relations: Annotated[list[Relation] | None, Field(description=(
            "Links to other entities: [{'target': 'Acme', 'type': 'works_at'}]"))] = None,
    ) -> Annotated[CallToolResult, Added]:
        entity = {"id": id, "type": type, "attributes": attributes or {},
                  "relations": [r.model_dump() for r in relations or []]}
        added = await self._call(ctx, "write", lambda agent: self.client.kg_add(agent, entity))
        return _result(f"Added {id} to the knowledge graph.", Added(id=id, added=added))

    async def kg_query(
        self, ctx: Context,
        start_id: Annotated[str, Field(description="The entity to start from")],
        depth: Annotated[int, Field(ge=0, le=check.MAX_KG_DEPTH,
                                    description="How many relation hops to follow")] = 2,
        as_of: Annotated[str | None, AS_OF] = None,
    ) -> Annotated[CallToolResult, Entities]:
        found = await self._call(ctx, "read", lambda agent: self.client.kg_query(
            agent, start_id, depth, as_of=as_of))
        lines = [f"- {e.id} ({e.type}) {e.attributes or ''} -> "
                 + ", ".join(f"{r.type} {r.target}" for r in e.relations) for e in found]
        return _result("\n".join(lines) or f"Nothing known about {start_id}.",
                       Entities(entities=found))

    # --- working memory: the live state of one thread -----------------------------------
    async def working(
        self, ctx: Context, thread_id: Annotated[str, THREAD],
    ) -> Annotated[CallToolResult, WorkingMemory]:
        state = await self._call(ctx, "read",
                                 lambda agent: self.client.working(agent, thread_id))
        return _result(_working_text(state), state)

    async def update_working(
        self, ctx: Context, thread_id: Annotated[str, THREAD],
        messages: Annotated[list[MessageIn] | None, Field(description=(
            "Messages to append: [{'role': 'user', 'content': '...'}]"))] = None,
        variables: Annotated[dict[str, Any] | None, Field(description=(
            "Variables to set, any JSON value each"))] = None,
        delete_variables: Annotated[list[str] | None, Field(description=(
            "Names of variables to delete"))] = None,
        set_flags: Annotated[list[str] | None, Field(description="Flags to set")] = None,
        clear_flags: Annotated[list[str] | None, Field(description="Flags to clear")] = None,
        increment: Annotated[dict[str, int] | None, Field(description=(
            "Counters to add to (negative to subtract): {'turns': 1}"))] = None,
        topic: Annotated[str | None, Field(description=(
            "The thread's topic now; an empty string clears it"))] = None,
        entities: Annotated[list[str] | None, Field(description=(
            "The entities in play now (replaces the thread's list)"))] = None,
        tools: Annotated[ToolState | None, Field(description=(
            "The tools in flight now: active, results, pending (replaces them)"))] = None,
        importance: Annotated[float | None, Field(description=(
            "0 to 1; how much this thread's messages matter in long-term memory"))] = None,
        ttl_seconds: Annotated[int | None, Field(description=(
            "Seconds of inactivity before the thread ends by itself"))] = None,
        expected_version: Annotated[int | None, Field(description=(
            "Apply only if the thread is at this version (from working); else a conflict, "
            "and nothing changes"))] = None,
    ) -> Annotated[CallToolResult, WorkingMemory]:
        given = {"messages": messages, "variables": variables,
                 "delete_variables": delete_variables, "set_flags": set_flags,
                 "clear_flags": clear_flags, "increment": increment, "topic": topic,
                 "entities": entities, "tools": tools, "importance": importance,
                 "ttl_seconds": ttl_seconds, "expected_version": expected_version}
        fields = {name: _plain(value) for name, value in given.items() if value is not None}
        state = await self._call(ctx, "write", lambda agent: self.client.update_working(
            agent, thread_id, fields))
        return _result(f"Updated thread {thread_id}: version {state.version}.", state)

    async def clear_working(
        self, ctx: Context, thread_id: Annotated[str, THREAD],
    ) -> Annotated[CallToolResult, WorkingMemory]:
        state = await self._call(ctx, "write",
                                 lambda agent: self.client.clear_working(agent, thread_id))
        return _result(f"Cleared thread {thread_id}; its messages go to long-term memory.",
                       state)

    async def end_thread(
        self, ctx: Context, thread_id: Annotated[str, THREAD],
    ) -> Annotated[CallToolResult, Promotion]:
        done = await self._call(ctx, "write",
                                lambda agent: self.client.end_thread(agent, thread_id))
        text = (f"Ended thread {thread_id}: {done.promoted} messages now in long-term memory "
                f"as session {thread_id}." if done.ended
                else f"Thread {thread_id} holds no working memory: nothing to end.")
        return _result(text, done)

    async def threads(
        self, ctx: Context,
        limit: Annotated[int, Field(ge=1, le=1000, description="At most this many")] = 100,
        offset: Annotated[int, Field(ge=0, le=check.MAX_BIGINT,
                                     description="Threads to skip")] = 0,
    ) -> Annotated[CallToolResult, Threads]:
        found = await self._call(ctx, "read", lambda agent: self.client.threads(
            agent, limit=limit, offset=offset))
        lines = [f"- {t.thread_id} (expires {t.expires_at.isoformat()})" for t in found]
        return _result("\n".join(lines) or "No live threads.", Threads(threads=found))


def _plain(value: Any) -> Any:
    """An argument as JSON would carry it: the client parses it into ``WorkingUpdate``
    again, checking every value, as for any other caller."""
    if isinstance(value, BaseModel):
        return value.model_dump(exclude_none=True)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


_READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
# Writes are idempotent (a repeated remember finds its duplicate, a repeated forget
# finds nothing); only forget destroys.
_ADD = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                       open_world_hint=False)
_DELETE = _ADD.model_copy(update={"destructive_hint": True})
# An update appends and adds: repeated, it does so twice.
_UPDATE = _ADD.model_copy(update={"idempotent_hint": False})
# (method, description, annotations): the descriptions are what a model reads.
TOOLS: tuple[tuple[str, str, ToolAnnotations], ...] = (
    ("remember", "Store a memory for later: a fact, preference, decision or event worth "
                 "keeping across conversations. Storing the same text twice is harmless. "
                 "When memoryd is busy it answers a task id: the memory is still stored.",
     _ADD),
    ("remember_status", "Whether a memory that remember accepted (answering a task id "
                        "instead of an id) has been stored yet, and its id once it is.",
     _READ),
    ("recall", "Search your long-term memory: the memories most relevant to a query, best "
               "first, with their ids and scores.", _READ),
    ("forget", "Delete one memory for good, by its id (from recall or list_memories). Use "
               "when a memory is wrong or the user asks you to forget it.", _DELETE),
    ("context", "The memories relevant to a task, as one block of text to read before "
                "answering.", _READ),
    ("list_memories", "Browse your memories, newest first, a page at a time.", _READ),
    ("history", "How one memory came to be as it is: its earlier versions (when, why, by "
                "whom) and what it replaced or was replaced by.", _READ),
    ("kg_add", "Add or update an entity in your knowledge graph, with attributes and "
               "relations to other entities.", _ADD),
    ("kg_query", "What your knowledge graph holds about an entity and its neighbours, up "
                 "to depth relation hops away.", _READ),
    ("working", "The working memory of one conversation thread: its recent messages, "
                "variables, flags, counters, topic, entities and tools in flight, and its "
                "version (0: the thread holds nothing yet).", _READ),
    ("update_working", "Change a thread's working memory in one atomic step: append "
                       "messages, set or delete variables, set or clear flags, add to "
                       "counters, set the topic, entities or tools. With expected_version it "
                       "applies only if nobody changed the thread since you read it.",
     _UPDATE),
    ("clear_working", "Empty a thread's working memory and start afresh; its messages are "
                      "kept in long-term memory.", _DELETE),
    ("end_thread", "End a conversation thread: its messages become a session in long-term "
                   "memory (recallable later) and its working memory is deleted.", _DELETE),
    ("threads", "Your live conversation threads, those about to expire first.", _READ),
)


TOOL_NAMES = frozenset(name for name, _, _ in TOOLS)


class MemorydServer(MCPServer):
    """The SDK's server, refusing in memoryd's words: a call to a tool that does not
    exist, or with arguments of the wrong type, is a ``ValidationError`` naming the
    argument (the SDK's text would repeat the tool's name or the value as sent)."""

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context[Any, Any] | None = None
                        ) -> CallToolResult | InputRequiredResult:
        if name not in TOOL_NAMES:
            raise ToolError(problems.said(ValidationError(
                "name", f"is not a tool; the tools are {', '.join(sorted(TOOL_NAMES))}")))
        self._refuse_unknown(name, arguments)
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, PydanticValidationError):
                # (caused by pydantic's error, so the SDK logs the field names only)
                raise ToolError(problems.said(check.refusal(cause, "arguments"))) from cause
            raise

    def _refuse_unknown(self, name: str, arguments: dict[str, Any]) -> None:
        """An argument the tool does not take is refused by name (pydantic would drop
        it): a caller learns that ``actor`` or a misspelt filter did nothing."""
        tool = self._tool_manager.get_tool(name)
        known = set(tool.parameters.get("properties", {})) if tool is not None else set()
        unknown = sorted(set(arguments or {}) - known, key=str)
        if unknown:
            raise ToolError(problems.said(ValidationError(
                check.field_name("", unknown[0], "arguments"), "is not an argument of this "
                                                               "tool")))


# Which of JSON-RPC's messages a body means to be, by the member that only it has: the
# SDK tries each in turn, and its refusal would list every one of them with the value.
_JSONRPC_KINDS = (("method", "JSONRPCRequest"), ("result", "JSONRPCResponse"),
                  ("error", "JSONRPCError"))


def jsonrpc_message(payload: object) -> None:
    """``payload`` (a JSON body, as ``validation.json_body`` read it) must be one JSON-RPC
    message as MCP's transport takes it; else a ``ValidationError`` naming the member
    that is wrong, never its value (the SDK's own refusal quotes pydantic's
    ``input_value``)."""
    if isinstance(payload, list):
        raise ValidationError("body", "must be one JSON-RPC message (MCP takes no batches)")
    if not isinstance(payload, Mapping):
        raise ValidationError("body", "must be a JSON-RPC message: a JSON object")
    try:
        jsonrpc_message_adapter.validate_python(payload, by_name=False)
    except PydanticValidationError as exc:
        raise _jsonrpc_refusal(payload, exc) from None


def _jsonrpc_refusal(payload: Mapping[str, Any], exc: PydanticValidationError
                     ) -> ValidationError:
    kind = next((kind for member, kind in _JSONRPC_KINDS if member in payload), None)
    if kind == "JSONRPCRequest" and "id" not in payload:
        kind = "JSONRPCNotification"
    for error in exc.errors(include_url=False, include_input=False):
        if error["loc"][:1] == (kind,):
            where = ""
            for part in error["loc"][1:]:
                where = f"{where}[{part}]" if isinstance(part, int) else check.field_name(
                    where, part)
            return ValidationError(where or "body", error["msg"])
    return ValidationError("body", "is not a JSON-RPC request, notification or response")


# The SDK's logger of tool calls, and its lines for a refused call: the tool's name as
# the caller sent it (any text), and the error's text.
SDK_LOGGER = "mcp.server.mcpserver.server"
_REFUSED_CALL = "Tool %r failed: %r"


class RefusedCallLines(logging.Filter):
    """The SDK's line for a refused tool call without the caller's words: a name that is
    not a tool's is hidden, and the error's text (the caller has it) left out."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == _REFUSED_CALL and isinstance(record.args, tuple) and record.args:
            name = record.args[0]
            record.msg = "Tool %r failed"
            record.args = (name if name in TOOL_NAMES else "<not a tool>",)
        return True


def quiet_refused_calls() -> None:
    """Install ``RefusedCallLines`` on the SDK's logger, once per process."""
    logger = logging.getLogger(SDK_LOGGER)
    if not any(isinstance(f, RefusedCallLines) for f in logger.filters):
        logger.addFilter(RefusedCallLines())


def build_server(client: MemoryClient, binding: Binding,
                 accepted: AcceptedTasks | None = None) -> MCPServer:
    """An MCP server whose tools act for the agent ``binding`` names; ``accepted``
    (the gateway's) binds stores that outlive the client's wait, one on the client's
    settings by default (stdio)."""
    quiet_refused_calls()
    server = MemorydServer("memoryd", instructions=INSTRUCTIONS, version="0.1.0")
    tools = MemoryTools(client, binding, accepted or AcceptedTasks(client.settings))
    for name, description, annotations in TOOLS:
        server.add_tool(getattr(tools, name), name=name, description=description,
                        annotations=annotations, structured_output=True)
    return server
