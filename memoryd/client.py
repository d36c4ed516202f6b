"""The thin client agents import. It validates input, enqueues jobs by task
name and rebuilds typed results. It imports nothing of the worker, the store
or SQLAlchemy: ``pip install memoryd`` (without ``[server]``) is enough.

    client = MemoryClient()
    client.store("agent-1", "User prefers dark mode", role="user", session_id="s1")
    hits = client.recall("agent-1", "what theme does the user like?", limit=5)

A store that outlives its ``timeout`` raises ``MemorydTimeoutError`` and is written all
the same; its ``task_id`` (or a ``wait=False`` handle's ``id``, or the gateway's 202)
is followed later:

    result = client.pending(task_id, "store").get(timeout=60)
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar, overload
from uuid import UUID

from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeoutError
from celery.result import AsyncResult
from kombu.exceptions import OperationalError as BrokerOperationalError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from memoryd import validation as check
from memoryd.celery_config import (
    MAINTENANCE_QUEUE,
    MAINTENANCE_TASK_PREFIX,
    MEMORY_QUEUE,
    celery_config,
)
from memoryd.config import Settings, get_settings
from memoryd.errors import (
    MemorydError,
    MemorydTimeoutError,
    Unavailable,
    ValidationError,
    WorkerError,
)
from memoryd.redaction import describe_error, summarize
from memoryd.types import (
    AgentStats,
    EmbeddingProgress,
    Entity,
    Erasure,
    History,
    JobRun,
    Memory,
    Page,
    Recalled,
    SessionInfo,
    StoreItem,
    StoreResult,
    Supersession,
)
from memoryd.working.model import (
    Promotion,
    ThreadInfo,
    TurnContext,
    WorkingMemory,
    WorkingMessage,
    WorkingUpdate,
    budget_of,
    thread_id,
    unit_of,
)
from memoryd.working.model import thread_id as thread_ref
from memoryd.working.store import END_TASK, PROMOTE_TASK, WorkingStore, thread_tag

T = TypeVar("T")
DEFAULT_TIMEOUT_S = 30.0


# The broker or the result backend could not be reached (kombu's error, redis-py's, or
# the RuntimeError Celery's result consumer raises when its reconnection attempts ran out).
CONNECTION_ERRORS: tuple[type[Exception], ...] = (
    BrokerOperationalError, RedisConnectionError, RedisTimeoutError, ConnectionError)


@contextlib.contextmanager
def unreachable_as_unavailable() -> Iterator[None]:
    """Raise memoryd's ``Unavailable`` for a broker or result backend that cannot be
    reached, rather than a Celery, kombu or redis type."""
    try:
        yield
    except CONNECTION_ERRORS as exc:
        raise Unavailable(f"the broker is unreachable: {type(exc).__name__}") from None
    except RuntimeError as exc:
        if not isinstance(exc.__cause__, CONNECTION_ERRORS):
            raise
        raise Unavailable("the result backend is unreachable") from None


class Pending(Generic[T]):
    """A job enqueued with ``wait=False``, or followed by its id (``MemoryClient.pending``):
    ``get()`` waits for its typed result."""

    def __init__(self, result: AsyncResult, convert: Callable[[Any], T],
                 timeout: float) -> None:
        self._result = result
        self._convert = convert
        self._timeout = timeout
        # The outcome, kept once fetched: the backend's copy is forgotten right away.
        self._outcome: tuple[T] | MemorydError | None = None

    @property
    def id(self) -> str:
        return str(self._result.id)

    def ready(self) -> bool:
        return self._outcome is not None or bool(self._result.ready())

    def get(self, timeout: float | None = None) -> T:
        if self._outcome is None:
            self._outcome = self._fetch(self._timeout if timeout is None else timeout)
        if isinstance(self._outcome, MemorydError):
            raise self._outcome
        return self._outcome[0]

    def _fetch(self, wait: float) -> tuple[T] | MemorydError:
        """The worker's outcome, then the backend's copy forgotten: only once it was read
        and converted. A wait that times out, or a backend that cannot be reached, leaves
        it there (it may land the instant after) for a later ``get()`` or a follower
        (``MemoryClient.pending``, the gateway's follow route) to read."""
        try:
            with unreachable_as_unavailable():
                # propagate=False: a failed job's error comes back as its value, so that
                # whatever ``get`` raises is about the wait, not the job.
                value = self._result.get(timeout=wait, propagate=False,
                                         disable_sync_subtasks=False)
        except CeleryTimeoutError:
            raise MemorydTimeoutError(f"job {self.id} did not finish within {wait:g} s",
                                      self.id) from None
        except Unavailable:
            raise  # nothing was read: a later get() reads it
        except Exception as exc:  # a result Celery read but could not rebuild
            value = exc
        outcome = self._outcome_of(value)
        with contextlib.suppress(*CONNECTION_ERRORS):
            self._result.forget()
        return outcome

    def _outcome_of(self, value: Any) -> tuple[T] | MemorydError:
        if isinstance(value, MemorydError):
            return value
        if isinstance(value, BaseException):  # rebuilt from the worker: never leak its text
            return WorkerError(describe_error(value))
        return (self._convert(value),)


class MemoryClient:
    """Send memory jobs to memoryd's workers. Same arguments and result types as
    ``MemoryStore``; every call validates before it enqueues."""

    def __init__(self, broker_url: str | None = None, result_backend: str | None = None, *,
                 timeout: float = DEFAULT_TIMEOUT_S, settings: Settings | None = None) -> None:
        self.settings = settings or get_settings()
        self.timeout = timeout
        self._backends: set[Any] = set()
        self._app = Celery("memoryd-client", set_as_current=False)
        self._app.conf.update(celery_config(self.settings, broker_url=broker_url,
                                            result_backend=result_backend, caller=True))
        self._working: WorkingStore | None = None

    def close(self) -> None:
        """Release broker and result-backend connections (of every thread that used us)."""
        for backend in list(self._backends):
            consumer = getattr(backend, "result_consumer", None)
            if consumer is not None:
                consumer.stop()
                # Abandoned results would otherwise try to unsubscribe (and reconnect,
                # for about 20 s) when they are garbage-collected after close.
                consumer.subscribed_to.clear()
        self._backends.clear()
        self._app.close()
        if self._working is not None:
            self._working.close()

    def check_broker(self, timeout: float = 2.0) -> None:
        """Connect to the broker once; raises if it does not answer within ``timeout``."""
        with self._app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=timeout)

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- plumbing -------------------------------------------------------------
    def _send(self, name: str, kwargs: dict[str, Any], convert: Callable[[Any], T], *,
              wait: bool, timeout: float | None, queue: str = MEMORY_QUEUE) -> T | Pending[T]:
        # The headers carry a summary of the arguments (what Flower and task events show):
        # contents stay out of the monitoring path, and Celery's own repr of every argument
        # cost about a fifth of each publish.
        with unreachable_as_unavailable():
            result = self._app.send_task(name, kwargs=kwargs, queue=queue, argsrepr="()",
                                         kwargsrepr=summarize(kwargs))
        pending = self._pending(result, convert, timeout)
        return pending.get() if wait else pending

    def _pending(self, result: AsyncResult, convert: Callable[[Any], T],
                 timeout: float | None) -> Pending[T]:
        # Celery keeps one result backend per thread (asyncio calls run in threads).
        self._backends.add(self._app.backend)
        return Pending(result, convert, self.timeout if timeout is None else timeout)

    def _call(self, name: str, kwargs: dict[str, Any], convert: Callable[[Any], T],
              timeout: float | None) -> T:
        value = self._send(name, kwargs, convert, wait=True, timeout=timeout)
        assert not isinstance(value, Pending)
        return value

    # --- memory API -------------------------------------------------------------
    def store(self, agent_id: str, content: str, *, wait: bool = True,
              timeout: float | None = None, actor: str | None = None,
              **fields: Any) -> StoreResult | Pending[StoreResult]:
        """Store one memory (``role``, ``session_id``, ``key``, ``category``, ``importance``,
        ``tags``, ``source``, ``metadata``, ``expires_at``, ``created_at``, ``valid_from``,
        ``supersedes``: ids of the agent's memories it replaces; the result's
        ``superseded`` lists those it did). ``actor``: who makes the change, as the
        memory's versions record it (the gateway names its caller's key); none by default."""
        item = check.store_item({"content": content, **fields}, self.settings.max_content_bytes)
        kwargs = {"agent_id": check.agent_id(agent_id), **_item_json(item), **_actor(actor)}
        return self._send("memoryd.store", kwargs, _store_result, wait=wait, timeout=timeout)

    def store_many(self, agent_id: str, items: Iterable[StoreItem | Mapping[str, Any]], *,
                   wait: bool = True, timeout: float | None = None, actor: str | None = None
                   ) -> builtins.list[StoreResult] | Pending[list[StoreResult]]:
        checked = check.store_items(items, self.settings.max_content_bytes)
        kwargs = {"agent_id": check.agent_id(agent_id),
                  "items": [_item_json(item) for item in checked], **_actor(actor)}
        return self._send("memoryd.store_many", kwargs, _store_results, wait=wait,
                          timeout=timeout)

    def recall(self, agent_id: str, query: str, *, limit: int = 10,
               category: str | None = None, tags: Iterable[str] | None = None,
               session_id: str | None = None, include_archived: bool = False,
               mode: str = "fast", since: datetime | str | None = None,
               until: datetime | str | None = None, metadata: Mapping[str, Any] | None = None,
               include_superseded: bool = False, as_of: datetime | str | None = None,
               timeout: float | None = None) -> builtins.list[Recalled]:
        """The memories most relevant to ``query``: current ones only, unless
        ``include_superseded`` (replaced ones too, each saying ``current`` and
        ``superseded_by``) or ``as_of`` (what was true then)."""
        kwargs = {"agent_id": check.agent_id(agent_id), "query": check.query(query),
                  "limit": check.limit(limit), "category": check.category(category),
                  "tags": list(check.tags(tags)),
                  "session_id": check.short_text("session_id", session_id),
                  "include_archived": check.boolean("include_archived", include_archived),
                  "mode": check.mode(mode), **_filters(since, until, metadata),
                  **_validity(include_superseded, as_of)}
        return self._call("memoryd.recall", kwargs, _list_of(Recalled), timeout)

    @overload
    def context(self, agent_id: str, query: str, *, limit: int = ...,
                as_of: datetime | str | None = ..., thread_id: str | None = ...,
                budget: int | None = ..., budget_unit: str = ...,
                structured: Literal[False] = ..., timeout: float | None = ...) -> str: ...

    @overload
    def context(self, agent_id: str, query: str, *, limit: int = ...,
                as_of: datetime | str | None = ..., thread_id: str | None = ...,
                budget: int | None = ..., budget_unit: str = ...,
                structured: Literal[True], timeout: float | None = ...) -> TurnContext: ...

    def context(self, agent_id: str, query: str, *, limit: int = 10,
                as_of: datetime | str | None = None, thread_id: str | None = None,
                budget: int | None = None, budget_unit: str = "chars",
                structured: bool = False, timeout: float | None = None) -> str | TurnContext:
        """The turn's context as a prompt-ready block: the thread's working memory (with
        ``thread_id``) and the long-term memories similar to ``query``, naming its
        entities and recent in the thread, within ``budget`` (``budget_unit`` chars or
        tokens); ``structured``: the ``TurnContext`` saying what the block holds."""
        kwargs = {"agent_id": check.agent_id(agent_id), "query": check.query(query),
                  "limit": check.limit(limit), **_validity(False, as_of)}
        # Only what is given: a worker of an older release knows none of these.
        extra = {"thread_id": None if thread_id is None else thread_ref(thread_id),
                 "budget": budget_of(budget),
                 "budget_unit": None if budget_unit == "chars" else unit_of(budget_unit),
                 "structured": check.boolean("structured", structured) or None}
        kwargs.update({name: value for name, value in extra.items() if value is not None})
        if structured:
            return self._call("memoryd.context", kwargs, TurnContext.model_validate, timeout)
        return self._call("memoryd.context", kwargs, str, timeout)

    def forget(self, agent_id: str, memory_id: UUID | str, *,
               timeout: float | None = None) -> bool:
        kwargs = _memory_ref(agent_id, memory_id)
        return self._call("memoryd.forget", kwargs, bool, timeout)

    def get(self, agent_id: str, memory_id: UUID | str, *,
            timeout: float | None = None) -> Memory:
        kwargs = _memory_ref(agent_id, memory_id)
        return self._call("memoryd.get", kwargs, Memory.model_validate, timeout)

    def list(self, agent_id: str, *, category: str | None = None, limit: int = 50,
             offset: int = 0, since: datetime | str | None = None,
             until: datetime | str | None = None, metadata: Mapping[str, Any] | None = None,
             order: str = "newest", include_superseded: bool = False,
             as_of: datetime | str | None = None, timeout: float | None = None) -> Page:
        """The agent's memories, newest first or (``order="key"``) by key; current ones
        only, unless ``include_superseded`` or ``as_of`` (as ``recall``)."""
        kwargs = {"agent_id": check.agent_id(agent_id), "category": check.category(category),
                  "limit": check.limit(limit), "offset": check.offset(offset),
                  **_filters(since, until, metadata), **_validity(include_superseded, as_of)}
        if check.list_order(order) != "newest":  # a worker of an older release knows no order
            kwargs["order"] = order
        return self._call("memoryd.list", kwargs, Page.model_validate, timeout)

    def metadata_values(self, agent_id: str, field: str, *,
                        metadata: Mapping[str, Any] | None = None, limit: int = 100,
                        offset: int = 0, timeout: float | None = None) -> builtins.list[Any]:
        """The distinct values of the metadata key ``field`` among the agent's memories
        (filtered by ``metadata`` like ``list``), in jsonb order."""
        kwargs = {"agent_id": check.agent_id(agent_id),
                  "field": check.required_text("field", field), "limit": check.limit(limit),
                  "offset": check.offset(offset), **_filters(None, None, metadata)}
        return self._call("memoryd.metadata_values", kwargs, builtins.list, timeout)

    def kg_add(self, agent_id: str, entity: Entity | Mapping[str, Any], *,
               timeout: float | None = None) -> bool:
        kwargs = {"agent_id": check.agent_id(agent_id), "entity": _entity_json(entity)}
        return self._call("memoryd.kg.add", kwargs, bool, timeout)

    def kg_query(self, agent_id: str, start_id: str, depth: int = 2, *,
                 as_of: datetime | str | None = None,
                 timeout: float | None = None) -> builtins.list[Entity]:
        """The entity and what it relates to over current edges (or those valid at
        ``as_of``), up to ``depth`` hops away."""
        kwargs = {"agent_id": check.agent_id(agent_id),
                  "start_id": check.entity_ref("start_id", start_id),
                  "depth": check.depth(depth), **_validity(False, as_of)}
        return self._call("memoryd.kg.query", kwargs, _list_of(Entity), timeout)

    # --- validity: what replaced what, and undoing it ---------------------------------
    def history(self, agent_id: str, memory_id: UUID | str, *,
                timeout: float | None = None) -> History:
        """The memory now, each earlier state of it (when, why, by whom) and the
        supersessions it took part in."""
        return self._call("memoryd.history", _memory_ref(agent_id, memory_id),
                          History.model_validate, timeout)

    def supersede(self, agent_id: str, memory_id: UUID | str,
                  supersedes: Iterable[UUID | str], *, actor: str | None = None,
                  timeout: float | None = None) -> builtins.list[UUID]:
        """Mark memories the agent holds as replaced by ``memory_id``, after the fact (as
        ``store(..., supersedes=...)`` does for a new memory); the ids superseded."""
        olds = check.memory_ids("supersedes", supersedes)
        if not olds:
            raise ValidationError("supersedes", "must name at least one memory")
        kwargs = {**_memory_ref(agent_id, memory_id), "supersedes": [str(i) for i in olds],
                  **_actor(actor)}
        return self._call("memoryd.supersede", kwargs, _list_of_uuids, timeout)

    def unsupersede(self, agent_id: str, memory_id: UUID | str, *, actor: str | None = None,
                    timeout: float | None = None) -> bool:
        """Undo a supersession: the memory is current again (False if it already was).
        Not ``restore``, which brings back what maintenance evicted."""
        kwargs = {**_memory_ref(agent_id, memory_id), **_actor(actor)}
        return self._call("memoryd.unsupersede", kwargs, bool, timeout)

    def sessions(self, agent_id: str, *,
                 timeout: float | None = None) -> builtins.list[SessionInfo]:
        return self._call("memoryd.sessions", {"agent_id": check.agent_id(agent_id)},
                          _list_of(SessionInfo), timeout)

    def session_messages(self, agent_id: str, session_id: str, *, limit: int | None = None,
                         timeout: float | None = None) -> builtins.list[Memory]:
        """A session's messages in order, oldest first: the newest ``limit`` (all when
        None)."""
        kwargs = {"agent_id": check.agent_id(agent_id),
                  "session_id": check.required_text("session_id", session_id),
                  "limit": check.message_limit(limit)}
        return self._call("memoryd.session_messages", kwargs, _list_of(Memory), timeout)

    def run_job(self, job: str, *, agent_id: str | None = None, dry_run: bool = False,
                params: Mapping[str, Any] | None = None, wait: bool = True,
                timeout: float | None = None) -> dict[str, Any] | Pending[dict[str, Any]]:
        """Enqueue maintenance job ``job`` now (queue ``maintenance``)."""
        name = check.job_name(job)
        kwargs = {"agent_id": check.agent_id(agent_id) if agent_id is not None else None,
                  "dry_run": bool(dry_run), "params": check.json_object("params", params or {})}
        return self._send(f"{MAINTENANCE_TASK_PREFIX}{name}", kwargs, _job_run, wait=wait,
                          timeout=timeout, queue=MAINTENANCE_QUEUE)

    # --- operators ----------------------------------------------------------------
    def job_runs(self, *, job: str | None = None, limit: int = 20,
                 timeout: float | None = None) -> builtins.list[JobRun]:
        """The newest maintenance runs (of ``job``), newest first."""
        kwargs = {"job": check.job_name(job) if job is not None else None,
                  "limit": check.limit(limit)}
        return self._call("memoryd.admin.job_runs", kwargs, _list_of(JobRun), timeout)

    def stats(self, *, limit: int = 50,
              timeout: float | None = None) -> builtins.list[AgentStats]:
        """Memories per category of the ``limit`` largest agents."""
        return self._call("memoryd.admin.stats", {"limit": check.limit(limit)},
                          _list_of(AgentStats), timeout)

    def embeddings(self, *, timeout: float | None = None) -> EmbeddingProgress:
        """Memories per embedding model, and the share on the configured model."""
        return self._call("memoryd.admin.embeddings", {}, EmbeddingProgress.model_validate,
                          timeout)

    def restore(self, eviction_or_memory_id: int | str | UUID, *,
                timeout: float | None = None) -> UUID:
        """Put an evicted memory back (by eviction number or memory id); its id."""
        target = check.restore_target(eviction_or_memory_id, "id")
        return self._call("memoryd.admin.restore", {"target": target}, UUID, timeout)

    def reviews(self, *, agent_id: str | None = None, status: str = "review",
                limit: int = 50, offset: int = 0,
                timeout: float | None = None) -> builtins.list[Supersession]:
        """The review queue: replacements the judges were unsure of, oldest first (of one
        agent, or all; ``status`` another list: applied, rejected, undone)."""
        kwargs = {"agent_id": None if agent_id is None else check.agent_id(agent_id),
                  "status": review_status(status), "limit": check.limit(limit),
                  "offset": check.offset(offset)}
        return self._call("memoryd.admin.reviews", kwargs, _list_of(Supersession), timeout)

    def accept_review(self, review_id: int, *, agent_id: str | None = None,
                      actor: str | None = None, timeout: float | None = None) -> Supersession:
        """Accept one queued replacement: the old memory is superseded."""
        return self._decide(review_id, True, agent_id, actor, timeout)

    def reject_review(self, review_id: int, *, agent_id: str | None = None,
                      actor: str | None = None, timeout: float | None = None) -> Supersession:
        """Reject one queued replacement: both memories stay current."""
        return self._decide(review_id, False, agent_id, actor, timeout)

    def _decide(self, review_id: int, accept: bool, agent_id: str | None,
                actor: str | None, timeout: float | None) -> Supersession:
        kwargs = {"review_id": check.limit(review_id, "review_id", high=check.MAX_BIGINT),
                  "accept": accept,
                  "agent_id": None if agent_id is None else check.agent_id(agent_id),
                  **_actor(actor)}
        return self._call("memoryd.admin.decide_review", kwargs,
                          Supersession.model_validate, timeout)

    def forget_agent(self, agent_id: str, *, wait: bool = True, timeout: float | None = None
                     ) -> Erasure | Pending[Erasure]:
        """Erase everything memoryd holds of the agent: memories, sessions, graph, links,
        evicted copies, dead letters, its keys (README "Erasure"). ``complete`` False:
        the time budget ran out and a follow-up goes on; calling again is safe."""
        agent = check.agent_id(agent_id)
        return self._send("memoryd.admin.forget_agent", {"agent_id": agent},
                          _erasure_of(agent), wait=wait, timeout=timeout)

    # --- following a job by its id -----------------------------------------------
    @overload
    def pending(self, task_id: str | UUID, kind: Literal["store"] = ..., *,
                timeout: float | None = None) -> Pending[StoreResult]: ...

    @overload
    def pending(self, task_id: str | UUID, kind: Literal["store_many"], *,
                timeout: float | None = None) -> Pending[builtins.list[StoreResult]]: ...

    @overload
    def pending(self, task_id: str | UUID, kind: Literal["run_job"], *,
                timeout: float | None = None) -> Pending[dict[str, Any]]: ...

    @overload
    def pending(self, task_id: str | UUID, kind: Literal["forget_agent"], *, agent_id: str,
                timeout: float | None = None) -> Pending[Erasure]: ...

    def pending(self, task_id: str | UUID, kind: str = "store", *,
                agent_id: str | None = None, timeout: float | None = None) -> Pending[Any]:
        """Follow a job sent earlier by its id: a ``MemorydTimeoutError``'s ``task_id``,
        a ``wait=False`` handle's ``id``, or the ``task_id`` of the gateway's 202. ``kind``
        names the call that sent it (``store``, ``store_many``, ``run_job``,
        ``forget_agent``, which also takes the ``agent_id`` it erased), so that ``get()``
        returns what that call returns. Nothing is sent: an id no job has, or whose result
        expired or was read already, stays pending and ``get()`` times out."""
        ref = str(check.uuid_of("task_id", task_id))
        return self._pending(self._app.AsyncResult(ref), _conversion(kind, agent_id),
                             timeout)

    # --- working memory: straight to Redis, no worker in the way -----------------------
    @property
    def working_store(self) -> WorkingStore:
        """Working memory's Redis (``MEMORYD_WORKING_REDIS_URL``, else the broker's)."""
        if self._working is None:
            conf = self._app.conf
            self._working = WorkingStore.from_settings(
                self.settings, broker_url=conf.broker_url, result_backend=conf.result_backend)
        return self._working

    def working(self, agent_id: str, thread: str, *, pending: bool = False) -> WorkingMemory:
        """The thread's working memory (version 0: it has none); reading it slides its
        deadline and counts as an access. ``pending``: with the messages trimmed from it
        that are on their way to long-term memory."""
        agent, name = check.agent_id(agent_id), thread_id(thread)
        with unreachable_as_unavailable():
            return self.working_store.get(agent, name,
                                          pending=check.boolean("pending", pending))

    def update_working(self, agent_id: str, thread: str,
                       update: WorkingUpdate | Mapping[str, Any] | None = None,
                       **fields: Any) -> WorkingMemory:
        """Apply one update atomically (``WorkingUpdate``'s fields, as a model, a mapping
        or keywords): messages appended, variables set or deleted, flags set or cleared,
        counters incremented, topic, entities and tools set. ``expected_version``
        makes it compare-and-set (``Conflict`` when the thread moved on). Messages the
        thread no longer keeps go to long-term memory at once."""
        agent, name = check.agent_id(agent_id), thread_id(thread)
        if update is not None and fields:
            raise ValidationError("update", "give the update or its fields as keywords, "
                                            "not both")
        given = fields if update is None else update
        with unreachable_as_unavailable():
            state, spilled = self.working_store.update(agent, name, given)
            if spilled:
                self._promote(state.agent_id, state.thread_id)
        return state

    def clear_working(self, agent_id: str, thread: str) -> WorkingMemory:
        """Empty the thread's working memory; its messages go to long-term memory."""
        agent, name = check.agent_id(agent_id), thread_id(thread)
        with unreachable_as_unavailable():
            state, moved = self.working_store.clear(agent, name)
            if moved:
                self._promote(agent, name)
        return state

    def pop_message(self, agent_id: str, thread: str) -> WorkingMessage | None:
        """Remove and return the thread's newest message, atomically (two callers never
        get the same one); None when it holds none."""
        agent, name = check.agent_id(agent_id), thread_id(thread)
        with unreachable_as_unavailable():
            return self.working_store.pop(agent, name)

    def end_thread(self, agent_id: str, thread: str, *,
                   timeout: float | None = None) -> Promotion:
        """End the thread: its messages become those of session ``thread`` in long-term
        memory, then its working memory is deleted. Should the wait time out, the
        promotion still happens (a worker's sweep takes it over)."""
        agent, name = check.agent_id(agent_id), thread_id(thread)
        with unreachable_as_unavailable():
            tag = self.working_store.retire(agent, name)
        if tag is None:
            return Promotion(agent_id=agent, thread_id=name, promoted=0, already=0,
                             ended=False)
        done = self._call(END_TASK, {"tag": tag}, _promotion, timeout)
        return done or Promotion(agent_id=agent, thread_id=name, promoted=0, already=0,
                                 ended=True)

    def threads(self, agent_id: str, *, limit: int = 100,
                offset: int = 0) -> builtins.list[ThreadInfo]:
        """The agent's live threads, soonest to expire first."""
        agent = check.agent_id(agent_id)
        with unreachable_as_unavailable():
            return self.working_store.threads(agent, limit=check.limit(limit),
                                              offset=check.offset(offset))

    def _promote(self, agent_id: str, thread: str) -> None:
        """Send the thread's trimmed messages on to long-term memory; nobody waits (the
        sweep resends it should this message be lost)."""
        kwargs = {"tag": thread_tag(agent_id, thread)}
        self._app.send_task(PROMOTE_TASK, kwargs=kwargs, queue=MEMORY_QUEUE,
                            argsrepr="()", kwargsrepr=summarize(kwargs))

    # --- asyncio ------------------------------------------------------------------
    async def astore(self, agent_id: str, content: str, **fields: Any) -> StoreResult:
        result = await asyncio.to_thread(self.store, agent_id, content, **fields)
        assert isinstance(result, StoreResult)
        return result

    async def arecall(self, agent_id: str, query: str, **options: Any) -> builtins.list[Recalled]:
        return await asyncio.to_thread(self.recall, agent_id, query, **options)

    async def acontext(self, agent_id: str, query: str, **options: Any) -> Any:
        """``context``'s twin: the block, or with ``structured=True`` the ``TurnContext``."""
        call: Callable[..., Any] = self.context
        return await asyncio.to_thread(call, agent_id, query, **options)

    async def aworking(self, agent_id: str, thread: str, *,
                       pending: bool = False) -> WorkingMemory:
        return await asyncio.to_thread(self.working, agent_id, thread, pending=pending)

    async def aupdate_working(self, agent_id: str, thread: str,
                              update: WorkingUpdate | Mapping[str, Any] | None = None,
                              **fields: Any) -> WorkingMemory:
        return await asyncio.to_thread(self.update_working, agent_id, thread, update, **fields)

    async def aclear_working(self, agent_id: str, thread: str) -> WorkingMemory:
        return await asyncio.to_thread(self.clear_working, agent_id, thread)

    async def apop_message(self, agent_id: str, thread: str) -> WorkingMessage | None:
        return await asyncio.to_thread(self.pop_message, agent_id, thread)

    async def aend_thread(self, agent_id: str, thread: str, *,
                          timeout: float | None = None) -> Promotion:
        return await asyncio.to_thread(self.end_thread, agent_id, thread, timeout=timeout)

    async def athreads(self, agent_id: str, **options: Any) -> builtins.list[ThreadInfo]:
        return await asyncio.to_thread(self.threads, agent_id, **options)


