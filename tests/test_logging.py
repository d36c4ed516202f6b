"""Structured logs: JSON lines with bound context, secrets and content never in full."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from memoryd import logging as mlog


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    mlog.configure(json=True, force=True, stream=stream)
    yield stream
    mlog.clear()
    mlog.configure(json=False, force=True)


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_bound_context_appears_on_every_line(json_logs: io.StringIO) -> None:
    mlog.bind(task_id="t-1", task_name="memoryd.store", agent_id="agent-7")
    structlog.get_logger("memoryd.test").info("stored", rows=1)
    logging.getLogger("celery.worker").warning("from the stdlib")
    first, second = _lines(json_logs)
    for line in (first, second):
        assert line["task_id"] == "t-1" and line["agent_id"] == "agent-7"
    assert first["event"] == "stored" and first["rows"] == 1
    assert second["event"] == "from the stdlib" and second["level"] == "warning"


def test_secrets_and_content_are_redacted(json_logs: io.StringIO) -> None:
    secret = "sk-ant-very-secret-value"
    structlog.get_logger("memoryd.test").info(
        "call", api_key=secret, content="the user's private diary " * 20,
        url="postgresql://memoryd:hunter2@db:5432/memoryd")
    (line,) = _lines(json_logs)
    text = json.dumps(line)
    assert secret not in text and "hunter2" not in text and "private diary" not in text
    assert line["api_key"] == "***"
    assert line["content"] == "<500 chars>"
    assert line["url"] == "postgresql://memoryd:***@db:5432/memoryd"


def test_long_foreign_messages_are_cut(json_logs: io.StringIO) -> None:
    payload = "memory content " * 200
    logging.getLogger("celery.worker.consumer").error("Received invalid message: %s", payload)
    (line,) = _lines(json_logs)
    assert len(str(line["event"])) < 600
    assert str(line["event"]).endswith("chars]")


def test_worker_does_not_log_task_results() -> None:
    from celery.app import trace

    from memoryd.worker import signals

    signals._setup_logging(loglevel="INFO")
    assert "return_value" not in trace.LOG_SUCCESS
