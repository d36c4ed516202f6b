"""Printing results: aligned tables for people, JSON for scripts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel


def key_values(pairs: list[str], field: str) -> dict[str, Any]:
    """``NAME=VALUE`` arguments as a mapping; a value is JSON if it parses, else a string."""
    from memoryd.errors import ValidationError

    found: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name:
            raise ValidationError(field, "expected NAME=VALUE")
        try:
            found[name] = json.loads(raw)
        except ValueError:
            found[name] = raw
    return found


def as_json(value: Any) -> str:
    def plain(item: Any) -> Any:
        if isinstance(item, BaseModel):
            return item.model_dump(mode="json")
        if isinstance(item, list | tuple):
            return [plain(x) for x in item]
        if isinstance(item, dict):
            return {k: plain(v) for k, v in item.items()}
        return item

    return json.dumps(plain(value), indent=2, default=str)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], max_width: int = 60) -> str:
    cells = [[_cell(v, max_width) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(line.rstrip() for line in lines)  # no padding after the last column


def _cell(value: Any, max_width: int) -> str:
    text = "" if value is None else " ".join(str(value).split())
    return text if len(text) <= max_width else text[: max_width - 1] + "…"
