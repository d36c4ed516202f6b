"""Boundary validation: every bad input raises ``ValidationError`` naming the
field, and nothing is written."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import text

from memoryd.config import override_settings
from memoryd.errors import ValidationError
from memoryd.memory.store import MemoryStore

AGENT = "agent-validation"
BAD_AGENT_IDS = ["", "   ", "a" * 256, "agent\x07bell", "agent\nnewline", "nul\x00",
                 "lone\ud800surrogate", None, 42]


def _counts(store: MemoryStore) -> tuple[int, ...]:
    with store.session() as session:
        return tuple(
            int(session.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())
            for table in ("memories", "sessions", "kg_entities", "kg_relations"))


@pytest.fixture
def seeded(store: MemoryStore) -> Iterator[MemoryStore]:
    """One memory stored up front; the tables must hold exactly that afterwards."""
    store.store(AGENT, "A memory that exists before the bad call.", session_id="s",
                key="existing")
    store.kg_add(AGENT, {"id": "e", "relations": [{"target": "f", "type": "r"}]})
    before = _counts(store)
    yield store
    assert _counts(store) == before


def _rejects(call: Callable[..., Any], field: str) -> ValidationError:
    """``call`` raises ValidationError naming ``field`` (its defaults hold the bad value)."""
    bad = call.__defaults__
    try:
        call()
    except ValidationError as exc:
        assert exc.field == field, (bad, str(exc))
        return exc
    pytest.fail(f"no ValidationError for {bad!r} (expected field {field!r})")


# --- agent_id ---------------------------------------------------------------------------

AGENT_CALLS: dict[str, Callable[[MemoryStore, Any], Any]] = {
    "store": lambda s, a: s.store(a, "Valid content."),
    "store_many": lambda s, a: s.store_many(a, [{"content": "Valid content."}]),
    "recall": lambda s, a: s.recall(a, "query"),
    "context": lambda s, a: s.context(a, "query"),
    "get": lambda s, a: s.get(a, "00000000-0000-0000-0000-000000000000"),
    "get_by_key": lambda s, a: s.get_by_key(a, "existing"),
    "list": lambda s, a: s.list(a),
    "related": lambda s, a: s.related(a, "00000000-0000-0000-0000-000000000000"),
    "forget": lambda s, a: s.forget(a, "00000000-0000-0000-0000-000000000000"),
    "forget_agent": lambda s, a: s.forget_agent(a),
    "kg_add": lambda s, a: s.kg_add(a, {"id": "x"}),
    "kg_query": lambda s, a: s.kg_query(a, "e"),
    "sessions": lambda s, a: s.sessions(a),
    "session_messages": lambda s, a: s.session_messages(a, "s"),
}


@pytest.mark.parametrize("call", sorted(AGENT_CALLS))
def test_bad_agent_id_is_rejected_everywhere(seeded: MemoryStore, call: str) -> None:
    for bad in BAD_AGENT_IDS:
        _rejects(lambda bad=bad: AGENT_CALLS[call](seeded, bad), "agent_id")


def test_longest_agent_id_is_accepted(store: MemoryStore) -> None:
    agent = "a" * 255
    assert store.store(agent, "Fits exactly.").stored
    assert store.list(agent).total == 1


# --- content ------------------------------------------------------------------------------


BAD_CONTENT = ["", "   \n\t ", "before\x00after", "lone \ud800 surrogate", 42, None]


def test_bad_content_is_rejected(seeded: MemoryStore) -> None:
    for content in BAD_CONTENT:
        _rejects(lambda c=content: seeded.store(AGENT, c), "content")
        _rejects(lambda c=content: seeded.store_many(AGENT, [{"content": "fine"}, {"content": c}]),
                 "items[1].content")


def test_content_over_the_size_limit_is_rejected(seeded: MemoryStore, pg_url: str) -> None:
    with override_settings(max_content_bytes="100"):
        small = MemoryStore(pg_url)
    try:
        _rejects(lambda: small.store(AGENT, "x" * 101), "content")
        _rejects(lambda: small.store(AGENT, "é" * 51), "content")  # 102 bytes, 51 chars
        _rejects(lambda: small.store_many(AGENT, [{"content": "x" * 101}]), "items[0].content")
    finally:
        small.engine.dispose()


def test_content_at_the_size_limit_is_accepted(store: MemoryStore, pg_url: str) -> None:
    with override_settings(max_content_bytes="100"):
        small = MemoryStore(pg_url)
    try:
        assert small.store(AGENT, "é" * 50).stored  # exactly 100 bytes
    finally:
        small.engine.dispose()


# --- other store fields -----------------------------------------------------------------------


BAD_FIELDS: list[tuple[dict[str, Any], str]] = [
    ({"role": "admin"}, "role"),
    ({"role": "USER"}, "role"),
    ({"category": "gossip"}, "category"),
    ({"category": ""}, "category"),
    ({"importance": 1.5}, "importance"),
    ({"importance": -0.1}, "importance"),
    ({"importance": math.nan}, "importance"),
    ({"importance": "high"}, "importance"),
    ({"importance": True}, "importance"),
    ({"key": "k" * 513}, "key"),
    ({"key": ""}, "key"),
    ({"key": "k\udc00"}, "key"),
    ({"session_id": "s\x1bx"}, "session_id"),
    ({"source": "\ud83d"}, "source"),
    ({"tags": "single-string"}, "tags"),
    ({"tags": ["ok", ""]}, "tags"),
    ({"tags": [f"t{i}" for i in range(65)]}, "tags"),
    ({"tags": ["t" * 129]}, "tags"),
    ({"tags": ["\ud800"]}, "tags"),
    ({"metadata": ["not", "a", "mapping"]}, "metadata"),
    ({"metadata": {"x": math.inf}}, "metadata"),
    ({"metadata": {"x": "nul\x00"}}, "metadata"),
    ({"metadata": {"x": object()}}, "metadata"),
    ({"metadata": {"x": ["lone \ud800"]}}, "metadata"),
    ({"expires_at": datetime(2030, 1, 1)}, "expires_at"),  # naive on purpose
    ({"expires_at": "next tuesday"}, "expires_at"),
    ({"created_at": 1700000000}, "created_at"),
    ({"colour": "blue"}, "colour"),
]


def test_bad_store_fields_are_rejected(seeded: MemoryStore) -> None:
    for fields, field in BAD_FIELDS:
        _rejects(lambda f=fields: seeded.store(AGENT, "Otherwise valid content.", **f), field)
        _rejects(lambda f=fields: seeded.store_many(AGENT, [{"content": "Valid.", **f}]),
                 f"items[0].{field}")


def test_bad_batches_are_rejected(seeded: MemoryStore) -> None:
    for items, field in [([], "items"), ("a string", "items"), (None, "items"),
                         (["a string item"], "items[0]"),
                         ([{"content": "ok"}] * 1001, "items")]:
        _rejects(lambda i=items: seeded.store_many(AGENT, i), field)


# --- reading arguments ------------------------------------------------------------------------


def test_bad_limit_is_rejected(seeded: MemoryStore) -> None:
    memory_id = seeded.list(AGENT).items[0].id
    for limit in [0, 1001, -1, True, "10", 2.5, None]:
        _rejects(lambda n=limit: seeded.recall(AGENT, "query", limit=n), "limit")
        _rejects(lambda n=limit: seeded.list(AGENT, limit=n), "limit")
        _rejects(lambda n=limit: seeded.related(AGENT, memory_id, limit=n), "limit")
        _rejects(lambda n=limit: seeded.context(AGENT, "query", limit=n), "limit")


def test_limit_bounds_are_accepted(seeded: MemoryStore) -> None:
    assert len(seeded.recall(AGENT, "memory", limit=1)) == 1
    assert seeded.list(AGENT, limit=1000).total == 1


def test_bad_offset_is_rejected(seeded: MemoryStore) -> None:
    for offset in [-1, True, "0", None]:
        _rejects(lambda o=offset: seeded.list(AGENT, offset=o), "offset")


def test_unknown_category_is_rejected_when_reading(seeded: MemoryStore) -> None:
    _rejects(lambda: seeded.recall(AGENT, "query", category="gossip"), "category")
    _rejects(lambda: seeded.list(AGENT, category="gossip"), "category")


def test_bad_query_is_rejected(seeded: MemoryStore) -> None:
    for query in ["", "  ", "a\x00b", "q\ud800", "q" * 8193, None]:
        _rejects(lambda q=query: seeded.recall(AGENT, q), "query")
        _rejects(lambda q=query: seeded.context(AGENT, q), "query")


def test_bad_mode_tags_and_session_are_rejected(seeded: MemoryStore) -> None:
    _rejects(lambda: seeded.recall(AGENT, "query", mode="slow"), "mode")  # type: ignore[arg-type]
    _rejects(lambda: seeded.recall(AGENT, "query", tags="one-string"), "tags")
    _rejects(lambda: seeded.recall(AGENT, "query", session_id=""), "session_id")


def test_bad_memory_id_is_rejected(seeded: MemoryStore) -> None:
    for memory_id in ["not-a-uuid", "", "1234", 42, None,
                      "00000000-0000-0000-0000-00000000000g"]:
        _rejects(lambda m=memory_id: seeded.get(AGENT, m), "memory_id")
        _rejects(lambda m=memory_id: seeded.forget(AGENT, m), "memory_id")
        _rejects(lambda m=memory_id: seeded.related(AGENT, m), "memory_id")


def test_bad_key_lookup_is_rejected(seeded: MemoryStore) -> None:
    for key in ["", "k" * 513, "bad\x07key", "k\udfff", 42]:
        _rejects(lambda k=key: seeded.get_by_key(AGENT, k), "key")


def test_bad_kg_start_is_rejected(seeded: MemoryStore) -> None:
    for start in ["", "s" * 513, "bad\x00id", 7]:
        _rejects(lambda s=start: seeded.kg_query(AGENT, s), "start_id")


def test_validation_error_carries_field_and_message() -> None:
    error = ValidationError("content", "must be a non-empty string")
    assert error.field == "content"
    assert "content" in str(error) and "non-empty" in str(error)
    assert isinstance(error, ValueError)


@pytest.mark.timeout(30)  # batch_size=0 used to loop forever
def test_bad_forget_agent_batch_size_is_rejected(seeded: MemoryStore) -> None:
    for batch_size in [0, -1, True, "10", None]:
        _rejects(lambda b=batch_size: seeded.forget_agent(AGENT, batch_size=b), "batch_size")


def test_valid_unicode_is_accepted(store: MemoryStore) -> None:
    agent = "agent-ünïcødé-🙂"
    content = "Emoji 🙂, CJK 記憶, RTL שלום, combining e\u0301, zero-width \u200b joiner."
    result = store.store(agent, content, key="ключ-🔑", tags=["タグ"],
                         metadata={"note": "🙂 ok"})
    memory = store.get(agent, result.id)
    assert memory.content == content
    assert memory.metadata == {"note": "🙂 ok"}
    assert store.recall(agent, "記憶 🙂")[0].id == result.id
