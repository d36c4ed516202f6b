"""Structured logs: JSON lines with bound context, secrets and content never in full."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import pty
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from sqlalchemy.exc import IntegrityError

from memoryd import logging as mlog
from tests.support.canary import database_error


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
        assert line["task_id"] == "t-1" and line["agent_sha256"] == AGENT_7_SHA256
    assert first["event"] == "stored" and first["rows"] == 1
    assert second["event"] == "from the stdlib" and second["level"] == "warning"


AGENT_7_SHA256 = hashlib.sha256(b"agent-7").hexdigest()


def test_an_agent_is_named_by_its_hash_never_by_its_id(json_logs: io.StringIO) -> None:
    """As the erasure audit names it: an erased agent's id stays in no log line, and an
    operator finds an agent's lines by hashing the id."""
    agent = "alice@example.com/diary"
    structlog.get_logger("memoryd.test").info("index_agents.requested", agent_id=agent)
    structlog.get_logger("memoryd.test").info(f"fetching /v1/agents/{agent}/memories?limit=5")
    memoryd_line, path_line = _lines(json_logs)
    assert agent not in json.dumps([memoryd_line, path_line])
    assert "agent_id" not in memoryd_line
    assert memoryd_line["agent_sha256"] == hashlib.sha256(agent.encode()).hexdigest()
    assert path_line["event"] == "fetching /v1/agents/<agent>"


def test_the_access_log_names_routes_by_their_template_never_the_path_sent(
        json_logs: io.StringIO) -> None:
    """uvicorn's own line prints the path as sent (a job name, an eviction id, any path
    a caller makes up); only the gateway's line, naming the route's template, passes."""
    secret = "alice-diary-7f3a9c"
    logging.getLogger(mlog.ACCESS_LOGGER).info(
        '%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "POST", f"/v1/jobs/{secret}/runs",
        "1.1", 422)
    structlog.get_logger(mlog.ACCESS_LOGGER).info(
        "DELETE /v1/agents/{agent}/memories/{memory_id} 200", method="DELETE",
        route="/v1/agents/{agent}/memories/{memory_id}", status=200)
    (line,) = _lines(json_logs)
    assert secret not in json_logs.getvalue()
    assert line["event"] == "DELETE /v1/agents/{agent}/memories/{memory_id} 200"
    assert line["route"] == "/v1/agents/{agent}/memories/{memory_id}"
    assert line["logger"] == mlog.ACCESS_LOGGER


def test_secrets_and_content_are_redacted(json_logs: io.StringIO) -> None:
    secret = "sk-ant-very-secret-value"
    structlog.get_logger("memoryd.test").info(
        "call", api_key=secret, content="the user's private diary " * 20,
        url="postgresql://memoryd:hunter2@db:5432/memoryd",
        broker="redis://:hunter3@127.0.0.1:6379/0")
    (line,) = _lines(json_logs)
    text = json.dumps(line)
    assert secret not in text and "hunter2" not in text and "private diary" not in text
    assert line["api_key"] == "***"
    assert line["content"] == "<500 chars>"
    assert line["url"] == "postgresql://memoryd:***@db:5432/memoryd"
    assert line["broker"] == "redis://:***@127.0.0.1:6379/0"  # a password without a user


def test_long_foreign_messages_are_cut(json_logs: io.StringIO) -> None:
    payload = "memory content " * 200
    logging.getLogger("celery.worker.consumer").error("Received invalid message: %s", payload)
    (line,) = _lines(json_logs)
    assert len(str(line["event"])) < 600
    assert str(line["event"]).endswith("chars]")


def test_a_logged_database_error_keeps_its_frames_but_not_the_row(
        json_logs: io.StringIO) -> None:
    canary = "canary-logged-4be1"
    try:
        raise database_error(canary)
    except IntegrityError as exc:
        # As Celery reports a failed task, and as memoryd's own code would.
        logging.getLogger("celery.app.trace").error(
            "Task %s raised unexpected: %r", "memoryd.store", exc, exc_info=True)
        structlog.get_logger("memoryd.test").exception("store.failed")
    celery_line, own_line = _lines(json_logs)
    assert canary not in json_logs.getvalue()
    for line in (celery_line, own_line):
        assert "Traceback (most recent call last)" in str(line["exception"])
        assert str(line["exception"]).endswith(
            "sqlalchemy.exc.IntegrityError: CheckViolation (SQLSTATE 23514)")
    assert str(celery_line["event"]).startswith("Task memoryd.store raised unexpected: "
                                                "IntegrityError(")


def test_worker_does_not_log_task_results() -> None:
    from celery.app import trace

    from memoryd.worker import signals

    signals._setup_logging(loglevel="INFO")
    assert "return_value" not in trace.LOG_SUCCESS