def _filters(since: object, until: object, metadata: object) -> dict[str, Any]:
    """The time and metadata filters as message values (only those given)."""
    start, end = check.time_range(since, until)
    wanted = check.metadata_filter(metadata)
    found: dict[str, Any] = {"since": start and start.isoformat(),
                             "until": end and end.isoformat(), "metadata": wanted or None}
    return {name: value for name, value in found.items() if value is not None}


def _validity(include_superseded: object, as_of: object) -> dict[str, Any]:
    """The validity options as message values (only those given)."""
    found: dict[str, Any] = {}
    if check.boolean("include_superseded", include_superseded):
        found["include_superseded"] = True
    moment = check.as_of(as_of)
    if moment is not None:
        found["as_of"] = moment.isoformat()
    return found


def _actor(actor: str | None) -> dict[str, Any]:
    """Who makes a change (``key:<id>`` from the gateway), only when there is one."""
    named = check.short_text("actor", actor)
    return {} if named is None else {"actor": named}


# The statuses of a replacement decision (``memory.supersession.REVIEW_STATUSES``),
# checked here before sending, like every other argument.
REVIEW_STATUSES = ("review", "applied", "rejected", "undone")


def review_status(value: object) -> str:
    if value not in REVIEW_STATUSES:
        raise ValidationError("status", f"must be one of {', '.join(REVIEW_STATUSES)}")
    return str(value)


