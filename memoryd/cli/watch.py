"""What ``memoryd up`` does once the stack is up: keep it up.

A child or embedded server that dies is started again after a pause that grows while it
keeps dying (``memoryd.cli.nodes.Restarts``), on the same port, so that clients and the
other children reconnect to it by themselves. One of them dying ``CRASH_LOOP[0]`` times
within ``CRASH_LOOP[1]`` seconds stops everything, naming it and how it ended. Kept apart
from the start-up (``memoryd.cli.supervisor``) because it runs on its own clock: one
``Watch.supervise`` pass every half second until a signal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from memoryd.cli.nodes import CRASH_LOOP, Restarts
from memoryd.errors import EmbeddedServiceError

# The start-up's logger: its events kept the logger they were written under before
# supervision had a module of its own, so that filters on it still find them.
log = structlog.get_logger("memoryd.cli.supervisor")
# What a child left behind when it died (a worker's pool or consumer processes) gets this
# long after SIGTERM before the child starts again.
LEFTOVER_GRACE_S = 10.0


@dataclass
class _Watched:
    """One thing ``memoryd up`` keeps running: how to start it again, how it ended
    (None while it runs), and its pid for the log once it started again."""

    start: Callable[[], object]
    ended: Callable[[], str | None]
    pid: Callable[[], int | None]
    started: float = field(default_factory=time.monotonic)
    restart_at: float | None = None
    leftovers_until: float = 0.0  # how long its leftovers may take to exit
    restarts: Restarts = field(default_factory=Restarts)


@dataclass
class Watch:
    """The children (shared with the stack, which starts and stops them) and embedded
    servers kept running; ``restarted`` runs after each start again (runtime.json then
    names the new pid)."""

    children: dict[str, subprocess.Popen[bytes]]
    restarted: Callable[[], None]
    _watched: dict[str, _Watched] = field(default_factory=dict)

    def child(self, name: str, spawn: Callable[[], object]) -> None:
        """Keep the child ``name`` running, started again by ``spawn``."""
        self._watched[name] = _Watched(spawn, lambda: how(self.children[name].poll()),
                                       lambda: self.children[name].pid)

    def server(self, name: str, start: Callable[[], object],
               ended: Callable[[], str | None], pid: Callable[[], int | None]) -> None:
        """Keep an embedded server running: it is no child of ``children``."""
        self._watched[name] = _Watched(start, ended, pid)

    def supervise(self) -> None:
        """Start again what died once its pause is over; note what died since."""
        for name, watched in self._watched.items():
            if watched.restart_at is None:
                ended = watched.ended()
                if ended is not None:
                    self._died(name, watched, ended)
            elif time.monotonic() >= watched.restart_at and self._leftovers_gone(name, watched):
                self._restart(name, watched)

    def _died(self, name: str, watched: _Watched, ended: str) -> None:
        now = time.monotonic()
        pause = watched.restarts.died(now - watched.started, now)
        if watched.restarts.looping():
            count, window = CRASH_LOOP
            log.error("up.crash_loop", process=name, how=ended, deaths=count, within_s=window)
            raise EmbeddedServiceError(f"{name} {ended}, its {count}th exit within "
                                       f"{window:.0f} s; stopping memoryd")
        log.warning("up.exited", process=name, how=ended, restart_in_s=round(pause, 1))
        # Warm shutdown: finish current tasks.
        end_leftovers(self.children.get(name), signal.SIGTERM)
        watched.restart_at, watched.leftovers_until = now + pause, now + LEFTOVER_GRACE_S

    def _restart(self, name: str, watched: _Watched) -> None:
        end_leftovers(self.children.get(name), signal.SIGKILL)
        watched.restart_at, watched.started = None, time.monotonic()
        try:
            watched.start()
        except EmbeddedServiceError as exc:  # a server that could not start yet
            self._died(name, watched, f"did not start again: {exc}")
            return
        log.info("up.restarted", process=name, pid=watched.pid())
        self.restarted()

    def _leftovers_gone(self, name: str, watched: _Watched) -> bool:
        """Whether what a dead child left behind has exited, or had its time to (then it
        is killed as the child starts again)."""
        proc = self.children.get(name)
        if proc is None or time.monotonic() >= watched.leftovers_until:
            return True
        try:
            os.killpg(proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return True
        return False


def end_leftovers(proc: subprocess.Popen[bytes] | None, sig: signal.Signals) -> None:
    """Signal what a dead child left in its process group (a worker's pool or consumer
    processes), so that no two copies of a node run at once. The group is gone once they
    all exited; a child that runs, or none (a server), has nothing left behind."""
    if proc is not None and proc.returncode is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)


def how(code: int | None) -> str | None:
    """How a child ended, in words, from its exit status (None: it runs)."""
    if code is None:
        return None
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"
