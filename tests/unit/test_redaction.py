"""What leaves a process besides the answer: summaries of values and errors that hold no
memory content, however the content got into them."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from celery.exceptions import Retry
from sqlalchemy.exc import IntegrityError, OperationalError

from memoryd.errors import NotFound, ValidationError, WorkerError
from memoryd.redaction import describe_error, format_error, redacted, scrub, summarize
from memoryd.tasks.base import leaving
from tests.support.canary import database_error

CANARY = "canary-7f3a9c-the-users-diary"


def _database_error() -> IntegrityError:
    return database_error(CANARY)


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_a_database_error_is_described_by_its_condition_without_the_row() -> None:
    exc = _database_error()
    assert CANARY in str(exc)  # the control: SQLAlchemy's own text quotes it twice
    described = describe_error(exc)
    assert CANARY not in described
    assert described == "IntegrityError: CheckViolation (SQLSTATE 23514)"


def test_the_drivers_error_alone_is_described_the_same_way() -> None:
    driver = psycopg.errors.UniqueViolation(
        f"duplicate key value\nDETAIL:  Key (agent_id, key)=(a, {CANARY}) already exists.")
    assert describe_error(driver) == "UniqueViolation (SQLSTATE 23505)"


def test_a_connection_failure_keeps_its_first_line() -> None:
    exc = OperationalError("SELECT 1", {}, psycopg.OperationalError(
        "connection failed: Connection refused\n\tIs the server running?"))
    assert describe_error(exc) == "OperationalError: connection failed: Connection refused"


def test_other_errors_keep_their_first_line_with_quoted_values_masked() -> None:
    described = describe_error(ValueError(f"invalid literal for int(): '{CANARY}'\nmore"))
    assert described == "ValueError: invalid literal for int(): '…'"


def test_memoryds_own_errors_are_shown_as_they_are() -> None:
    assert describe_error(ValidationError("limit", "must be positive")) == (
        "ValidationError: limit: must be positive")
    assert describe_error(NotFound("memory 1 not found")) == "NotFound: memory 1 not found"


def test_a_traceback_keeps_its_frames_and_chain_but_no_value() -> None:
    def write() -> None:
        raise _database_error()

    def store() -> None:
        try:
            write()
        except IntegrityError as exc:
            raise RuntimeError(f"store failed for {CANARY!r}") from exc

    with pytest.raises(RuntimeError) as caught:
        store()
    text = format_error(caught.value)
    assert CANARY not in text
    assert "in write" in text and "in store" in text
    assert "The above exception was the direct cause" in text
    assert text.endswith("RuntimeError: store failed for '…'")
    assert "sqlalchemy.exc.IntegrityError: CheckViolation (SQLSTATE 23514)" in text


def test_free_text_loses_parameters_details_and_url_passwords() -> None:
    text = str(_database_error())
    assert CANARY not in scrub(text)
    assert scrub(text).startswith("(psycopg.errors.CheckViolation) new row for relation")
    assert scrub("redis://user:hunter2@host:6379/0") == "redis://user:***@host:6379/0"


def test_an_error_memoryd_did_not_write_leaves_as_a_worker_error_with_its_frames() -> None:
    exc = _raised(_database_error())
    out = redacted(exc)
    assert isinstance(out, WorkerError)
    assert str(out) == "IntegrityError: CheckViolation (SQLSTATE 23514)"
    assert out.__traceback__ is exc.__traceback__
    mine = ValidationError("content", "is empty")
    assert redacted(mine) is mine


def test_a_retrys_cause_is_redacted_and_its_schedule_kept() -> None:
    retry = Retry(exc=_database_error(), when=4)
    assert CANARY in str(retry)  # the control: Celery's text shows the cause's repr
    out = leaving(retry)
    assert isinstance(out, Retry) and out.when == 4
    assert isinstance(out.exc, WorkerError)
    assert CANARY not in str(out) and CANARY not in repr(out.exc)


AGENT_1_SHA256 = "6ff3b3bd11c44cac620c43d5b65377bd2ba7e8951c1e835ae40c96733730982b"
MEMORY_ID = "5d4b2f0e-8f7a-4a4b-9d63-0b6f3c2a1e11"


def test_results_and_arguments_are_summarised_by_identifiers_and_sizes() -> None:
    memory = {"id": MEMORY_ID, "agent_id": "agent-1", "content": CANARY, "category": "fact",
              "tags": ["a", "b"], "metadata": {"k": CANARY}, "importance": 0.5,
              "duplicate": False, "key": CANARY}
    assert summarize(memory) == (
        f"{{'id': '{MEMORY_ID}', 'agent_sha256': '{AGENT_1_SHA256}', 'content': <29 chars>, "
        "'category': 'fact', 'tags': <2 items>, 'metadata': <1 keys>, 'importance': 0.5, "
        "'duplicate': False, 'key': <29 chars>}")
    assert summarize([memory, memory, memory]) == "<3 items>"
    assert summarize(CANARY) == "<29 chars>"
    assert summarize(True) == "True" and summarize(None) == "None"


def test_the_worker_reports_task_results_by_their_summary(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    from celery.app import trace

    from memoryd.worker import signals

    monkeypatch.setattr(trace, "saferepr", trace.saferepr)  # put back afterwards
    signals._summarize_results()
    assert trace.saferepr([{"content": CANARY}], 1024) == "<1 items>"


def test_messages_a_worker_sends_itself_carry_summaries_of_their_arguments() -> None:
    """A retry is a new message sent by the worker: Celery would describe its arguments
    with their repr (task-sent and task-received events, Flower) unless told otherwise."""
    from celery import Celery, signals

    from memoryd.tasks.base import MemorydTask

    app = Celery("redaction-test", broker="memory://", set_as_current=False)

    @app.task(name="test.echo", base=MemorydTask)
    def echo(agent_id: str, content: str) -> str:
        return content

    headers: dict[str, Any] = {}

    def capture(headers: dict[str, Any] | None = None, **_: Any) -> None:
        sent.update(headers or {})

    sent = headers
    signals.before_task_publish.connect(capture)
    try:
        echo.apply_async(kwargs={"agent_id": "agent-1", "content": CANARY})
    finally:
        signals.before_task_publish.disconnect(capture)
        app.close()
    assert headers["kwargsrepr"] == (f"{{'agent_sha256': '{AGENT_1_SHA256}', "
                                     "'content': <29 chars>}")
    assert headers["argsrepr"] == "<0 items>"


def test_a_summary_names_an_agent_by_the_hash_the_erasure_audit_keeps() -> None:
    """An erased agent's id stays in no task event (Flower) and no stored summary: they
    hold its SHA-256, which an operator reproduces from the id they were asked about."""
    from memoryd.memory.erasure import agent_digest

    assert agent_digest("agent-1") == AGENT_1_SHA256
    shown = summarize({"agent_id": "agent-1", "start_id": "alices-diary", "limit": 5})
    assert "agent-1" not in shown and "alices-diary" not in shown
    assert shown == f"{{'agent_sha256': '{AGENT_1_SHA256}', 'start_id': <12 chars>, 'limit': 5}}"


def test_the_worker_summarises_arguments_a_sender_left_whole_before_the_received_event(
        ) -> None:
    """A message of a sender that did not summarise (``celery call``, an older client)
    reaches the task-received event, and Flower, as the worker's summary."""
    import json
    import uuid

    from celery import Celery
    from celery.worker.request import Request
    from kombu import Message

    from memoryd.worker import signals

    app = Celery("redaction-received", broker="memory://", set_as_current=False)

    @app.task(name="test.received")
    def received(agent_id: str, content: str) -> None:
        return None

    sent = app.amqp.as_task_v2(str(uuid.uuid4()), "test.received",
                               kwargs={"agent_id": "agent-1", "content": CANARY})
    message = Message(body=json.dumps(sent.body), headers=sent.headers,
                      content_type="application/json", content_encoding="utf-8",
                      properties=sent.properties,
                      delivery_info={"exchange": "", "routing_key": "memory"})
    request = Request(message, app=app, task=received)
    assert CANARY in request.kwargsrepr  # the control: the sender's repr holds it
    signals._summarize_arguments(request=request)
    app.close()
    assert CANARY not in request.kwargsrepr and "agent-1" not in request.kwargsrepr
    assert request.kwargsrepr == (f"{{'agent_sha256': '{AGENT_1_SHA256}', "
                                  "'content': <29 chars>}")
    assert request.argsrepr == "<0 items>"


