"""LangGraph's value filters and namespace conditions, read as its ``InMemoryStore``
reads them, for ``MemorydStore`` to apply to the items memoryd pages in."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.store.base import Item, MatchCondition

from memoryd.errors import ValidationError

_COMPARISONS = {"$gt": float.__gt__, "$gte": float.__ge__, "$lt": float.__lt__,
                "$lte": float.__le__}


def passes(item: Item, wanted: Mapping[str, Any] | None) -> bool:
    """Whether the item's value passes the filter (``$eq $ne $gt $gte $lt $lte``, nested
    objects, exact lists)."""
    value = item.value
    return all(_compare(value.get(k), v) for k, v in (wanted or {}).items())


def matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """Whether the namespace meets a prefix or suffix condition (``*`` is any label)."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    part = namespace[:len(path)] if condition.match_type == "prefix" \
        else namespace[len(namespace) - len(path):]
    return all(p in ("*", n) for n, p in zip(part, path, strict=True))


def _compare(found: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(_operator(found, op, operand) for op, operand in wanted.items())
        return isinstance(found, dict) and all(_compare(found.get(k), v)
                                               for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (isinstance(found, list | tuple) and len(found) == len(wanted)
                and all(_compare(f, w) for f, w in zip(found, wanted, strict=True)))
    return bool(found == wanted)


def _operator(found: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(found == operand)
    if op == "$ne":
        return bool(found != operand)
    if op not in _COMPARISONS:
        raise ValidationError("filter", f"unknown operator {op!r}; one of $eq $ne "
                                        f"{' '.join(_COMPARISONS)}")
    try:
        return bool(_COMPARISONS[op](float(found), float(operand)))
    except (TypeError, ValueError):
        return False  # a missing field or one that is not a number does not match
