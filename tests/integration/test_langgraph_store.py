"""``MemorydStore`` as LangGraph uses it, against the real langgraph package and a real
worker: the same answers as LangGraph's own ``InMemoryStore`` over random sequences of
operations, a compiled graph whose node reads and writes through the store, semantic
search ranked by recall, and bad input refused by name."""

from __future__ import annotations

import asyncio
import math
import random
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.config import get_store
from langgraph.graph import START, StateGraph
from langgraph.store.base import BaseStore, Item, PutOp
from langgraph.store.memory import InMemoryStore

from memoryd.client import MemoryClient
from memoryd.errors import ValidationError
from memoryd.integrations.langgraph import MemorydStore, memory_key

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("worker")]

EXAMPLE = Path(__file__).parents[2] / "examples" / "langgraph_store.py"
NAMESPACES = [("a",), ("a", "b"), ("a", "c"), ("b",), ("a", "b", "c"), ("x y", "é"),
              ("a", "b", "d", "e")]
KEYS = ["k1", "k2", "k.3", "k 4", "ключ"]
FILTERS: list[dict[str, Any] | None] = [
    None, {"tag": "red"}, {"n": {"$gt": 2}}, {"n": {"$lte": 3, "$ne": 1}},
    {"nested": {"x": 1}}, {"list": [1, 2]}, {"n": {"$eq": 2}, "tag": "blue"},
    {"n": {"$gte": 1, "$lt": 4}}, {"missing": None}, {"tag": {"$ne": "red"}}]
SEQUENCES, OPS_PER_SEQUENCE = 12, 16


def _store(client: MemoryClient, **options: Any) -> MemorydStore:
    return MemorydStore(client, agent_id=f"langgraph-{uuid.uuid4()}", **options)


def _value(rng: random.Random) -> dict[str, Any]:
    value: dict[str, Any] = {"n": rng.randint(0, 5), "tag": rng.choice(["red", "blue"]),
                             "nested": {"x": rng.choice([1, 2])}}
    if rng.random() < 0.5:
        value["list"] = rng.choice([[1, 2], [2, 1], [1, 2, 3]])
    return value


def _shape(items: list[Any]) -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
    return [(item.namespace, item.key, item.value) for item in items]


def _memory_order(item: Item) -> str:
    return memory_key(item.namespace, item.key)


def _run_op(rng: random.Random, mine: MemorydStore, ref: InMemoryStore) -> None:
    """One random operation on both stores; their answers must agree."""
    namespace, key = rng.choice(NAMESPACES), rng.choice(KEYS)
    roll = rng.random()
    if roll < 0.4:
        value, index = _value(rng), rng.choice([None, False])
        mine.put(namespace, key, value, index=index)
        ref.put(namespace, key, value, index=index)
    elif roll < 0.55:
        mine.delete(namespace, key)
        ref.delete(namespace, key)
    elif roll < 0.7:
        found, expected = mine.get(namespace, key), ref.get(namespace, key)
        assert (found and _shape([found])) == (expected and _shape([expected]))
    elif roll < 0.9:
        prefix = namespace[:rng.randint(0, len(namespace))]
        wanted, limit, offset = rng.choice(FILTERS), rng.randint(1, 6), rng.randint(0, 3)
        everything = ref.search(prefix, filter=wanted, limit=1000)
        # LangGraph leaves the order of a search without a query to the store: memoryd's
        # is its keys' order.
        everything.sort(key=_memory_order)
        found = mine.search(prefix, filter=wanted, limit=limit, offset=offset)
        assert _shape(found) == _shape(everything[offset:offset + limit]), (prefix, wanted)
    else:
        _compare_namespaces(rng, mine, ref)


