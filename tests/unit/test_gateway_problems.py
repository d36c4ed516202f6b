"""Which HTTP status and error type each failure becomes, and what the body says."""

from __future__ import annotations

import pytest
from kombu.exceptions import OperationalError as BrokerOperationalError
from sqlalchemy.exc import OperationalError as DatabaseOperationalError

from memoryd.errors import (
    ContentTooLarge,
    Forbidden,
    MemorydTimeoutError,
    NotFound,
    Unauthorized,
    Unavailable,
    ValidationError,
    WorkerError,
)
from memoryd.gateway.problems import body, classify


@pytest.mark.parametrize(("error", "status", "kind", "field"), [
    (Unauthorized("no key"), 401, "unauthorized", None),
    (Forbidden("not yours"), 403, "forbidden", None),
    (NotFound("gone"), 404, "not_found", None),
    (ContentTooLarge("content", "is 9 bytes, at most 8"), 413, "too_large", "content"),
    (ValidationError("limit", "must be positive"), 422, "validation_error", "limit"),
    (MemorydTimeoutError("slow"), 504, "timeout", None),
    (Unavailable("down"), 503, "unavailable", None),
    (BrokerOperationalError("refused"), 503, "unavailable", None),
    (DatabaseOperationalError("SELECT 1", {}, Exception("refused")), 503, "unavailable", None),
    (WorkerError("boom"), 500, "internal", None),
    (KeyError("x"), 500, "internal", None),
])
def test_each_failure_maps_to_its_status_type_and_field(
        error: Exception, status: int, kind: str, field: str | None) -> None:
    found = classify(error)
    assert found[:2] == (status, kind)
    assert found[3] == field


def test_a_validation_message_is_memoryds_own_without_the_field_prefix() -> None:
    _, _, message, field = classify(ValidationError("tags", "must be a list of strings"))
    assert (message, field) == ("must be a list of strings", "tags")


def test_internal_errors_say_nothing_of_their_cause() -> None:
    _, _, message, _ = classify(RuntimeError("password=hunter2 in /secret/path"))
    assert "hunter2" not in message and "secret" not in message


def test_the_error_body_names_the_field_only_when_there_is_one() -> None:
    assert body("not_found", "gone") == {"error": {"type": "not_found", "message": "gone"}}
    assert body("validation_error", "bad", "limit")["error"]["field"] == "limit"
