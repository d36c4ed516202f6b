"""``store`` fills category and importance from the classifier when they are not given."""

from __future__ import annotations

import pytest

from memoryd.memory import classify
from memoryd.memory.store import MemoryStore
from tests.support.classify_examples import EXAMPLES


def test_store_fills_category_and_importance_when_missing(store: MemoryStore) -> None:
    content = EXAMPLES["preference"][0]
    result = store.store("agent-classify", content, role="user")
    memory = store.get("agent-classify", result.id)
    assert memory.category == "preference"
    assert memory.importance == pytest.approx(
        classify.importance(content, "user", "preference"))

    for category, texts in EXAMPLES.items():
        stored = store.store("agent-classify-all", texts[1])
        assert store.get("agent-classify-all", stored.id).category == category


def test_store_keeps_explicit_category_and_importance(store: MemoryStore) -> None:
    content = EXAMPLES["decision"][0]
    result = store.store("agent-classify", content, role="user", category="event",
                         importance=0.05)
    memory = store.get("agent-classify", result.id)
    assert memory.category == "event"
    assert memory.importance == pytest.approx(0.05)

    zero = store.store("agent-classify", "A memory that does not matter at all.",
                       importance=0.0)
    assert store.get("agent-classify", zero.id).importance == 0.0

    only_category = store.store("agent-classify", EXAMPLES["task"][0], role="user",
                                category="fact")
    memory = store.get("agent-classify", only_category.id)
    assert memory.category == "fact"
    # importance is derived with the explicit category, not the guessed one
    assert memory.importance == pytest.approx(
        classify.importance(EXAMPLES["task"][0], "user", "fact"))
