"""Which HTTP status and error type each failure becomes, and what the body says."""

from __future__ import annotations

import json
import re
import sys

import pytest
from kombu.exceptions import OperationalError as BrokerOperationalError
from sqlalchemy.exc import OperationalError as DatabaseOperationalError

from memoryd import logging as mlog
from memoryd.errors import (
    Conflict,
    ContentTooLarge,
    Forbidden,
    MemorydTimeoutError,
    NotFound,
    Unauthorized,
    Unavailable,
    ValidationError,
    WorkerError,
)
from memoryd.gateway.problems import body, classify, from_exception, said
from tests.support.canary import database_error


@pytest.mark.parametrize(("error", "status", "kind", "field"), [
    (Unauthorized("no key"), 401, "unauthorized", None),
    (Forbidden("not yours"), 403, "forbidden", None),
    (NotFound("gone"), 404, "not_found", None),
    (Conflict("the thread is at version 3, not the expected 2"), 409, "conflict", None),
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


def test_a_500_body_gives_a_request_id_that_the_log_line_carries_and_no_cause(
        capsys: pytest.CaptureFixture[str]) -> None:
    canary = "canary-body-91d2"
    mlog.configure(json=True, force=True, stream=sys.stderr)
    try:
        answer = from_exception(database_error(canary))
    finally:
        mlog.configure(json=False, force=True)
    error = json.loads(answer.body)["error"]
    assert answer.status_code == 500 and error["type"] == "internal"
    request_id = re.fullmatch(r"internal error; the gateway's log has the details "
                              r"\(request id ([0-9a-f]{32})\)", error["message"])
    assert request_id is not None
    logged = capsys.readouterr().err
    assert canary not in logged and canary not in answer.body.decode()
    (line,) = [json.loads(text) for text in logged.splitlines() if "gateway.unhandled" in text]
    assert line["request_id"] == request_id.group(1)
    assert line["error"] == "IntegrityError: CheckViolation (SQLSTATE 23514)"


@pytest.mark.parametrize("error", [ValidationError("\ud800", "is not a known field"),
                                   ValidationError("query", "holds \udcff"),
                                   NotFound("no \ud800 here")])
def test_a_refusal_holding_a_lone_surrogate_is_still_its_4xx(error: Exception) -> None:
    # A field name or message that cannot be encoded made the refusal itself a 500.
    answer = from_exception(error)
    assert 400 <= answer.status_code < 500
    assert "?" in json.dumps(json.loads(answer.body)["error"])
    assert said(error).encode("utf-8")