def _compare_namespaces(rng: random.Random, mine: MemorydStore, ref: InMemoryStore) -> None:
    # InMemoryStore also lists namespaces whose items were all deleted, or that a get
    # touched; memoryd lists those holding items (as LangGraph's PostgresStore does).
    for empty in [ns for ns, items in ref._data.items() if not items]:
        del ref._data[empty]
    options: dict[str, Any] = {
        "prefix": rng.choice([None, ("a",), ("a", "*"), ("*", "b"), ("x y",)]),
        "suffix": rng.choice([None, ("b",), ("*",), ("c",), ("b", "*")]),
        "max_depth": rng.choice([None, 1, 2]), "limit": rng.randint(1, 5),
        "offset": rng.randint(0, 2)}
    assert mine.list_namespaces(**options) == ref.list_namespaces(**options), options


def test_random_operations_answer_as_langgraphs_in_memory_store(
        client: MemoryClient) -> None:
    rng = random.Random(25)
    for sequence in range(SEQUENCES):
        mine, ref = _store(client), InMemoryStore()
        if sequence % 2:  # reads that take several pages of items and namespaces
            mine.page_size = 2
        for _ in range(OPS_PER_SEQUENCE):
            _run_op(rng, mine, ref)
        # The whole store, at the end of each sequence.
        everything = sorted(ref.search((), limit=1000), key=_memory_order)
        assert _shape(mine.search((), limit=1000)) == _shape(everything)


def test_a_batch_runs_its_ops_in_order_and_abatch_gives_the_same(
        client: MemoryClient) -> None:
    store = _store(client)
    results = store.batch([PutOp(("n",), "a", {"v": 1}), PutOp(("n",), "a", {"v": 2}),
                           PutOp(("n",), "b", {"v": 3}), PutOp(("n",), "b", None)])
    assert results == [None] * 4
    item = store.get(("n",), "a")
    assert item is not None and item.value == {"v": 2}
    assert store.get(("n",), "b") is None
    assert _shape(asyncio.run(store.asearch(("n",)))) == _shape(store.search(("n",)))
    assert asyncio.run(store.alist_namespaces()) == [("n",)]


class VisitState(TypedDict):
    user: str
    said: str
    heard: int


def _log_message(state: VisitState) -> dict[str, int]:
    """Writes what the user said and answers how many of their messages the store holds
    (through ``get_store``, LangGraph's other way to reach the graph's store)."""
    store = get_store()
    namespace = ("log", state["user"])
    store.put(namespace, f"m{len(store.search(namespace, limit=100))}", {"said": state["said"]})
    return {"heard": len(store.search(namespace, limit=100))}


def test_a_compiled_graph_reads_and_writes_through_the_store(client: MemoryClient) -> None:
    store = _store(client)
    builder = StateGraph(VisitState).add_node("log", _log_message)
    graph = builder.add_edge(START, "log").compile(store=store)
    assert graph.invoke({"user": "ada", "said": "hello", "heard": 0})["heard"] == 1
    assert graph.invoke({"user": "ada", "said": "again", "heard": 0})["heard"] == 2
    assert asyncio.run(graph.ainvoke({"user": "bob", "said": "hi", "heard": 0}))["heard"] == 1
    # A second store on the same agent, as another process would open it, sees them.
    again = MemorydStore(client, agent_id=store.agent_id)
    item = again.get(("log", "ada"), "m1")
    assert item is not None and item.value == {"said": "again"}
    assert again.list_namespaces(prefix=("log",)) == [("log", "ada"), ("log", "bob")]


def test_a_query_search_puts_the_relevant_item_first_within_the_prefix(
        client: MemoryClient) -> None:
    store = _store(client, fields=["text"])
    notes = {"n1": "Ada drinks green tea every morning", "n2": "Ada's cat is called Turing",
             "n3": "Ada rides a red bicycle to work"}
    for n, (key, text) in enumerate(notes.items(), start=1):
        store.put(("docs", "u1"), key, {"text": text, "n": n, "other": "not embedded"})
    store.put(("docs", "u1"), "n4", {"text": "Ada drinks tea, often green tea"}, index=False)
    store.put(("docs", "u2"), "n1", {"text": "Bob drinks green tea all day"})
    for query, best in (("which tea does Ada drink?", "n1"), ("Ada's pet", "n2"),
                        ("how does Ada get to the office?", "n3")):
        hits = store.search(("docs", "u1"), query=query)
        assert hits[0].key == best and hits[0].score is not None, query
        assert {h.key for h in hits} <= set(notes)
        assert all(h.namespace == ("docs", "u1") for h in hits)
    filtered = store.search(("docs",), query="which tea does Ada drink?",
                            filter={"n": {"$gt": 1}})
    assert filtered and {h.key for h in filtered} <= {"n2", "n3"}
    hidden = store.get(("docs", "u1"), "n4")
    assert hidden is not None and hidden.value["text"].startswith("Ada drinks tea")
    assert _shape(asyncio.run(store.asearch(("docs", "u2"), query="tea"))) == [
        (("docs", "u2"), "n1", {"text": "Bob drinks green tea all day"})]


