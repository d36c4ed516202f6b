"""The one clock memoryd reads, so tests can move time (the only allowed fake besides the LLM)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from memoryd.process import Slot

# A fake clock a test installed, if any.
_FAKE: Slot[Callable[[], datetime]] = Slot("clock")


def now() -> datetime:
    """The current time, timezone-aware UTC."""
    fake = _FAKE.value
    return fake() if fake is not None else datetime.now(UTC)


def set_clock(fn: Callable[[], datetime] | None) -> None:
    """Install a fake clock (tests), or restore the real one with None."""
    _FAKE.value = fn
