"""The one clock memoryd reads, so tests can move time (the only allowed fake besides the LLM)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

_now: Callable[[], datetime] | None = None


def now() -> datetime:
    """The current time, timezone-aware UTC."""
    return _now() if _now is not None else datetime.now(UTC)


def set_clock(fn: Callable[[], datetime] | None) -> None:
    """Install a fake clock (tests), or restore the real one with None."""
    global _now  # noqa: PLW0603 - named, resettable process global
    _now = fn
