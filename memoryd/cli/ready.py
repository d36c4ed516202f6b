"""When ``memoryd up`` may say it is up: every worker it started answers over the broker,
and the gateway's /readyz says 200.

A child that started is not yet one that serves (a first start derives the embedding
model), and "memoryd is up" is read as a promise by whoever waits for it: the banner
waits for these checks, and a child that exits meanwhile, or a wait past
``READY_WAIT_S``, stops the stack instead.
"""

from __future__ import annotations

import socket
import subprocess
import time
from typing import TYPE_CHECKING

from memoryd.config import get_settings
from memoryd.errors import EmbeddedServiceError

if TYPE_CHECKING:
    from celery import Celery

# How long the workers and the gateway may take to answer after they started (a first
# start derives the embedding model; a busy machine is slower): then the stack stops.
READY_WAIT_S = 300.0


def await_ready(broker_url: str, children: dict[str, subprocess.Popen[bytes]],
                gateway_port: int | None) -> None:
    """Return once every worker of ``children`` answers over the broker and the
    gateway (when ``gateway_port`` runs one) is ready. A child that exits meanwhile, or a
    wait past READY_WAIT_S, raises."""
    from celery import Celery

    from memoryd.celery_config import celery_config

    app = Celery("memoryd-up", set_as_current=False)
    app.conf.update(celery_config(get_settings(), broker_url=broker_url, caller=True))
    deadline = time.monotonic() + READY_WAIT_S
    try:
        while waiting := _not_ready(app, children, gateway_port):
            _check_children(children)
            if time.monotonic() > deadline:
                raise EmbeddedServiceError(
                    f"{', '.join(waiting)} did not answer within {READY_WAIT_S:.0f} s")
            time.sleep(0.5)
    finally:
        app.close()


def _not_ready(app: Celery, children: dict[str, subprocess.Popen[bytes]],
               gateway_port: int | None) -> list[str]:
    """The children that do not answer yet: workers by their host and pid in
    Celery's stats (a worker answers once it consumes; a worker that runs several
    nodes, once each of its nodes does), the gateway by its /readyz."""
    try:
        stats = app.control.inspect(timeout=1.0).stats() or {}
    except Exception:  # the broker not answering yet is the same as no reply
        stats = {}
    here = socket.gethostname()  # Celery's %h: a shared broker may serve other hosts
    answered = {reply.get("pid") for node, reply in stats.items()
                if node.partition("@")[2] == here}
    waiting = [name for name, proc in children.items()
               if name.startswith("worker-") and not _answers(proc.pid, answered)]
    if gateway_port and not _gateway_ready(gateway_port):
        waiting.append("gateway")
    return waiting


def _gateway_ready(port: int) -> bool:
    import urllib.error
    import urllib.request

    url = f"http://{_local(get_settings().gateway_host)}:{port}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=2.0) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):  # not listening yet, or 503
        return False


def _check_children(children: dict[str, subprocess.Popen[bytes]]) -> None:
    dead = [name for name, proc in children.items() if proc.poll() is not None]
    if dead:
        raise EmbeddedServiceError(f"{', '.join(dead)} exited; stopping memoryd")


def _answers(pid: int, answered: set[object]) -> bool:
    """Whether the worker process ``pid`` answers: itself (one node), or every node
    it runs (its child processes; a prefork node's pool processes are not its children
    here, they are the node's)."""
    import psutil

    if pid in answered:
        return True
    try:
        nodes = [child.pid for child in psutil.Process(pid).children()]
    except psutil.Error:
        return False
    return bool(nodes) and all(node in answered for node in nodes)


def _local(host: str) -> str:
    """``host`` as a URL names it from this machine: a server on every address is
    reached on the loopback one."""
    import ipaddress

    try:
        address = ipaddress.ip_address(host)
    except ValueError:  # a name
        return host or "127.0.0.1"
    if address.is_unspecified:
        address = ipaddress.ip_address("::1" if address.version == 6 else "127.0.0.1")
    return f"[{address}]" if address.version == 6 else str(address)

