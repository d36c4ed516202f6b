"""LangGraph's long-term store (``langgraph.store.base.BaseStore``) on memoryd.

    store = MemorydStore(MemoryClient(), agent_id="support-bot")
    graph = builder.compile(store=store)

One memoryd agent holds one store (a store per user of an app: ``agent_id=
identity.agent_id(app, user)``, which no other pair shares). Each LangGraph item
(namespace, key, value) is one memory of that agent, its record, and one more memory per
further text it has embedded:

- the record's memoryd ``key`` is the JSON text of ``[*namespace, key]``: exact and
  unique, so a ``put`` of an existing item replaces that memory in place, and a path
  longer than memoryd's key limit is refused as a ``ValidationError`` naming ``key``;
- an item is embedded as LangGraph's stores embed it, one vector per text of its indexed
  fields (``fields``, or the ``index`` of the put; the whole value by default; a path
  that reaches several texts, ``tags[*]``, gives one each). The record's ``content`` is
  the first text, each further text is a memory of its own (``langgraph.vector`` and the
  item's path in its metadata), and a query search scores an item by its best text, as
  LangGraph's stores take the best of an item's vectors. Each content ends with a stamp
  of the item's path and the text's place in zero-width characters, which keeps two
  items with the same text apart (memoryd stores one memory per content) while the
  embedder, which drops them, sees the text alone, as LangGraph's stores embed it. An item
  put with ``index=False``, or whose fields hold no text, has nothing embedded and is
  left out of query searches (as LangGraph's ``PostgresStore`` leaves it), though
  ``get`` and ``search`` without a query still find it;
- the record's ``metadata`` keeps the value exactly (``langgraph.value``, as JSON text),
  the namespace and key, and one entry per namespace label (``langgraph.ns.0``,
  ``langgraph.ns.1``, ...), so a namespace prefix is an equality filter memoryd answers
  from its metadata index;
- every memory of an item is a ``decision``, which memoryd's maintenance never merges,
  summarizes, decays or evicts: an item stays as put until it is deleted, and deleting
  it forgets all its memories. What memoryd's store-time judging supersedes of other
  items (it reads "Ada lives in Lisbon" and "Ada lives in Porto" as one changed fact)
  is brought back at once.

``search`` without a query (None, or a blank one: LangGraph's stores read ``""`` as no
query) returns the prefix's items in the order of their memoryd keys (code point order
of that JSON text: stable from page to page), read only as far as the asked window
needs. With a query, memoryd's recall ranks the prefix's embedded texts;
``SearchItem.score`` is recall's score of the item's best text (relative to the query's
best candidate, not a cosine). Recall's top k depends on k (each of its retrievers reads
twice k candidates), so a query search asks recall for a fixed window of
``query_window`` texts, or the whole number of windows that covers the page, and pages
that one ranking: pages within a window never overlap and together are its ranking.
``filter`` compares value fields as LangGraph's ``InMemoryStore`` does (``$eq $ne $gt
$gte $lt $lte``, nested objects, exact lists), applied here to the prefix's items as
memoryd pages them in. ``list_namespaces`` lists the namespaces holding at least one
item (memoryd answers their distinct list, not the items). Ops of a batch run in order.
TTLs are not supported (``supports_ttl`` is False): memoryd's expiry is fixed at write
time and cannot be refreshed by reads. Where LangGraph's own stores answer otherwise, and
why: docs/frameworks.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any, TypeVar
from uuid import UUID

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
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
from memoryd.integrations._langgraph_match import matches, passes
from memoryd.types import Memory, Recalled

__all__ = ["MemorydStore"]

T = TypeVar("T")

MARK = "langgraph.item"  # an item's record
VECTOR = "langgraph.vector"  # a further text of an item, embedded on its own
PATH = "langgraph.path"
NAMESPACE = "langgraph.namespace"
KEY = "langgraph.key"
VALUE = "langgraph.value"
INDEXED = "langgraph.indexed"
LABEL = "langgraph.ns.{}"
# Maintenance never merges, summarizes, decays or evicts a decision: a store's items are
# records, kept as put until deleted.
KEPT_CATEGORY = "decision"
PAGE = 1000  # memoryd's largest page, and recall's largest limit
QUERY_WINDOW = 100  # texts a query search asks recall to rank, whatever its page
MAX_TEXT_CHARS = 4000  # an embedder reads a few hundred tokens: more text only costs
QUERY_REACH = 4  # with a filter, a query search ranks this many times the asked window
_CONTROL = re.compile(r"[\x7f-\x9f]")  # the control characters JSON leaves as they are
# Zero-width format characters: not whitespace (memoryd's folding keeps them), dropped by
# the embedder's normaliser (the vector is unchanged); four of them write two bits each.
_INVISIBLE = "\u200b\u200c\u200d\u2060"


class MemorydStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items are memories of one memoryd agent.

    ``fields``: the value fields embedded for ``search(query=...)``, one vector per text
    (LangGraph's ``IndexConfig["fields"]`` paths; default ``["$"]``, the whole value).
    ``query_window``: how many texts recall ranks for a query search, whatever page it
    asks (1 to 1000; pages reaching past it rank whole multiples of it)."""

    supports_ttl = False
    page_size = PAGE  # items (or namespaces) read from memoryd per call

    def __init__(self, client: MemoryClient, *, agent_id: str,
                 fields: Sequence[str] | None = None,
                 query_window: int = QUERY_WINDOW) -> None:
        self.client = client
        self.agent_id = check.agent_id(agent_id)
        self.fields = list(fields or ["$"])
        self.query_window = check.limit(query_window, "query_window", high=PAGE)

    # --- batches ------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order; consecutive puts of values go to memoryd as one batch."""
        results: list[Result] = []
        pending: dict[str, list[dict[str, Any]]] = {}  # item path -> its rows, last put wins
        for op in ops:
            if isinstance(op, PutOp) and op.value is not None:
                rows = self._item_rows(op)
                pending.pop(rows[0]["key"], None)
                pending[rows[0]["key"]] = rows
                results.append(None)
                if sum(map(len, pending.values())) >= PAGE:
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
            found = self._record(memory_key(op.namespace, op.key))
            return None if found is None else _item(found)
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            return self._list_namespaces(op)
        if isinstance(op, PutOp):
            self._delete(memory_key(op.namespace, op.key))
            return None
        raise ValidationError("op", f"unknown operation {type(op).__name__}")

    # --- writing ------------------------------------------------------------------------
    def _item_rows(self, op: PutOp) -> list[dict[str, Any]]:
        """The ``store_many`` items of a put, its record first (validated here, so errors
        name LangGraph's arguments)."""
        if op.ttl is not None:
            raise NotImplementedError("MemorydStore does not support TTLs; put ttl=None")
        path = memory_key(op.namespace, op.key)
        value = _checked_value(op.value)
        paths = [] if op.index is False else self.fields if op.index is None else op.index
        texts = item_texts(json.loads(value), paths)
        labels = {LABEL.format(i): label for i, label in enumerate(op.namespace)}
        record = {"content": _content(texts[0] if texts else "", path, 0), "key": path,
                  "category": KEPT_CATEGORY,
                  "metadata": {MARK: True, PATH: path, NAMESPACE: list(op.namespace),
                               KEY: op.key, VALUE: value, INDEXED: bool(texts), **labels}}
        further = [{"content": _content(text, path, place), "category": KEPT_CATEGORY,
                    "metadata": {VECTOR: True, PATH: path, INDEXED: True, **labels}}
                   for place, text in enumerate(texts[1:], start=1)]
        return [record, *further]

    def _flush(self, pending: dict[str, list[dict[str, Any]]]) -> None:
        """Store the pending items' memories, then forget the texts earlier puts of them
        embedded that these did not."""
        if not pending:
            return
        rows = [row for item in pending.values() for row in item]
        kept: set[UUID] = set()
        replaced: list[UUID] = []
        for start in range(0, len(rows), PAGE):
            stored = self.client.store_many(self.agent_id, rows[start:start + PAGE])
            assert isinstance(stored, list)  # waited for, so not a Pending
            kept |= {result.id for result in stored}
            replaced += [old for result in stored for old in result.superseded]
        self._restore_judged(replaced)
        self._drop_vectors(list(pending), keep=kept)
        pending.clear()

    def _restore_judged(self, replaced: Sequence[UUID]) -> None:
        """Bring back what memoryd's store-time judging superseded: it reads two items
        stating two values of one fact ("Ada lives in Lisbon", "... in Porto") as a
        changed fact, but a store's items are records, each kept until deleted. An
        item's own earlier version, which its key replaced, cannot come back while its
        key is current (``ValidationError``), and stays replaced."""
        for old in replaced:
            try:
                self.client.unsupersede(self.agent_id, old)
            except ValidationError:
                continue

    def _drop_vectors(self, paths: Sequence[str], *, keep: set[UUID]) -> None:
        """Forget the further texts of these items but ``keep``. Whether the store holds
        any such memory is asked first, once: most stores embed one text per item."""
        if not self.client.metadata_values(self.agent_id, VECTOR, metadata={VECTOR: True},
                                           limit=1):
            return
        for path in paths:
            for memory in list(self._memories_of(path, {VECTOR: True})):
                if memory.id not in keep:
                    self.client.forget(self.agent_id, memory.id)

    def _delete(self, path: str) -> None:
        """Forget every memory of the item, its record last: a delete cut short leaves
        the item, to be deleted again, not texts of an item that is gone."""
        memories = sorted(self._memories_of(path), key=lambda m: bool(m.metadata.get(MARK)))
        for memory in memories:
            self.client.forget(self.agent_id, memory.id)

    # --- reading ------------------------------------------------------------------------
    def _record(self, path: str) -> Memory | None:
        page = self.client.list(self.agent_id, limit=1, metadata={PATH: path, MARK: True})
        return page.items[0] if page.items else None

    def _memories_of(self, path: str, wanted: Mapping[str, Any] | None = None
                     ) -> Iterator[Memory]:
        """The item's memories (those passing ``wanted`` too), its record among them."""
        metadata = {PATH: path, **(wanted or {})}
        return _paged(lambda offset: self.client.list(
            self.agent_id, limit=self.page_size, offset=offset, metadata=metadata).items,
            self.page_size)

    def _search(self, op: SearchOp) -> list[SearchItem]:
        check.offset(op.offset)
        if isinstance(op.limit, bool) or not isinstance(op.limit, int) or op.limit < 0:
            raise ValidationError("limit", f"must be a non-negative integer, got {op.limit!r}")
        labels = _prefix_labels(op.namespace_prefix)
        if op.query is None or (isinstance(op.query, str) and not op.query.strip()):
            return self._listed({MARK: True, **labels}, op)
        if op.limit == 0:
            return []
        reach = (op.offset + op.limit) * (QUERY_REACH if op.filter else 1)
        hits = self.client.recall(self.agent_id, op.query,
                                  limit=query_window(reach, self.query_window),
                                  metadata={**labels, INDEXED: True})
        found = (item for item in self._best_per_item(hits) if passes(item, op.filter))
        return list(islice(found, op.offset, op.offset + op.limit))

    def _best_per_item(self, hits: Sequence[Recalled]) -> Iterator[SearchItem]:
        """Each item of the hits once, at its best text's place and score (recall answers
        best first, ties in a fixed order), its record read when a further text won."""
        seen: set[str] = set()
        for hit in hits:
            path = hit.memory.metadata.get(PATH)
            if not isinstance(path, str) or path in seen:
                continue
            seen.add(path)
            record = hit.memory if hit.memory.metadata.get(MARK) else self._record(path)
            if record is not None:  # None: the item was deleted since recall read it
                yield _found(record, hit.score)

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        prefixes = [c.path for c in conditions if c.match_type == "prefix"]
        # A prefix without wildcards narrows the read to its subtree.
        exact = next((p for p in prefixes if "*" not in p), ())
        wanted = {MARK: True, **_prefix_labels(exact)}
        found = {tuple(ns) for ns in self._namespaces(wanted)}
        chosen = [ns for ns in found if all(matches(c, ns) for c in conditions)]
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
        passing = (i for i in map(_found, self._pages(wanted)) if passes(i, op.filter))
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