# --- where the lines go: a terminal or a pipe, and what is kept quiet ------------------

def _python(code: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, text=True,
                          stdin=subprocess.DEVNULL, timeout=120, check=True, **kwargs)


_LOG_HELLO = """
    import structlog
    from memoryd import logging as mlog
    mlog.configure()
    structlog.get_logger("memoryd.test").info("hello", answer=42)
"""


def test_console_lines_on_a_terminal_and_json_on_a_pipe() -> None:
    # A terminal: the child writes to a pty, as memoryd up's children inherit the user's.
    leader, follower = pty.openpty()
    try:
        _python(_LOG_HELLO, stdout=subprocess.DEVNULL, stderr=follower)
        os.close(follower)
        follower = -1
        written = b""
        with contextlib.suppress(OSError):  # EIO once the child's side is closed
            while chunk := os.read(leader, 4096):
                written += chunk
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    text = re.sub(r"\x1b\[[0-9;]*m", "", written.decode())  # colours on a terminal
    assert "hello" in text and "answer=42" in text and "[memoryd.test]" in text
    assert not text.lstrip().startswith("{")

    piped = _python(_LOG_HELLO, capture_output=True)
    line = json.loads(piped.stderr)
    assert line["event"] == "hello" and line["answer"] == 42 and line["level"] == "info"


def test_printed_output_and_log_lines_keep_their_order_in_one_pipe() -> None:
    # `memoryd jobs run ... 2>&1 | less`: stdout is block-buffered on a pipe, stderr is not.
    done = _python("""
        import structlog
        from memoryd import logging as mlog
        mlog.configure()
        print("a table row", end="\\n")
        structlog.get_logger("memoryd.test").info("after the table")
        print("the last line")
    """, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines = done.stdout.splitlines()
    assert lines[0] == "a table row"
    assert json.loads(lines[1])["event"] == "after the table"
    assert lines[2] == "the last line"


def test_third_party_chatter_is_kept_at_warning(json_logs: io.StringIO) -> None:
    from onnxruntime.quantization import onnx_quantizer

    mlog.configure(level="INFO", json=True, force=True, stream=json_logs)
    for name in ("kombu.connection", "amqp", "celery.worker.consumer.mingle",
                 "onnxruntime", "sqlalchemy.engine.Engine"):
        logging.getLogger(name).info("internal detail")
    # onnxruntime's quantization logs through the root logger (logging.info(...)).
    for level in (logging.INFO, logging.WARNING, logging.ERROR):
        logging.getLogger().handle(logging.LogRecord(
            "root", level, onnx_quantizer.__file__, 1, "quantizer says %s", ("hi",), None))
    logging.getLogger("memoryd.test").info("ours")
    logging.getLogger("kombu").warning("a real problem")
    logging.getLogger().info("the root logger from our own code")
    events = [(line["logger"], line["event"]) for line in _lines(json_logs)]
    assert events == [
        ("onnxruntime.quantization.onnx_quantizer", "quantizer says hi"),  # the ERROR
        ("memoryd.test", "ours"),
        ("kombu", "a real problem"),
        ("root", "the root logger from our own code"),
    ]


def test_celery_lines_for_each_task_show_at_debug_only(json_logs: io.StringIO) -> None:
    def logged(level: str) -> list[object]:
        json_logs.truncate(0)
        json_logs.seek(0)
        mlog.configure(level=level, json=True, force=True, stream=json_logs)
        logging.getLogger("celery.worker.strategy").info("Task memoryd.store[1] received")
        logging.getLogger("celery.app.trace").info("Task memoryd.store[1] succeeded in 0.01s")
        logging.getLogger("celery.app.trace").error("Task memoryd.store[2] raised")
        return [line["event"] for line in _lines(json_logs)]

    assert logged("INFO") == ["Task memoryd.store[2] raised"]
    assert logged("debug") == ["Task memoryd.store[1] received",
                               "Task memoryd.store[1] succeeded in 0.01s",
                               "Task memoryd.store[2] raised"]
    assert logged("INFO") == ["Task memoryd.store[2] raised"]  # quiet again


def test_deriving_the_int8_model_logs_nothing(tmp_path: Path) -> None:
    """Once per data directory, on the first start of the memory workers: it used to
    print some forty lines per worker process."""
    done = _python(f"""
        from pathlib import Path
        from memoryd import logging as mlog
        from memoryd.memory.embeddings import model_file
        mlog.configure(level="INFO")
        print(model_file(int8=True, cache_dir=Path({str(tmp_path)!r})))
    """, capture_output=True)
    assert Path(done.stdout.strip()).exists()
    assert done.stderr == ""
