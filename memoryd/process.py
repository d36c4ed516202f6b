"""memoryd's process globals, all reachable from one place.

A process holds at most one of each: its settings, its database engine, the store its
tasks use, the two embedding models, and the LLM and clock a test may install. Each
lives in a ``Slot`` declared by the module that builds it (``config.get_settings``,
``db.engine.get_engine``, ``tasks.base.get_store``, ``embeddings.get_embedder``...), so
this module imports none of them, and ``reset`` forgets every slot: a forked worker
child must not reuse its parent's pooled connections or ONNX sessions, and tests start
from a clean process state.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

# Held while a slot's object is built, so two threads never build two.
LOCK = threading.RLock()


class Slot(Generic[T]):
    """One process-wide object; ``None`` until first used (or installed).

    ``forget`` is called with the object and ``after_fork`` when a reset drops it (the
    engine closes its pool, or only drops it in a forked child)."""

    def __init__(self, name: str,
                 forget: Callable[[T, bool], None] | None = None) -> None:
        self.name = name
        self.value: T | None = None
        self._forget = forget
        SLOTS[name] = self

    def get(self, build: Callable[[], T]) -> T:
        """The object, built by ``build`` on first use."""
        with LOCK:
            if self.value is None:
                self.value = build()
            return self.value

    def clear(self, *, after_fork: bool = False) -> None:
        with LOCK:
            value, self.value = self.value, None
        if value is not None and self._forget is not None:
            self._forget(value, after_fork)


# Every slot declared so far, by name.
SLOTS: dict[str, Slot[Any]] = {}

# Ctrl-C, a supervisor, the terminal closing: each stops a long-running command cleanly,
# so that what it started (the embedded PostgreSQL, child processes) is stopped too.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def reset(*, after_fork: bool = False) -> None:
    """Forget every process global. ``after_fork``: the engine's pooled connections
    belong to the parent and are dropped without being closed."""
    for slot in list(SLOTS.values()):
        slot.clear(after_fork=after_fork)
