"""Which embedders a store uses for what it stores and for recall queries."""

from __future__ import annotations

from typing import Any

from memoryd.memory.embeddings import get_embedder


def test_recall_queries_use_the_int8_rendition_by_default(pg_url: str) -> None:
    """Stored memories keep the wheel's model; queries go through the int8 rendition,
    whose vectors stay within a few percent cosine of it."""
    from memoryd.config import override_settings
    from memoryd.memory.embeddings import get_query_embedder
    from memoryd.memory.store import MemoryStore

    store = MemoryStore(pg_url)
    try:
        query, stored = store.query_embedder, store.embedder
        assert getattr(query, "int8", None) is True
        assert getattr(stored, "int8", None) is False
        text = "Which food allergies does the user have?"
        assert float(query.embed([text])[0] @ stored.embed([text])[0]) > 0.97
    finally:
        store.engine.dispose()
    with override_settings(query_embed_int8="false"):
        assert get_query_embedder() is MemoryStore(pg_url).embedder


def test_an_injected_embedder_also_embeds_queries_unless_one_is_given(
        store: object, pg_url: str) -> None:
    from memoryd.memory.store import MemoryStore

    calls: list[list[str]] = []

    class Recording:
        dim = 384
        name = "minilm"

        def embed(self, texts: Any) -> Any:
            calls.append(list(texts))
            return get_embedder().embed(texts)

    recording = Recording()
    assert MemoryStore(pg_url, embedder=recording).query_embedder is recording
    recalling = MemoryStore(pg_url, embedder=get_embedder(), query_embedder=recording)
    try:
        recalling.recall("agent-query-embedder", "What is the capital of Peru?")
        assert calls == [["What is the capital of Peru?"]]
    finally:
        recalling.engine.dispose()
