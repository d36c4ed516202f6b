"""Stores the gateway accepted without seeing them finish: answered 202 with the task id,
and followed with ``GET /v1/agents/{agent}/tasks/{task_id}``.

A store still queued when the gateway stops waiting is not lost: the broker holds its
message and a worker writes it (redelivered if a worker dies, which can take longer than
the wait), so a 504 would tell the caller "failed" for a write that lands. Each accepted
task id is bound to its agent in the result backend, next to the result (so every gateway
replica can answer a follow): only a key covering that agent learns the outcome, and a
task id of another agent, or one the gateway never accepted, is 404 alike. The binding
holds a digest of the agent id, not the id."""

from __future__ import annotations

import hashlib
from typing import Any, Literal, TypeVar

from celery import Celery
from pydantic import BaseModel

from memoryd import validation as check
from memoryd.celery_config import celery_config
from memoryd.client import Pending, unreachable_as_unavailable
from memoryd.config import Settings
from memoryd.errors import MemorydError, MemorydTimeoutError, NotFound, WorkerError
from memoryd.redaction import describe_error
from memoryd.types import StoreResult

T = TypeVar("T")
BINDING_KEY = "memoryd-accepted-{task_id}"
# How long after its result expires a task id can still be followed: a backlog may hold
# the message a while before a worker writes it (and the result's own expiry starts).
FOLLOW_WINDOW_S = 24 * 3600


class TaskAccepted(BaseModel):
    """A store the broker holds and a worker will write: follow ``task_id``."""

    task_id: str
    status: Literal["pending"] = "pending"


class AcceptedTasks:
    """Binds accepted task ids to their agents and reads their outcomes, on a Celery app
    of its own (the client's is private to it) with the client's settings."""

    def __init__(self, settings: Settings) -> None:
        self._app = Celery("memoryd-gateway-accepted", set_as_current=False)
        self._app.conf.update(celery_config(settings, caller=True))
        self._ttl_s = settings.result_expires_s + FOLLOW_WINDOW_S

    def close(self) -> None:
        self._app.close()

    def wait_or_accept(self, pending: Pending[T], agent_id: str) -> T | TaskAccepted:
        """``pending``'s result within the client's wait; past it, the task bound to
        ``agent_id`` and a ``TaskAccepted`` to answer 202 with."""
        try:
            return pending.get()
        except MemorydTimeoutError:
            with unreachable_as_unavailable():
                self._app.backend.client.set(_binding(pending.id), _digest(agent_id),
                                             ex=self._ttl_s)
            return TaskAccepted(task_id=pending.id)

    def outcome(self, agent_id: str, task_id: str
                ) -> StoreResult | list[StoreResult] | TaskAccepted:
        """The accepted store's result as the store would have answered it (its error
        raised), or a ``TaskAccepted`` while it is pending. ``NotFound`` unless the task
        was accepted for ``agent_id``."""
        ref = str(check.uuid_of("task_id", task_id))
        with unreachable_as_unavailable():
            bound = self._app.backend.client.get(_binding(ref))
            if bound is None or _text(bound) != _digest(agent_id):
                raise NotFound("no such task for this agent (or its outcome has expired)")
            result = self._app.AsyncResult(ref)
            if not result.ready():
                return TaskAccepted(task_id=ref)
            value = result.result
        if not result.successful():
            raise _refusal(value)
        if isinstance(value, list):
            return [StoreResult.model_validate(item) for item in value]
        return StoreResult.model_validate(value)


def _binding(task_id: str) -> str:
    return BINDING_KEY.format(task_id=task_id)


def _digest(agent_id: str) -> str:
    return hashlib.sha256(agent_id.encode()).hexdigest()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _refusal(exc: object) -> MemorydError:
    """The task's failure as the client would raise it: memoryd's own error, or a
    ``WorkerError`` that never quotes another library's text."""
    if isinstance(exc, MemorydError):
        return exc
    return WorkerError(describe_error(exc if isinstance(exc, BaseException)
                                      else RuntimeError("the task failed")))
