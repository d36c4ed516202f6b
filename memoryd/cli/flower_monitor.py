"""Flower as ``memoryd up`` runs it: a monitor, never a control panel.

Flower's own app also runs any task with any arguments (``/api/task/apply``, which for
``memoryd.recall`` with another agent's id returns that agent's memories), reads any
task's stored result, revokes, rate-limits, shuts workers down, and answers
``/metrics`` without its login. Here every request passes one gate first
(``MonitoringFlower.get_handler_delegate``): without the login, 401 on every path;
with it, only the pages and read APIs in ``SHOWN`` are served, anything else is 403,
so a control endpoint of a later Flower is refused until it is named here. Task
arguments and results reach Flower as the workers' summaries (``memoryd.redaction``);
a worker's page does not ask for its reserved and scheduled tasks, which Celery
reports with their whole arguments.

Run as ``python -m memoryd.cli.flower_monitor [Flower's options]``; the login comes
from ``FLOWER_BASIC_AUTH`` (``memoryd.cli.flower_login``) or ``--basic-auth``, and
without one Flower does not start.
"""

from __future__ import annotations

import atexit
import base64
import binascii
import contextlib
import hmac
import signal
import sys
from typing import Any

from flower import command as flower_command
from flower.api.tasks import GetQueueLengths, ListTasks, ListTaskTypes, TaskInfo
from flower.api.workers import ListWorkers
from flower.app import Flower
from flower.events import Events
from flower.inspector import Inspector
from flower.urls import settings as flower_settings
from flower.views.auth import LoginHandler, LogoutHandler
from flower.views.broker import BrokerView
from flower.views.error import NotFoundErrorHandler
from flower.views.monitor import Healthcheck, Metrics
from flower.views.tasks import TasksDataTable, TasksView, TaskView
from flower.views.workers import WorkersView, WorkerView
from tornado import ioloop
from tornado.options import options as flower_options
from tornado.web import RequestHandler, StaticFileHandler

from memoryd.errors import ConfigError

# What Flower serves: its pages and the APIs that read its event state and the
# workers' statistics. Not here, so refused: running, sending or aborting a task,
# reading a stored result, revoking, time and rate limits, pools, consumers, shutdown.
SHOWN: frozenset[type[RequestHandler]] = frozenset({
    WorkersView, WorkerView, TaskView, TasksView, TasksDataTable, BrokerView,
    ListWorkers, ListTasks, ListTaskTypes, GetQueueLengths, TaskInfo,
    Metrics, Healthcheck, StaticFileHandler, LoginHandler, LogoutHandler,
    NotFoundErrorHandler,
})
# Celery answers these with each task's whole arguments (``Request.info()``).
UNASKED_INSPECTIONS = frozenset({"reserved", "scheduled"})
REALM = 'Basic realm="flower"'


class _Answer(RequestHandler):
    """Answers every method with ``status`` and a line of text, whatever the path."""

    status = 403
    text = "Flower is monitoring only here: this endpoint is refused."

    def check_xsrf_cookie(self) -> None:
        """Nothing is done here, so nothing to forge: the refusal comes first."""

    def prepare(self) -> None:
        self.set_status(self.status)
        self.set_header("Content-Type", "text/plain; charset=UTF-8")
        if self.status == 401:
            self.set_header("WWW-Authenticate", REALM)
        self.finish(self.text)


class Refused(_Answer):
    pass


class LoginRequired(_Answer):
    status = 401
    text = "Access denied"


class SummaryInspector(Inspector):  # type: ignore[misc]
    """Flower's inspector without the task lists Celery reports unsummarised."""

    inspect_methods = tuple(m for m in Inspector.inspect_methods
                            if m not in UNASKED_INSPECTIONS)
    task_inspect_methods = tuple(m for m in Inspector.task_inspect_methods
                                 if m not in UNASKED_INSPECTIONS)


# What a task-sent event carries as its sender wrote it: a sender that does not summarise
# (``celery call``, a hand-made ``send_task``) would put whole arguments there. The worker
# sends its own summary of them when it receives the task (``memoryd.worker.signals``).
SENDER_FIELDS = frozenset({"args", "kwargs"})


class SummaryEvents(Events):  # type: ignore[misc]
    """Flower's event receiver, keeping only the workers' summaries of task arguments.
    Dropping them from task-sent events matters beyond the first moment: Flower merges a
    task-sent event that arrives after the task-received one over it, fields and all."""

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("type") == "task-sent":
            event = {key: value for key, value in event.items() if key not in SENDER_FIELDS}
        super().on_event(event)


class MonitoringFlower(Flower):  # type: ignore[misc]
    """Flower's app behind memoryd's gate: the login on every path, then ``SHOWN``."""

    def __init__(self, *, capp: Any, options: Any, **kwargs: Any) -> None:
        loop = ioloop.IOLoop.instance()
        events = SummaryEvents(  # as Flower makes its own, but for the class
            capp, db=options.db, persistent=options.persistent,
            state_save_interval=options.state_save_interval,
            enable_events=options.enable_events, io_loop=loop,
            max_workers_in_memory=options.max_workers, max_tasks_in_memory=options.max_tasks)
        super().__init__(options=options, capp=capp, events=events, io_loop=loop, **kwargs)
        self.inspector = SummaryInspector(self.io_loop, self.capp,
                                          self.options.inspect_timeout / 1000.0)

    def get_handler_delegate(self, request: Any, target_class: type[RequestHandler],
                             target_kwargs: dict[str, Any] | None = None,
                             path_args: list[bytes] | None = None,
                             path_kwargs: dict[str, bytes] | None = None) -> Any:
        """Where tornado turns every routed request into its handler: the gate."""
        if not logged_in(request.headers.get("Authorization", ""),
                         self.options.basic_auth or ()):
            target_class, target_kwargs = LoginRequired, None
        elif target_class not in SHOWN:
            target_class, target_kwargs = Refused, None
        return super().get_handler_delegate(request, target_class, target_kwargs,
                                            path_args, path_kwargs)


def logged_in(header: str, logins: Any) -> bool:
    """Whether an ``Authorization`` header carries one of the ``user:password`` logins."""
    scheme, _, encoded = header.partition(" ")
    if scheme != "Basic":
        return False
    try:
        given = base64.b64decode(encoded.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return False
    # Every login compared, in constant time: no early answer tells which was close.
    return sum(hmac.compare_digest(given, login) for login in logins) > 0


def main(argv: list[str] | None = None) -> int:
    """Flower's command (``celery flower``) with ``MonitoringFlower`` in place of its app:
    its options from the environment and ``argv``, then served until SIGTERM."""
    from memoryd.worker import app

    flower_command.apply_env_options()
    flower_command.apply_options(sys.argv[0], list(sys.argv[1:] if argv is None else argv))
    if not flower_options.basic_auth:
        raise ConfigError("Flower needs a login: set FLOWER_BASIC_AUTH=user:password")
    if "read_only" in flower_options:  # Flower's own switch: its pages show no buttons
        flower_options.read_only = True
    flower_command.extract_settings()
    flower_command.setup_logging()
    monitor = MonitoringFlower(capp=app, options=flower_options, **flower_settings)
    atexit.register(monitor.stop)
    signal.signal(signal.SIGTERM, flower_command.sigterm_handler)
    monitor.start_http_server()
    with contextlib.suppress(KeyboardInterrupt, SystemExit):  # Ctrl-C, SIGTERM: stopped
        monitor.start()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ConfigError as exc:
        sys.exit(f"memoryd: {exc}")
