"""Working memory's shapes: one request model per operation, the state a thread holds,
and the limits every update is checked against before anything is sent to Redis.

``WorkingUpdate`` is the one model of an update: the client's keywords, the gateway's
body and the MCP tool's arguments are all parsed into it by ``update_request``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from memoryd import validation as check
from memoryd.errors import ValidationError
from memoryd.types import ROLES, Memory

MAX_UPDATE_MESSAGES = 1000  # messages appended by one update
MAX_NAMES = 256  # flags, entities, tool entries, variables or counters in one update
MAX_NAME_CHARS = 256  # a variable's, flag's, counter's or entity's name
MAX_TOPIC_CHARS = 1024
COUNTER_BOUND = 2**53 - 1  # a counter stays exact in Lua's doubles and in JSON
MAX_INCREMENT = COUNTER_BOUND  # one increment, either way
MIN_TTL_S, MAX_TTL_S = 1, 30 * 86400
MAX_THREADS_LISTED = 1000
BUDGET_UNITS = ("chars", "tokens")
MAX_BUDGET = 10_000_000


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MessageIn(_Model):
    """A message appended to a thread."""

    role: str
    content: str
    name: str | None = None
    metadata: dict[str, Any] | None = None


class ToolState(_Model):
    """The tools in flight: those active, their results, the operations pending."""

    active: list[Any] = []
    results: list[Any] = []
    pending: list[Any] = []


class WorkingUpdate(_Model):
    """One atomic update of a thread. Absent fields change nothing; ``topic`` "" clears
    the topic; ``entities`` and ``tools`` replace what the thread held."""

    messages: list[MessageIn] = []
    variables: dict[str, Any] = {}
    delete_variables: list[str] = []
    set_flags: list[str] = []
    clear_flags: list[str] = []
    increment: dict[str, int] = {}
    topic: str | None = None
    entities: list[str] | None = None
    tools: ToolState | None = None
    importance: float | None = None
    ttl_seconds: int | None = Field(None, ge=MIN_TTL_S, le=MAX_TTL_S)
    expected_version: int | None = Field(None, ge=0)


class WorkingMessage(_Model):
    """A message of the live conversation; ``seq`` numbers the thread's messages from 1."""

    seq: int
    role: str
    content: str
    at: datetime
    name: str | None = None
    metadata: dict[str, Any] | None = None


class WorkingMemory(_Model):
    """A thread's working memory. ``version`` counts its updates (0: no such thread);
    ``promoted`` counts the messages trimmed from it into long-term memory, and
    ``pending`` (when asked for) holds those trimmed (or copied) on their way there."""

    agent_id: str
    thread_id: str
    version: int = 0
    messages: list[WorkingMessage] = []
    topic: str | None = None
    entities: list[str] = []
    tools: ToolState = ToolState()
    variables: dict[str, Any] = {}
    flags: list[str] = []
    counters: dict[str, int] = {}
    importance: float = 0.5
    created_at: datetime | None = None
    last_accessed_at: datetime | None = None
    access_count: int = 0
    ttl_seconds: int
    expires_at: datetime | None = None
    promoted: int = 0
    pending: list[WorkingMessage] = []


class ThreadInfo(_Model):
    thread_id: str
    expires_at: datetime


class Promotion(_Model):
    """What one promotion wrote: messages new to long-term memory (``promoted``) and
    those an earlier attempt had already written (``already``)."""

    agent_id: str
    thread_id: str
    promoted: int
    already: int
    ended: bool


class ContextItem(_Model):
    """A long-term memory in the turn's context: its fused score and the strategies that
    chose it (``similar``, ``entities``, ``recent``)."""

    memory: Memory
    score: float
    strategies: list[str]


class TurnContext(_Model):
    """The turn's context: ``context`` is the prompt block; the rest says what it holds
    (``used`` in the budget's unit, characters or estimated tokens)."""

    context: str
    working: WorkingMemory | None = None
    memories: list[ContextItem] = []
    messages_included: int = 0
    budget: int | None = None
    unit: str = "chars"
    used: int = 0


class Limits(_Model):
    """The sizes an update is checked against (from the settings)."""

    max_message_bytes: int
    max_value_bytes: int


def thread_id(value: object) -> str:
    """A thread id: it becomes the long-term session's id, so the same rules."""
    return check.required_text("thread_id", value, max_len=check.MAX_KEY)


def budget_of(value: object) -> int | None:
    """The turn context's size limit, when given."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_BUDGET:
        raise ValidationError("budget", f"must be an integer from 1 to {MAX_BUDGET}")
    return value


def unit_of(value: object) -> str:
    if value not in BUDGET_UNITS:
        raise ValidationError("budget_unit", f"must be one of {', '.join(BUDGET_UNITS)}")
    return str(value)


def update_request(raw: WorkingUpdate | Mapping[str, Any], limits: Limits) -> WorkingUpdate:
    """The update parsed and every value checked; a refusal names the field."""
    update = raw if isinstance(raw, WorkingUpdate) else check.request(WorkingUpdate, raw)
    for index, message in enumerate(update.messages):
        _message(f"messages[{index}]", message, limits)
    if len(update.messages) > MAX_UPDATE_MESSAGES:
        raise ValidationError("messages", f"at most {MAX_UPDATE_MESSAGES} per update")
    for name, value in update.variables.items():
        _name("variables", name)
        _json_value(f"variables.{name}", value, limits.max_value_bytes)
    for field in ("variables", "delete_variables", "set_flags", "clear_flags", "increment"):
        _names(field, getattr(update, field))
    for name, amount in update.increment.items():
        if abs(amount) > MAX_INCREMENT:
            raise ValidationError(f"increment.{name}", f"at most {MAX_INCREMENT} either way")
    if update.entities is not None:
        _names("entities", update.entities)
    if update.topic:
        check.short_text("topic", update.topic, max_len=MAX_TOPIC_CHARS)
    if update.tools is not None:
        for part in ("active", "results", "pending"):
            if len(getattr(update.tools, part)) > MAX_NAMES:
                raise ValidationError(f"tools.{part}", f"at most {MAX_NAMES} entries")
        _json_value("tools", update.tools.model_dump(), limits.max_value_bytes)
    check.unit_interval("importance", update.importance)
    return update


def _message(field: str, message: MessageIn, limits: Limits) -> None:
    if message.role not in ROLES:
        raise ValidationError(f"{field}.role", f"must be one of {', '.join(ROLES)}")
    try:
        check.content(message.content, limits.max_message_bytes)
    except ValidationError as exc:  # the same rule, named where it applies
        raise type(exc)(f"{field}.content", exc.message) from None
    check.short_text(f"{field}.name", message.name)
    if message.metadata is not None:  # it becomes the promoted memory's metadata
        check.json_object(f"{field}.metadata", message.metadata)
        _json_value(f"{field}.metadata", message.metadata, limits.max_value_bytes)


def _names(field: str, names: Any) -> None:
    if len(names) > MAX_NAMES:
        raise ValidationError(field, f"at most {MAX_NAMES} names")
    for name in names:
        _name(field, name)


def _name(field: str, name: str) -> None:
    check.required_text(field, name, max_len=MAX_NAME_CHARS)


def _json_value(field: str, value: Any, max_bytes: int) -> None:
    """A value stored as JSON: bounded depth and size, and no NaN (JSON has none)."""
    check.json_depth(field, value)
    try:
        size = len(json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8"))
    except (TypeError, ValueError):
        raise ValidationError(field, "must be JSON (finite numbers)") from None
    if size > max_bytes:
        raise ValidationError(field, f"is {size} bytes of JSON, at most {max_bytes}")