def test_every_json_value_comes_back_exactly(client: MemoryClient) -> None:
    store = _store(client)
    value = {"text": "naïve café ☕ 𝄞", "big": 2**70, "neg": -7, "float": 0.1,
             "tiny": 1e-7, "huge": 1.5e300, "one": 1.0, "flag": False, "none": None,
             "empty": {}, "list": [], "deep": {"a": [{"b": [1, "2", None, True]}]},
             "": "empty key", "quote\"d": "back\\slash"}
    store.put(("values",), "all", value)
    item = store.get(("values",), "all")
    assert item is not None and item.value == value
    assert isinstance(item.value["one"], float) and isinstance(item.value["big"], int)
    store.put(("values",), "all", {"text": "naïve café ☕ 𝄞", "changed": True})
    replaced = store.get(("values",), "all")
    assert replaced is not None and replaced.value == {"text": "naïve café ☕ 𝄞",
                                                       "changed": True}
    assert replaced.created_at == item.created_at


@pytest.mark.parametrize(("namespace", "key", "value", "field"), [
    (("docs",), "k" * 600, {"a": 1}, "key"),
    (("d" * 300, "e" * 300), "k", {"a": 1}, "key"),
    (("docs",), "k", {"a": math.nan}, "value"),
    (("docs",), "k", {"a": {1: "int key"}}, "value.a"),
    (("docs",), "k", {"a": "nul \x00"}, "value"),
])
def test_bad_input_is_refused_by_name_and_nothing_is_written(
        client: MemoryClient, namespace: tuple[str, ...], key: str, value: dict[str, Any],
        field: str) -> None:
    store = _store(client)
    with pytest.raises(ValidationError) as refused:
        store.put(namespace, key, value)
    assert refused.value.field == field
    assert store.search((), limit=100) == []


def test_maintenance_never_merges_or_evicts_the_stores_items(client: MemoryClient) -> None:
    store = _store(client, fields=["text"])
    items = {("a",): {"k.3": {"text": "Same words"}, "k,3": {"text": "Same words"}},
             ("users", "ada"): {"visits": {"text": "The user visited the shop twice."}},
             ("users", "bob"): {"visits": {"text": "The user visited the shop twice!"}}}
    for namespace, entries in items.items():
        for key, value in entries.items():
            store.put(namespace, key, value)
    for job, params in (("deduplicate", {}), ("consolidate", {"merge_threshold": 0.5}),
                        ("evict", {"cap": 1})):
        client.run_job(job, agent_id=store.agent_id, params=params)
    kept = {(i.namespace, i.key): i.value for i in store.search((), limit=100)}
    assert kept == {(ns, k): v for ns, entries in items.items() for k, v in entries.items()}


def test_a_ttl_is_refused_as_unsupported(client: MemoryClient) -> None:
    store: BaseStore = _store(client)
    assert store.supports_ttl is False
    with pytest.raises(NotImplementedError):
        store.put(("docs",), "k", {"a": 1}, ttl=5)


def test_the_example_runs_against_the_worker(service_env: dict[str, str]) -> None:
    agent = f"langgraph-example-{uuid.uuid4()}"
    done = subprocess.run([sys.executable, str(EXAMPLE), agent], env=service_env,
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["visits: 2",
                                        "recalled: Ada prefers green tea over coffee"]
