"""Errors as HTTP responses: ``{"error": {"type", "message", "field"?}}`` with the status
that tells a caller what to do, and never a stack trace."""

from __future__ import annotations

import uuid
from typing import Any

import structlog
from sqlalchemy.exc import InterfaceError as DatabaseInterfaceError
from sqlalchemy.exc import OperationalError as DatabaseOperationalError
from starlette.responses import JSONResponse

from memoryd.client import CONNECTION_ERRORS
from memoryd.errors import (
    Conflict,
    ContentTooLarge,
    Forbidden,
    MemorydError,
    MemorydTimeoutError,
    NotFound,
    Unauthorized,
    Unavailable,
    UnsupportedMediaType,
    ValidationError,
)
from memoryd.redaction import describe_error

log = structlog.get_logger(__name__)

# The broker or the database could not be reached: the caller should retry later.
UNREACHABLE: tuple[type[Exception], ...] = (
    *CONNECTION_ERRORS, DatabaseOperationalError, DatabaseInterfaceError, Unavailable)

# Most specific first: ContentTooLarge and UnsupportedMediaType are ValidationErrors.
_STATUS: tuple[tuple[type[MemorydError], int, str], ...] = (
    (Unauthorized, 401, "unauthorized"),
    (Forbidden, 403, "forbidden"),
    (NotFound, 404, "not_found"),
    (Conflict, 409, "conflict"),
    (ContentTooLarge, 413, "too_large"),
    (UnsupportedMediaType, 415, "unsupported_media_type"),
    (ValidationError, 422, "validation_error"),
    (MemorydTimeoutError, 504, "timeout"),
    (Unavailable, 503, "unavailable"),
)


def body(kind: str, message: str, field: str | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"type": kind, "message": _encodable(message)}
    if field is not None:
        error["field"] = _encodable(field)
    return {"error": error}


def _encodable(text: str) -> str:
    """``text`` with any lone surrogate as '?': a response must encode as UTF-8, or the
    refusal itself would fail as a 500 (memoryd's messages quote no value, and no field
    name that holds one, so this is the guard and not the rule)."""
    return text.encode("utf-8", "replace").decode("utf-8")


def response(status: int, kind: str, message: str, field: str | None = None,
             headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(body(kind, message, field), status_code=status, headers=headers)


def classify(exc: BaseException) -> tuple[int, str, str, str | None]:
    """(status, type, message, field) of an exception raised while serving a request."""
    if isinstance(exc, UNREACHABLE) and not isinstance(exc, Unavailable):
        return 503, "unavailable", "the broker or the database is unreachable; retry later", None
    for cls, status, kind in _STATUS:
        if isinstance(exc, cls):
            if isinstance(exc, ValidationError):
                return status, kind, exc.message, exc.field
            return status, kind, str(exc), None
    return 500, "internal", "internal error", None


def said(exc: BaseException) -> str:
    """What an MCP tool error says: the type, the field and memoryd's message, never
    another library's text (a worker's database error can quote stored values)."""
    status, kind, message, field = classify(exc)
    if status == 500:
        log.error("gateway.unhandled", error_type=type(exc).__name__, exc_info=exc)
    return _encodable(f"{kind}: {field}: {message}" if field else f"{kind}: {message}")


# JSON-RPC's "invalid request": the error code of an MCP request refused before parsing.
JSONRPC_INVALID_REQUEST = -32600


def jsonrpc_error(exc: BaseException) -> JSONResponse:
    """A refusal as MCP clients read one: a JSON-RPC error object, with memoryd's type
    and field in ``data``."""
    status, kind, message, field = classify(exc)
    data = {"type": kind, **({"field": _encodable(field)} if field else {})}
    return JSONResponse({"jsonrpc": "2.0", "id": None, "error": {
        "code": JSONRPC_INVALID_REQUEST, "message": _encodable(message), "data": data}},
        status_code=status)


def from_exception(exc: BaseException) -> JSONResponse:
    status, kind, message, field = classify(exc)
    if status == 500:
        # The body names the log line, never the cause: its text may quote a row.
        # The access line's id (bound by ``AccessLog``), so the two lines are found together.
        bound = structlog.contextvars.get_contextvars().get("request_id")
        request_id = bound if isinstance(bound, str) else uuid.uuid4().hex
        message = f"internal error; the gateway's log has the details (request id {request_id})"
        log.error("gateway.unhandled", request_id=request_id, error=describe_error(exc),
                  exc_info=exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return response(status, kind, message, field, headers)