def test_identifier_fields_show_only_values_memoryd_allows_and_any_other_text_its_size(
        ) -> None:
    """A hand-crafted message reaches the task events before a worker refuses it: an
    option or id field holding a caller's text is shown by its size, as are a session id,
    tags, metadata and a keyword memoryd does not use."""
    allowed = {"job": "evict", "mode": "deep", "category": "fact", "role": "user",
               "status": "ok", "order": "key", "memory_id": MEMORY_ID, "run_id": "42",
               "task_id": MEMORY_ID, "limit": 5, "dry_run": True}
    assert summarize(allowed) == "{" + ", ".join(
        f"{k!r}: {v!r}" for k, v in allowed.items()) + "}"
    refused = dict.fromkeys((*allowed, "id", "target", "session_id", "source"), CANARY)
    shown = summarize({**refused, "tags": [CANARY], "metadata": {CANARY: CANARY},
                       CANARY: CANARY, "params": {CANARY: 1}})
    assert CANARY not in shown
    assert "'mode': <29 chars>" in shown and "<29 chars>: <29 chars>" in shown
    assert summarize({"memory_id": MEMORY_ID.upper(), "id": "{" + MEMORY_ID + "}"}) == (
        "{'memory_id': <36 chars>, 'id': <38 chars>}")  # a UUID as memoryd writes none


def test_every_parameter_of_memoryds_tasks_is_a_field_name_summaries_show() -> None:
    import inspect

    import memoryd.tasks.admin
    import memoryd.tasks.maintenance
    import memoryd.tasks.memory  # noqa: F401  (the three register every task)
    from memoryd.redaction import FIELD_NAMES
    from memoryd.worker import app

    names = {name for task_name, task in app.tasks.items() if task_name.startswith("memoryd.")
             for name in inspect.signature(task.run).parameters}
    names -= {"fields", "options"}  # **fields, **options: the store's and recall's fields
    assert names and names <= FIELD_NAMES, names - FIELD_NAMES
