"""Result and request types shared by the store, the worker and the client.

Plain pydantic models: JSON-serializable (``model_dump(mode="json")``) so a
worker can return them over the broker and the client can rebuild them.
This module must not import SQLAlchemy: the thin client depends on it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, computed_field

CATEGORIES: tuple[str, ...] = (
    "fact", "preference", "decision", "task", "context", "event", "reflection", "summary",
)
ROLES: tuple[str, ...] = ("user", "assistant", "system", "tool")
LINK_KINDS: tuple[str, ...] = ("related", "derived_from", "supports", "contradicts")
RecallMode = Literal["fast", "deep"]
RECALL_MODES: tuple[RecallMode, ...] = ("fast", "deep")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class StoreResult(_Model):
    id: UUID
    stored: bool
    duplicate: bool
    # The memories this store replaced (explicitly, by key or as judged): now superseded.
    superseded: tuple[UUID, ...] = ()


class StoreItem(_Model):
    """One item of ``store_many``: the same fields as ``store``'s keywords."""

    content: str
    role: str | None = None
    session_id: str | None = None
    key: str | None = None
    category: str | None = None
    importance: float | None = None
    tags: tuple[str, ...] = ()
    source: str | None = None
    metadata: dict[str, Any] | None = None
    expires_at: datetime | None = None
    created_at: datetime | None = None
    # When the memory became true (``created_at`` unless given): what ``as_of`` compares.
    valid_from: datetime | None = None
    # Memories of the same agent this one replaces: each is superseded, never deleted.
    supersedes: tuple[UUID, ...] = ()


class Memory(_Model):
    id: UUID
    agent_id: str
    content: str
    role: str | None = None
    session_id: str | None = None
    key: str | None = None
    category: str
    tags: tuple[str, ...] = ()
    source: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    importance: float
    confidence: float
    pinned: bool = False
    access_count: int = 0
    last_accessed_at: datetime | None = None
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None = None
    archived_at: datetime | None = None
    # Validity in time: true from ``valid_from``; once replaced, until ``valid_to``, by
    # ``superseded_by`` (``current`` says which).
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    superseded_by: UUID | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def current(self) -> bool:
        """Whether the memory still holds (nothing replaced it)."""
        return self.valid_to is None


class ScoreComponents(_Model):
    semantic: float
    keyword: float
    recency: float
    importance: float
    confidence: float
    # The score of the best-scoring candidate adjacent to this one in its session
    # (0 if none); it adds ``recall_context_weight`` x this to the score.
    context: float = 0.0


class Recalled(_Model):
    memory: Memory
    score: float
    components: ScoreComponents

    @property
    def id(self) -> UUID:
        return self.memory.id

    @property
    def content(self) -> str:
        return self.memory.content


class Supersession(_Model):
    """A decision that ``new_id`` replaces ``old_id``, or a candidate in the review queue
    (``status``: applied, review, rejected, undone)."""

    id: int
    agent_id: str
    old_id: UUID
    new_id: UUID
    cause: str  # explicit, key, judge, reconcile
    judge: str | None = None  # offline, llm, offline+llm
    attribute: str | None = None
    confidence: float
    status: str
    actor: str | None = None
    decided_at: datetime
    reviewed_at: datetime | None = None
    reviewed_by: str | None = None


class Version(_Model):
    """A memory as it was before one change: when, why (``cause``), by whom (``actor``:
    an API key's id or a maintenance run), and its fields then."""

    changed_at: datetime
    cause: str
    actor: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class History(_Model):
    """A memory now, every earlier state of it, and the supersessions it took part in
    (the memories it replaced, and what replaced it)."""

    memory: Memory
    versions: list[Version] = Field(default_factory=list)
    supersessions: list[Supersession] = Field(default_factory=list)


class Page(_Model):
    total: int
    items: list[Memory]


class Related(_Model):
    memory: Memory
    kind: str
    score: float


