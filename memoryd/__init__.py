"""memoryd: long-term memory for fleets of LLM agents.

``MemoryStore`` (the server-side API) is imported lazily, so that
``from memoryd.client import MemoryClient`` never pulls in SQLAlchemy. The package
itself is the top of the layers (``memoryd.layers``): it re-exports from any of them,
and no module of memoryd imports these names from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memoryd.errors import ConfigError, MemorydError, NotFound, ValidationError
from memoryd.types import Entity, Memory, Page, Recalled, SessionInfo, StoreResult

if TYPE_CHECKING:
    from memoryd.client import MemoryClient
    from memoryd.memory.store import MemoryStore

__version__ = "0.1.0"
__all__ = [
    "ConfigError", "Entity", "Memory", "MemoryClient", "MemoryStore", "MemorydError",
    "NotFound", "Page", "Recalled", "SessionInfo", "StoreResult", "ValidationError",
]


def __getattr__(name: str) -> Any:
    if name == "MemoryStore":
        from memoryd.memory.store import MemoryStore

        return MemoryStore
    if name == "MemoryClient":
        from memoryd.client import MemoryClient

        return MemoryClient
    raise AttributeError(f"module 'memoryd' has no attribute {name!r}")