def query_window(reach: int, base: int) -> int:
    """The recall limit of a query search whose page ends ``reach`` texts in: ``base``,
    or the whole multiple of it that covers ``reach`` (at most ``PAGE``). It depends on
    where a page ends, not on where it starts or how long it is, so the pages within one
    window page one ranking, and never overlap."""
    return min(PAGE, max(1, -(-reach // base)) * base)


def item_texts(value: Mapping[str, Any], paths: Sequence[str]) -> list[str]:
    """The texts LangGraph embeds of a value, one vector each: each path's text, or each
    of a path's texts when it reaches several (``tags[*]``). Blank ones have nothing to
    rank by and are left out."""
    return [text for path in paths for text in get_text_at_path(value, path)
            if text.strip()]


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
    integer as it was (jsonb would turn ``1.5e300`` into an integer). It must be a JSON
    object, as LangGraph's stores require, with string keys throughout: JSON would
    silently turn other keys into strings."""
    if not isinstance(value, Mapping):
        raise ValidationError("value", "must be a mapping (a JSON object)")
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


def _content(text: str, path: str, place: int) -> str:
    """A memory's content: one embedded text of an item, then a stamp of the item's path
    and the text's place, so no two memories' contents are the same (memoryd keeps one
    memory per content). The stamp is written in invisible format characters, which the
    embedder's normaliser drops: the text's vector is the text's alone, as LangGraph's
    stores embed it, and no query's words match the stamp."""
    digest = int.from_bytes(hashlib.sha256(f"{place}:{path}".encode()).digest()[:8], "big")
    stamp = "".join(_INVISIBLE[(digest >> (2 * i)) & 3] for i in range(32))
    head = text[:MAX_TEXT_CHARS].strip()
    return f"{head}\n{stamp}" if head else stamp


def _prefix_labels(prefix: Sequence[str]) -> dict[str, Any]:
    """The metadata equality filter of a namespace prefix (memoryd takes at most
    ``MAX_METADATA_FILTERS``; two are the adapter's own)."""
    if len(prefix) >= check.MAX_METADATA_FILTERS - 1:
        raise ValidationError("namespace_prefix", f"has {len(prefix)} labels, at most "
                                                  f"{check.MAX_METADATA_FILTERS - 2}")
    return {LABEL.format(i): label for i, label in enumerate(prefix)}


def _item(memory: Memory) -> Item:
    """The LangGraph item a record holds."""
    data = memory.metadata
    return Item(namespace=tuple(data[NAMESPACE]), key=data[KEY], value=json.loads(data[VALUE]),
                created_at=memory.created_at, updated_at=memory.updated_at)


def _found(memory: Memory, score: float | None = None) -> SearchItem:
    """The item as a search result (``score``: recall's, for a query search)."""
    item = _item(memory)
    return SearchItem(namespace=item.namespace, key=item.key, value=item.value,
                      created_at=item.created_at, updated_at=item.updated_at, score=score)
