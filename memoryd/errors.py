"""memoryd's exception types: one base class, a few precise subclasses.

Everything memoryd raises on purpose is a ``MemorydError``. Each keeps its
constructor arguments in ``args`` so Celery's JSON result backend can rebuild
it on the client side (``cls(*args)``): an agent catches memoryd's types,
never Celery internals.
"""

from __future__ import annotations


class MemorydError(Exception):
    """Base class of every error memoryd raises on purpose."""


class ValidationError(MemorydError, ValueError):
    """Input was rejected at the boundary; nothing was written."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(field, message)
        self.field = field
        self.message = message

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class NotFound(MemorydError, LookupError):
    """The memory, session or entity does not exist for this agent."""


class ConfigError(MemorydError):
    """The configuration is invalid; raised at start-up, not at 03:00."""


class NoBrokerConfigured(ConfigError):
    """No broker is configured and no ``memoryd up`` runs on the data directory: memoryd
    does not guess one (whatever listens on Redis's default port may be someone else's)."""


class DataDirInUse(MemorydError):
    """Another ``memoryd up`` or ``memoryd run`` holds the data directory."""


class MemorydTimeoutError(MemorydError, TimeoutError):
    """A job did not finish within the caller's timeout. The job goes on (a store still
    lands): ``task_id`` names it, and ``MemoryClient.pending(task_id)`` follows it."""

    def __init__(self, message: str, task_id: str | None = None) -> None:
        super().__init__(message)
        # Set here, not through OSError's constructor, which reads two arguments as
        # (errno, strerror).
        self.args = (message, task_id)
        self.message = message
        self.task_id = task_id

    def __str__(self) -> str:
        return self.message


class EmbeddedServiceError(MemorydError):
    """The embedded PostgreSQL or Redis could not be started or reached."""


class LLMError(MemorydError):
    """The LLM call failed for good (bad request, auth); not retried."""


class LLMUnavailable(LLMError):
    """The LLM is rate-limited or overloaded: transient, retry later."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message, retry_after)
        self.message = message
        self.retry_after = retry_after

    def __str__(self) -> str:
        return self.message


class WorkerError(MemorydError):
    """A worker failed with an error that is not one of memoryd's own types."""


class ContentTooLarge(ValidationError):
    """A memory's content (or a request body) is over the configured size limit."""


class UnsupportedMediaType(ValidationError):
    """A request body that does not say it is JSON (its ``content-type``)."""


class Conflict(MemorydError):
    """The update expected another version of what it changes (compare-and-set): read
    it again and retry, or give up."""


class Unauthorized(MemorydError):
    """No API key, or one that is unknown, revoked or expired."""


class Forbidden(MemorydError):
    """The API key is valid but its scope or permissions do not cover the request."""


class DeadLettered(MemorydError):
    """The task's message was delivered too many times without finishing (it kept
    killing its worker process) and was set aside: ``memoryd dlq``."""


class Unavailable(MemorydError):
    """The broker or the database cannot be reached right now: transient, retry later."""
