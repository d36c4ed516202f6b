"""Bad input everywhere, fuzzed: every public ``MemoryStore`` method called with one
argument replaced by junk (wrong types, NUL bytes, huge values, nested garbage) either
succeeds (the junk happened to be valid) or raises memoryd's ``ValidationError`` naming
that argument, or ``NotFound``; never another exception, and a refused call writes
nothing. A real PostgreSQL; hypothesis draws the junk."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from sqlalchemy import text

from memoryd.errors import NotFound, ValidationError
from memoryd.memory.store import MemoryStore
from tests.support.fuzz import JUNK, TABLES

pytestmark = pytest.mark.slow

AGENT = "fuzz-agent"


def _counts(store: MemoryStore) -> dict[str, int]:
    with store.session() as session:
        return {t: int(session.execute(text(f"SELECT count(*) FROM {t}")).scalar_one())
                for t in TABLES}


# Each method with valid arguments; the fuzz replaces one of them at a time.
def _calls(memory_id: str) -> dict[str, tuple[Callable[..., Any], dict[str, Any]]]:
    return {
        "store": (MemoryStore.store, {"agent_id": AGENT, "content": "A valid memory.",
                                      "category": "fact", "importance": 0.5,
                                      "tags": ["t"], "session_id": "s", "key": "k",
                                      "metadata": {"a": 1}, "role": "user"}),
        "store_many": (MemoryStore.store_many, {"agent_id": AGENT,
                                                "items": [{"content": "Another one."}]}),
        "recall": (MemoryStore.recall, {"agent_id": AGENT, "query": "valid", "limit": 5,
                                        "category": "fact", "tags": ["t"],
                                        "session_id": "s", "mode": "fast"}),
        "get": (MemoryStore.get, {"agent_id": AGENT, "memory_id": memory_id}),
        "get_by_key": (MemoryStore.get_by_key, {"agent_id": AGENT, "key": "seed"}),
        "list": (MemoryStore.list, {"agent_id": AGENT, "category": "fact", "limit": 5,
                                    "offset": 0}),
        "related": (MemoryStore.related, {"agent_id": AGENT, "memory_id": memory_id,
                                          "limit": 3}),
        "context": (MemoryStore.context, {"agent_id": AGENT, "query": "valid", "limit": 3}),
        "forget": (MemoryStore.forget, {"agent_id": AGENT, "memory_id": memory_id}),
        "forget_agent": (MemoryStore.forget_agent, {"agent_id": "fuzz-nobody",
                                                    "batch_size": 10}),
        "kg_add": (MemoryStore.kg_add, {"agent_id": AGENT, "entity": {
            "id": "Alice", "type": "person", "attributes": {"a": 1},
            "relations": [{"target": "Bob", "type": "knows"}]}}),
        "kg_query": (MemoryStore.kg_query, {"agent_id": AGENT, "start_id": "Alice",
                                            "depth": 2}),
        "sessions": (MemoryStore.sessions, {"agent_id": AGENT}),
        "session_messages": (MemoryStore.session_messages, {"agent_id": AGENT,
                                                            "session_id": "s", "limit": 5}),
    }


CASES = [(method, arg) for method, (_, kwargs) in _calls("x").items() for arg in kwargs]


@pytest.mark.parametrize(("method", "argument"), CASES,
                         ids=[f"{m}-{a}" for m, a in CASES])
def test_junk_in_any_argument_is_refused_cleanly_or_accepted(
        store: MemoryStore, method: str, argument: str) -> None:
    seed = store.store(AGENT, "The seed memory.", key="seed", category="fact")
    store.kg_add(AGENT, {"id": "Alice", "type": "person"})
    fn, valid = _calls(str(seed.id))[method]

    @settings(max_examples=30, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(junk=JUNK)
    def check(junk: Any) -> None:
        before = _counts(store)
        try:
            fn(store, **{**valid, argument: junk})
        except ValidationError as exc:
            named = exc.field.split(".")[0].split("[")[0]
            assert named in (argument, "entity", "items", "fields", *valid), (
                f"{method}({argument}={junk!r:.80}) blamed {exc.field!r}")
            assert _counts(store) == before, f"{method} wrote despite refusing {junk!r:.80}"
        except NotFound:
            assert _counts(store) == before
        # Anything else (TypeError, DataError, ...) fails the test with its traceback.

    check()