class Relation(_Model):
    target: str
    type: str
    # When the edge holds: from ``valid_from`` (when it was added, if not given) until
    # ``valid_to`` (None: it still does). A query returns each edge's own.
    valid_from: datetime | None = None
    valid_to: datetime | None = None


class Entity(_Model):
    id: str
    type: str = "entity"
    attributes: dict[str, Any] = Field(default_factory=dict)
    relations: list[Relation] = Field(default_factory=list)


class SessionInfo(_Model):
    session_id: str
    message_count: int
    summary: str | None = None
    created_at: datetime
    updated_at: datetime
    compacted_at: datetime | None = None
    consolidated_at: datetime | None = None
    indexed_at: datetime | None = None
    repaired_at: datetime | None = None


# --- request bodies of the HTTP API (the gateway's OpenAPI schema) -----------------------
class StoreBatch(_Model):
    """Several memories in one request: ``{"items": [...]}``."""

    items: list[StoreItem]


class RecallRequest(_Model):
    query: str
    limit: int = 10
    category: str | None = None
    tags: list[str] | None = None
    session_id: str | None = None
    include_archived: bool = False
    mode: RecallMode = "fast"
    # ISO-8601 with a timezone: created_at >= since, created_at < until (checked, naming
    # the field, by memoryd.validation.timestamp like every other boundary's).
    since: Annotated[str | None, Field(json_schema_extra={"format": "date-time"})] = None
    until: Annotated[str | None, Field(json_schema_extra={"format": "date-time"})] = None
    # Equality filters on metadata keys.
    metadata: dict[str, Any] | None = None
    # Replaced memories too (marked), or what was true at ``as_of`` (ISO-8601).
    include_superseded: bool = False
    as_of: Annotated[str | None, Field(json_schema_extra={"format": "date-time"})] = None


class ContextRequest(_Model):
    query: str
    limit: int = 10
    as_of: Annotated[str | None, Field(json_schema_extra={"format": "date-time"})] = None
    # The thread whose working memory and recent messages join the context.
    thread_id: str | None = None
    # The block's size limit, in ``budget_unit`` (tokens estimated as 4 characters).
    budget: int | None = Field(None, ge=1, le=10_000_000)
    budget_unit: Literal["chars", "tokens"] = "chars"


class JobRunRequest(_Model):
    agent_id: str | None = None
    dry_run: bool = False
    params: dict[str, Any] = Field(default_factory=dict)
    wait: bool = True


class Deleted(_Model):
    id: UUID
    deleted: bool


class Added(_Model):
    id: str
    added: bool


class JobRun(_Model):
    """One maintenance run, as the audit table ``maintenance_runs`` records it."""

    id: int
    job: str
    agent_id: str | None = None
    status: str
    dry_run: bool
    started_at: datetime
    finished_at: datetime | None = None
    stats: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None


class AgentStats(_Model):
    agent_id: str
    total: int
    categories: dict[str, int]


class EmbeddingProgress(_Model):
    """How far the store is on its configured embedding ``model`` (the ``reembed`` job
    moves the rest)."""

    model: str
    memories_by_model: dict[str, int]
    done_percent: float


class Restored(_Model):
    id: UUID
    restored: bool


class JobQueued(_Model):
    job: str
    task_id: str


class Erasure(_Model):
    """What erasing one agent removed (``forget_agent``), or would remove now (the
    CLI's preview): rows per table, never their contents."""

    agent_id: str
    deleted: dict[str, int]
    # Rows kept with the agent taken out of them: keys for several agents, other runs' audit.
    scrubbed: dict[str, int]
    # Whether the agent's own HNSW index was dropped (in a preview: whether it exists).
    index_dropped: bool
    # False when the time budget ran out first: running it again goes on from there.
    complete: bool
    # Its row in ``maintenance_runs`` (job ``forget_agent``); None for a preview.
    run_id: int | None = None
