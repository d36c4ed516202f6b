"""memoryd's process globals, all in one place.

A process holds at most one of each: its settings, its database engine, the store its
tasks use, the two embedding models, and the LLM and clock a test may install. Each is
built on first use by its getter (``config.get_settings``, ``db.engine.get_engine``,
``tasks.base.get_store``, ``embeddings.get_embedder``...), and ``reset`` forgets them
all: a forked worker child must not reuse its parent's pooled connections or ONNX
sessions, and tests start from a clean process state. Nothing here imports SQLAlchemy
or the models at run time: the thin client imports this module through ``config``.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from memoryd.config import Settings
    from memoryd.memory.embeddings import Embedder
    from memoryd.memory.llm import LLM
    from memoryd.memory.store import MemoryStore
    from memoryd.worker.poison import DeliveryGuard


@dataclass
class Globals:
    """The process's shared objects; ``None`` until first used (or installed)."""

    settings: Settings | None = None
    engine: Engine | None = None
    store: MemoryStore | None = None
    embedder: Embedder | None = None
    query_embedder: Embedder | None = None
    # Embedders of models other than the configured one, by int8-ness (``embedder_for``).
    other_embedders: dict[bool, Embedder] = field(default_factory=dict)
    llm: LLM | None = None  # installed by tests; otherwise chosen from the settings per call
    clock: Callable[[], datetime] | None = None  # installed by tests
    delivery_guard: DeliveryGuard | None = None  # a worker's main process only
    # Held while a getter builds its object, so two threads never build two.
    lock: threading.RLock = field(default_factory=threading.RLock)


GLOBALS = Globals()

# Ctrl-C, a supervisor, the terminal closing: each stops a long-running command cleanly,
# so that what it started (the embedded PostgreSQL, child processes) is stopped too.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def reset(*, after_fork: bool = False) -> None:
    """Forget every process global. ``after_fork``: the engine's pooled connections
    belong to the parent and are dropped without being closed."""
    with GLOBALS.lock:
        engine = GLOBALS.engine
        GLOBALS.settings = GLOBALS.engine = GLOBALS.store = None
        GLOBALS.embedder = GLOBALS.query_embedder = GLOBALS.llm = None
        GLOBALS.other_embedders = {}
        GLOBALS.clock = None
        GLOBALS.delivery_guard = None
    if engine is not None:
        engine.dispose(close=not after_fork)
