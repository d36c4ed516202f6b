"""memoryd's exception types: one base class, a few precise subclasses.

Everything memoryd raises on purpose is a ``MemorydError``. The client maps
worker-side failures back onto these types by name (see ``error_from_payload``),
so an agent never has to catch Celery internals.
"""

from __future__ import annotations

from typing import Any


class MemorydError(Exception):
    """Base class of every error memoryd raises on purpose."""

    def to_payload(self) -> dict[str, Any]:
        """A JSON-safe description, for crossing the broker."""
        return {"type": type(self).__name__, "message": str(self)}


class ValidationError(MemorydError, ValueError):
    """Input was rejected at the boundary; nothing was written."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")

    def to_payload(self) -> dict[str, Any]:
        return {**super().to_payload(), "field": self.field}


class NotFound(MemorydError, LookupError):
    """The memory, session or entity does not exist for this agent."""


class ConfigError(MemorydError):
    """The configuration is invalid; raised at start-up, not at 03:00."""


class MemorydTimeoutError(MemorydError, TimeoutError):
    """A job did not finish within the caller's timeout."""


class EmbeddedServiceError(MemorydError):
    """The embedded PostgreSQL or Redis could not be started or reached."""


class LLMError(MemorydError):
    """The LLM call failed for good (bad request, auth); not retried."""


class LLMUnavailable(LLMError):
    """The LLM is rate-limited or overloaded: transient, retry later."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class WorkerError(MemorydError):
    """A worker failed with an error that is not one of memoryd's own types."""


_BY_NAME: dict[str, type[MemorydError]] = {
    cls.__name__: cls
    for cls in (NotFound, ConfigError, MemorydTimeoutError, EmbeddedServiceError,
                LLMError, LLMUnavailable, WorkerError, MemorydError)
}


def error_from_payload(payload: dict[str, Any]) -> MemorydError:
    """Rebuild a memoryd exception from ``MemorydError.to_payload`` output."""
    kind = str(payload.get("type", "WorkerError"))
    message = str(payload.get("message", "worker error"))
    if kind == "ValidationError":
        field = str(payload.get("field", "input"))
        prefix = f"{field}: "
        return ValidationError(field, message.removeprefix(prefix))
    cls = _BY_NAME.get(kind, WorkerError)
    return cls(message)
