"""What every memoryd task shares: the process's store, the retry policy for
transient errors, and conversion of results to plain JSON."""

from __future__ import annotations

import inspect
import re
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

import structlog
from celery import Task
from celery.exceptions import Retry, TaskPredicate
from kombu.exceptions import OperationalError as BrokerOperationalError
from pydantic import BaseModel
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import DBAPIError

from memoryd.celery_config import MAINTENANCE_TASK_PREFIX
from memoryd.db import faults
from memoryd.errors import MemorydError, NotFound, ValidationError
from memoryd.process import Slot
from memoryd.redaction import redacted, summarize
from memoryd.worker import app

if TYPE_CHECKING:
    from memoryd.memory.store import MemoryStore

log = structlog.get_logger(__name__)

# Retried when transient: the broker or the database was briefly unreachable or busy.
# A database error is judged by its SQLSTATE (``memoryd.db.faults``): one that no retry
# can fix (an index row too large, a value out of range) fails at once, by name.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    DBAPIError, BrokerOperationalError, ConnectionError, RedisConnectionError,
    RedisTimeoutError,
)

_STORE: Slot[MemoryStore] = Slot("store")


def get_store() -> MemoryStore:
    """The process's store, on the process engine (built on first use, kept in
    ``memoryd.process``)."""
    return _STORE.get(_new_store)


def _new_store() -> MemoryStore:
    from memoryd.db.engine import get_engine
    from memoryd.memory.store import MemoryStore

    store = MemoryStore(engine=get_engine())
    store.index_watch.request = request_index_build
    return store


def request_index_build(agent_id: str) -> None:
    """Run ``index_agents`` now: ``agent_id`` recalled past the index line without an
    index of its own (``memoryd.memory.agent_indexes``). Never fails the recall. Sent by
    name (the maintenance tasks are built from the schedule table, above this module)."""
    try:
        app.send_task(f"{MAINTENANCE_TASK_PREFIX}index_agents", kwargs={},
                      argsrepr=summarize(()), kwargsrepr=summarize({}))
    except Exception as exc:  # the broker is down: the hourly run will build it
        log.warning("index_agents.request_failed", agent_id=agent_id,
                    error=type(exc).__name__)
        return
    log.info("index_agents.requested", agent_id=agent_id)


class MemorydTask(Task):  # type: ignore[misc]
    """Acked late, retried with capped exponential backoff and jitter on transient errors."""

    abstract = True
    # Caller errors: reported to the client, logged without a traceback.
    throws = (ValidationError, NotFound)
    acks_late = True
    reject_on_worker_lost = True
    autoretry_for = TRANSIENT_ERRORS
    retry_backoff = 1
    retry_backoff_max = 60
    retry_jitter = True
    max_retries = 8

    def retry(self, *args: Any, exc: BaseException | None = None, **options: Any) -> Any:
        """Celery's retry, except for a database error that retrying cannot fix: that
        one is refused at once, as the caller's error where it names a field."""
        if isinstance(exc, DBAPIError) and not faults.transient(exc):
            raise faults.refusal(exc) from None
        return super().retry(*args, exc=exc, **options)

    @cached_property
    def _signature(self) -> inspect.Signature:
        return inspect.signature(self.run)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Check the message's shape first: a missing or unknown argument of a
        hand-crafted message is a ``ValidationError`` naming it, not a ``TypeError``."""
        try:
            self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            named = re.search(r"'([^']+)'", str(exc))
            raise ValidationError(named.group(1) if named else "message",
                                  str(exc)) from None
        try:
            return super().__call__(*args, **kwargs)
        except Exception as exc:
            raise leaving(exc) from None

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        """Messages the worker sends itself (retries above all) carry summaries of their
        arguments, like the client's: Celery's default repr would show contents in Flower."""
        options.setdefault("argsrepr", summarize(args or ()))
        options.setdefault("kwargsrepr", summarize(kwargs or {}))
        return super().apply_async(args, kwargs, **options)

    def Strategy(self, task: Any, app: Any, consumer: Any, **kwargs: Any) -> Any:
        """Celery's message handler, behind the delivery guard: poison messages become
        dead letters instead of killing worker processes forever."""
        from memoryd.worker.strategies import guarded

        return guarded(task, app, consumer, **kwargs)


def leaving(exc: Exception) -> BaseException:
    """What a task lets out for ``exc``, which the result backend stores for the caller
    and task events, logs and Flower show: memoryd's own errors and Celery's signals as
    they are; a retry with its cause redacted; anything else redacted."""
    if isinstance(exc, Retry):
        cause = None if exc.exc is None else redacted(exc.exc)
        return cast(BaseException, Retry(exc.message, exc=cause, when=exc.when,
                                         is_eager=exc.is_eager, sig=exc.sig))
    if isinstance(exc, MemorydError | TaskPredicate):  # Ignore, Reject: Celery's signals
        return exc
    return redacted(exc)


def dump(value: Any) -> Any:
    """Plain JSON values from pydantic results (and lists of them)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [dump(item) for item in value]
    return value