def _item_json(item: StoreItem) -> dict[str, Any]:
    data = item.model_dump(mode="json", exclude_none=True)
    data["tags"] = list(item.tags)
    if not item.supersedes:  # what a worker of an older release would not know
        del data["supersedes"]
    return data


def _list_of_uuids(values: Any) -> builtins.list[UUID]:
    return [UUID(str(value)) for value in values]


def _memory_ref(agent_id: str, memory_id: UUID | str) -> dict[str, Any]:
    return {"agent_id": check.agent_id(agent_id), "memory_id": str(check.memory_id(memory_id))}


def _entity_json(entity: Entity | Mapping[str, Any]) -> dict[str, Any]:
    return check.entity(entity).model_dump(mode="json")


def _list_of(model: Any) -> Callable[[Any], Any]:
    return lambda values: [model.model_validate(v) for v in values]


# The results of the calls a caller may follow by id (``MemoryClient.pending``): each
# built here only, for the call and its follower alike.
def _store_result(value: Any) -> StoreResult:
    return StoreResult.model_validate(value)


def _store_results(values: Any) -> builtins.list[StoreResult]:
    return [StoreResult.model_validate(value) for value in values]


def _promotion(value: Any) -> Promotion | None:
    return None if value is None else Promotion.model_validate(value)


def _job_run(value: Any) -> dict[str, Any]:
    return dict(value)


def _erasure_of(agent_id: str) -> Callable[[Any], Erasure]:
    # The worker's result names the agent by its hash (Redis keeps it): the id back.
    return lambda found: Erasure.model_validate({**found, "agent_id": agent_id})


FOLLOWED_KINDS = ("store", "store_many", "run_job", "forget_agent")


def _conversion(kind: str, agent_id: str | None) -> Callable[[Any], Any]:
    """How ``MemoryClient.pending`` rebuilds the result of a ``kind`` call."""
    if kind == "forget_agent":
        return _erasure_of(check.agent_id(agent_id))
    known: dict[str, Callable[[Any], Any]] = {
        "store": _store_result, "store_many": _store_results, "run_job": _job_run}
    if kind not in known:
        raise ValidationError("kind", f"must be one of {', '.join(FOLLOWED_KINDS)}")
    return known[kind]
