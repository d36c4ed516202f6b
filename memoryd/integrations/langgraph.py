"""LangGraph's long-term store (``langgraph.store.base.BaseStore``) on memoryd.

    store = MemorydStore(MemoryClient(), agent_id="support-bot")
    graph = builder.compile(store=store)

One memoryd agent holds one store (a store per user of an app: ``agent_id=
identity.agent_id(app, user)``, which no other pair shares). Each LangGraph item
(namespace, key, value) is one memory of that agent:

- its memoryd ``key`` is the JSON text of ``[*namespace, key]``: exact and unique, so a
  ``put`` of an existing item replaces that memory in place, and a path longer than
  memoryd's key limit is refused as a ``ValidationError`` naming ``key``;
- its ``content``, what memoryd embeds and recall ranks, is the text of the item's
  indexed fields (``fields``, or the ``index`` of the put; the whole value by default)
  followed by the item's path, which keeps two items with the same text apart (memoryd
  stores one memory per content). An item put with ``index=False`` has only its path
  as content and is left out of query searches, though ``get`` and ``search`` without
  a query still find it;
- its ``metadata`` keeps the value exactly (``langgraph.value``, as JSON text), the
  namespace and key, and one entry per namespace label (``langgraph.ns.0``,
  ``langgraph.ns.1``, ...), so a namespace prefix is an equality filter memoryd answers
  from its metadata index;
- its category is ``decision``, which memoryd's maintenance never merges, summarizes,
  decays or evicts: an item stays as put until it is deleted.

``search`` without a query returns the prefix's items in the order of their memoryd keys
(code point order of that JSON text: stable from page to page), read only as far as the
asked window needs; with a query, memoryd's recall ranks the prefix's indexed items
(``SearchItem.score`` is recall's score). ``filter`` compares value fields as
LangGraph's ``InMemoryStore`` does (``$eq $ne $gt $gte $lt $lte``, nested objects,
exact lists), applied here to the prefix's items as memoryd pages them in.
``list_namespaces`` lists the namespaces holding at least one item (memoryd answers
their distinct list, not the items). Ops of a batch run in order. TTLs are not
supported (``supports_ttl`` is False): memoryd's expiry is fixed at write time and
cannot be refreshed by reads.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any, TypeVar

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    get_text_at_path,
)

from memoryd import validation as check
from memoryd.client import MemoryClient
from memoryd.errors import ValidationError
from memoryd.types import Memory

__all__ = ["MemorydStore"]

T = TypeVar("T")

MARK = "langgraph.item"
PATH = "langgraph.path"
NAMESPACE = "langgraph.namespace"
KEY = "langgraph.key"
VALUE = "langgraph.value"
INDEXED = "langgraph.indexed"
LABEL = "langgraph.ns.{}"
# Maintenance never merges, summarizes, decays or evicts a decision: a store's items are
# records, kept as put until deleted.
KEPT_CATEGORY = "decision"
PAGE = 1000  # memoryd's largest page
MAX_TEXT_CHARS = 4000  # an embedder reads a few hundred tokens: more text only costs
QUERY_REACH = 4  # with a filter, a query search ranks this many times the asked window
_WHITESPACE = re.compile(r"[%\s]")
_CONTROL = re.compile(r"[\x7f-\x9f]")  # the control characters JSON leaves as they are


class MemorydStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items are memories of one memoryd agent.

    ``fields``: the value fields embedded for ``search(query=...)`` (LangGraph's
    ``IndexConfig["fields"]`` paths; default ``["$"]``, the whole value)."""

    supports_ttl = False
    page_size = PAGE  # items (or namespaces) read from memoryd per call

    def __init__(self, client: MemoryClient, *, agent_id: str,
                 fields: Sequence[str] | None = None) -> None:
        self.client = client
        self.agent_id = check.agent_id(agent_id)
        self.fields = list(fields or ["$"])

    # --- batches ------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order; consecutive puts of values go to memoryd as one batch."""
        results: list[Result] = []
        pending: dict[str, dict[str, Any]] = {}  # memoryd key -> store item, last put wins
        for op in ops:
            if isinstance(op, PutOp) and op.value is not None:
                item = self._store_item(op)
                pending.pop(item["key"], None)
                pending[item["key"]] = item
                results.append(None)
                if len(pending) == PAGE:
                    self._flush(pending)
                continue
            self._flush(pending)
            results.append(self._run(op))
        self._flush(pending)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch`` on a thread: the client's calls block."""
        return await asyncio.to_thread(self.batch, list(ops))

    def _run(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            found = self._find(op.namespace, op.key)
            return None if found is None else _item(found)
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            return self._list_namespaces(op)
        if isinstance(op, PutOp):
            self._delete(op.namespace, op.key)
            return None
        raise ValidationError("op", f"unknown operation {type(op).__name__}")

    def _flush(self, pending: dict[str, dict[str, Any]]) -> None:
        if pending:
            self.client.store_many(self.agent_id, list(pending.values()))
            pending.clear()

    # --- writing ------------------------------------------------------------------------
    def _store_item(self, op: PutOp) -> dict[str, Any]:
        """The memoryd store item of a put (validated here, so errors name LangGraph's
        arguments)."""
        if op.ttl is not None:
            raise NotImplementedError("MemorydStore does not support TTLs; put ttl=None")
        path = memory_key(op.namespace, op.key)
        value = _checked_value(op.value)
        indexed = op.index is not False
        paths = [] if op.index is False else list(op.index or self.fields)
        text = " ".join(t for p in paths for t in get_text_at_path(op.value, p))
        metadata = {MARK: True, PATH: path, NAMESPACE: list(op.namespace), KEY: op.key,
                    VALUE: value, INDEXED: indexed,
                    **{LABEL.format(i): label for i, label in enumerate(op.namespace)}}
        return {"content": _content(text, path), "key": path, "metadata": metadata,
                "category": KEPT_CATEGORY}

    def _delete(self, namespace: tuple[str, ...], key: str) -> None:
        found = self._find(namespace, key)
        if found is not None:
            self.client.forget(self.agent_id, found.id)

    # --- reading ------------------------------------------------------------------------
    def _find(self, namespace: tuple[str, ...], key: str) -> Memory | None:
        page = self.client.list(self.agent_id, limit=1,
                                metadata={PATH: memory_key(namespace, key)})
        return page.items[0] if page.items else None

    def _search(self, op: SearchOp) -> list[SearchItem]:
        check.offset(op.offset)
        if isinstance(op.limit, bool) or not isinstance(op.limit, int) or op.limit < 0:
            raise ValidationError("limit", f"must be a non-negative integer, got {op.limit!r}")
        wanted = _prefix_filter(op.namespace_prefix)
        if op.query is None:
            return self._listed(wanted, op)
        if op.limit == 0:
            return []
        reach = (op.offset + op.limit) * (QUERY_REACH if op.filter else 1)
        hits = self.client.recall(self.agent_id, op.query, limit=min(reach, PAGE),
                                  metadata={**wanted, INDEXED: True})
        found = [_found(h.memory, h.score) for h in hits]
        return [i for i in found if _passes(i, op.filter)][op.offset:op.offset + op.limit]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        prefixes = [c.path for c in conditions if c.match_type == "prefix"]
        # A prefix without wildcards narrows the read to its subtree.
        exact = next((p for p in prefixes if "*" not in p), ())
        found = {tuple(ns) for ns in self._namespaces(_prefix_filter(exact))}
        chosen = [ns for ns in found if all(_matches(c, ns) for c in conditions)]
        if op.max_depth is not None:
            chosen = [ns[:op.max_depth] for ns in chosen]
        return sorted(set(chosen))[op.offset:op.offset + op.limit]

    def _listed(self, wanted: Mapping[str, Any], op: SearchOp) -> list[SearchItem]:
        """A search without a query: the window of the prefix's items (in memoryd key
        order) that pass the filter, read page by page only as far as the window needs."""
        if not op.filter:  # memoryd skips the offset itself
            size = min(self.page_size, max(op.limit, 1))
            found = self._pages(wanted, start=op.offset, size=size)
            return list(islice(map(_found, found), op.limit))
        passing = (i for i in map(_found, self._pages(wanted)) if _passes(i, op.filter))
        return list(islice(passing, op.offset, op.offset + op.limit))

    def _pages(self, wanted: Mapping[str, Any], *, start: int = 0, size: int | None = None
               ) -> Iterator[Memory]:
        """The items passing the metadata filter ``wanted``, in memoryd key order."""
        size = size or self.page_size
        return _paged(lambda offset: self.client.list(
            self.agent_id, limit=size, offset=start + offset, metadata=wanted,
            order="key").items, size)

    def _namespaces(self, wanted: Mapping[str, Any]) -> Iterator[list[str]]:
        """The distinct namespaces of the items passing ``wanted``, as memoryd lists them
        (without reading the items)."""
        return _paged(lambda offset: self.client.metadata_values(
            self.agent_id, NAMESPACE, metadata=wanted, limit=self.page_size, offset=offset),
            self.page_size)


def _paged(fetch: Callable[[int], Sequence[T]], size: int) -> Iterator[T]:
    """What ``fetch(offset)`` answers, page after page until a short one."""
    offset = 0
    while True:
        page = fetch(offset)
        yield from page
        offset += len(page)
        if len(page) < size:
            return


def memory_key(namespace: Sequence[str], key: str) -> str:
    """The memoryd key of an item: the JSON text of its path (control characters
    escaped, which memoryd keys may not hold)."""
    for label in namespace:
        if not isinstance(label, str) or not label:
            raise ValidationError("namespace", f"labels must be non-empty strings, "
                                               f"got {label!r:.40}")
    if not isinstance(key, str):
        raise ValidationError("key", f"must be a string, got {type(key).__name__}")
    if "\x00" in key or any("\x00" in label for label in namespace):
        raise ValidationError("key", "the namespace and key may not hold a NUL character")
    path = _CONTROL.sub(lambda m: f"\\u{ord(m[0]):04x}",
                        json.dumps([*namespace, key], ensure_ascii=False))
    if len(path) > check.MAX_KEY:
        raise ValidationError("key", f"the namespace and key are {len(path)} characters "
                                     f"as a memoryd key, at most {check.MAX_KEY}")
    return path


def _checked_value(value: Mapping[str, Any] | None) -> str:
    """The value as memoryd keeps it: JSON text, which gives back every float and
    integer as it was (jsonb would turn ``1.5e300`` into an integer). Keys must be
    strings throughout: JSON would silently turn other keys into strings."""
    if not isinstance(value, Mapping):
        raise ValidationError("value", "must be a mapping")
    _string_keys("value", value)
    try:
        check.metadata(value)
    except ValidationError as exc:
        raise ValidationError("value", exc.message) from None
    return json.dumps(value, ensure_ascii=False)


def _string_keys(field: str, value: object) -> None:
    if isinstance(value, Mapping):
        for key, inner in value.items():
            if not isinstance(key, str):
                raise ValidationError(field, f"has the key {key!r:.40}; keys must be strings")
            _string_keys(f"{field}.{key}", inner)
    elif isinstance(value, list | tuple):
        for index, inner in enumerate(value):
            _string_keys(f"{field}[{index}]", inner)


def _content(text: str, path: str) -> str:
    """The memory's content: the indexed text, then the item's path with whitespace
    and ``%`` escaped, so no two items' contents are the same once memoryd folds runs
    of whitespace."""
    label = _WHITESPACE.sub(lambda m: f"%{ord(m[0]):02X}", path)
    head = text[:MAX_TEXT_CHARS].strip()
    return f"{head}\n{label}" if head else label


def _prefix_filter(prefix: Sequence[str]) -> dict[str, Any]:
    """The metadata equality filter of a namespace prefix."""
    if len(prefix) >= check.MAX_METADATA_FILTERS - 1:
        raise ValidationError("namespace_prefix", f"has {len(prefix)} labels, at most "
                                                  f"{check.MAX_METADATA_FILTERS - 2}")
    return {MARK: True, **{LABEL.format(i): label for i, label in enumerate(prefix)}}


def _item(memory: Memory) -> Item:
    """The LangGraph item a memory holds."""
    data = memory.metadata
    return Item(namespace=tuple(data[NAMESPACE]), key=data[KEY], value=json.loads(data[VALUE]),
                created_at=memory.created_at, updated_at=memory.updated_at)


def _found(memory: Memory, score: float | None = None) -> SearchItem:
    """The item as a search result (``score``: recall's, for a query search)."""
    item = _item(memory)
    return SearchItem(namespace=item.namespace, key=item.key, value=item.value,
                      created_at=item.created_at, updated_at=item.updated_at, score=score)


# --- LangGraph's filter and namespace matching (as its InMemoryStore reads them) -------
def _passes(item: Item, wanted: Mapping[str, Any] | None) -> bool:
    value = item.value
    return all(_compare(value.get(k), v) for k, v in (wanted or {}).items())


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
    comparisons = {"$gt": float.__gt__, "$gte": float.__ge__, "$lt": float.__lt__,
                   "$lte": float.__le__}
    if op not in comparisons:
        raise ValidationError("filter", f"unknown operator {op!r}; one of $eq $ne "
                                        f"{' '.join(comparisons)}")
    try:
        return bool(comparisons[op](float(found), float(operand)))
    except (TypeError, ValueError):
        return False  # a missing field or one that is not a number does not match


def _matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    part = namespace[:len(path)] if condition.match_type == "prefix" \
        else namespace[len(namespace) - len(path):]
    return all(p in ("*", n) for n, p in zip(part, path, strict=True))
