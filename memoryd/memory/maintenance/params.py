"""Checks for job parameters: they arrive as JSON from the CLI, a task or a schedule,
so a wrong type or a value that would never finish a sweep is a ValidationError
before any work starts."""

from __future__ import annotations

import math

from memoryd import validation as check
from memoryd.errors import ValidationError
from memoryd.memory.maintenance.context import JobContext

# Spans of time a job takes (ages, windows, retention), in days: at most a century, so
# that "now minus the span" is always a date Python and PostgreSQL represent.
MAX_DAYS = 36_500
MAX_HOURS = MAX_DAYS * 24


def number(name: str, value: object, low: float, high: float | None = None) -> float:
    """A numeric job parameter within [low, high]; booleans and NaN are rejected."""
    if isinstance(value, int | float) and not isinstance(value, bool) \
            and math.isfinite(value) and value >= low and (high is None or value <= high):
        return float(value)
    bounds = f"in [{low}, {high}]" if high is not None else f">= {low}"
    raise ValidationError(name, f"must be a number {bounds}")


def integer(name: str, value: object, low: int = 1, high: int = check.MAX_INT) -> int:
    """An integer job parameter in [low, high] (by default within PostgreSQL's
    integer); booleans are rejected."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(name, f"must be an integer in [{low}, {high}]")
    return value


def check_batch_size(ctx: JobContext) -> None:
    """A zero batch would never finish a keyset sweep."""
    integer("batch_size", ctx.batch_size, 1)
