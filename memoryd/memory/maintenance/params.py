"""Checks for job parameters: they arrive as JSON from the CLI, a task or a schedule,
so a wrong type or a value that would never finish a sweep is a ValidationError
before any work starts."""

from __future__ import annotations

import math

from memoryd.errors import ValidationError
from memoryd.memory.maintenance.context import JobContext


def number(name: str, value: object, low: float, high: float | None = None) -> float:
    """A numeric job parameter within [low, high]; booleans and NaN are rejected."""
    if isinstance(value, int | float) and not isinstance(value, bool) \
            and math.isfinite(value) and value >= low and (high is None or value <= high):
        return float(value)
    bounds = f"in [{low}, {high}]" if high is not None else f">= {low}"
    raise ValidationError(name, f"must be a number {bounds}, got {value!r}")


def integer(name: str, value: object, low: int = 1) -> int:
    """An integer job parameter >= ``low``; booleans are rejected."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValidationError(name, f"must be an integer >= {low}, got {value!r}")
    return value


def check_batch_size(ctx: JobContext) -> None:
    """A zero batch would never finish a keyset sweep."""
    integer("batch_size", ctx.batch_size, 1)
