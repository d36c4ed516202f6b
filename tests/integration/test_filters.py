"""Time and metadata filters on recall and list: ``since`` / ``until`` on ``created_at``
and equality on metadata keys, in the store, through a worker, the CLI and HTTP; refused
by name when malformed; and a filter that leaves few of a large agent's memories is
searched exactly, through its index, instead of walking the HNSW graph."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from memoryd.errors import ValidationError
from memoryd.memory import recall
from memoryd.memory.store import MemoryStore
from tests.support.cli import as_json, memoryd
from tests.support.gateway import bearer, make_key

pytestmark = pytest.mark.slow

NOW = datetime.now(UTC).replace(microsecond=0)


def _seed(store: MemoryStore, agent: str) -> None:
    store.store_many(agent, [
        {"content": "The Atlas launch slipped to Friday.", "created_at": NOW - timedelta(days=1),
         "metadata": {"project": "atlas", "priority": 1}},
        {"content": "The Atlas budget was approved.", "created_at": NOW - timedelta(days=10),
         "metadata": {"project": "atlas", "priority": 2}},
        {"content": "The Zephyr launch is on track.", "created_at": NOW - timedelta(days=2),
         "metadata": {"project": "zephyr"}},
        {"content": "Launch retrospectives happen on Mondays.",
         "created_at": NOW - timedelta(days=40)},
    ])


def _contents(hits: list[Any]) -> set[str]:
    return {h.memory.content for h in hits}


def test_recall_and_list_keep_only_what_the_time_and_metadata_filters_allow(
        store: MemoryStore) -> None:
    agent = f"filters-{uuid.uuid4()}"
    _seed(store, agent)
    week = NOW - timedelta(days=7)
    assert _contents(store.recall(agent, "launch", since=week)) == {
        "The Atlas launch slipped to Friday.", "The Zephyr launch is on track."}
    assert _contents(store.recall(agent, "launch", until=week)) == {
        "The Atlas budget was approved.", "Launch retrospectives happen on Mondays."}
    assert _contents(store.recall(agent, "launch", metadata={"project": "atlas"})) == {
        "The Atlas launch slipped to Friday.", "The Atlas budget was approved."}
    assert _contents(store.recall(agent, "launch", since=week.isoformat(),
                                  metadata={"project": "atlas", "priority": 1})) == {
        "The Atlas launch slipped to Friday."}
    assert store.recall(agent, "launch", metadata={"project": "nope"}) == []
    page = store.list(agent, since=NOW - timedelta(days=15), until=NOW - timedelta(days=1))
    assert page.total == 2 and {m.content for m in page.items} == {
        "The Atlas budget was approved.", "The Zephyr launch is on track."}
    assert store.list(agent, metadata={"project": "zephyr"}).total == 1


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"since": "2026-11-01T00:00:00"}, "since"),  # no timezone
    ({"since": "last week"}, "since"),
    ({"until": 5}, "until"),
    ({"since": NOW, "until": NOW - timedelta(days=1)}, "until"),
    ({"metadata": ["project"]}, "metadata"),
    ({"metadata": {"project": {"nested": 1}}}, "metadata.project"),
    ({"metadata": {"": 1}}, "metadata"),
    ({"metadata": {"k": "a\x00b"}}, "metadata"),
])
def test_a_malformed_filter_is_refused_by_name(store: MemoryStore, kwargs: dict[str, Any],
                                               field: str) -> None:
    for call in (lambda: store.recall("filters-x", "q", **kwargs),
                 lambda: store.list("filters-x", **kwargs)):
        with pytest.raises(ValidationError) as refused:
            call()
        assert refused.value.field == field


def test_metadata_values_names_each_distinct_value_of_a_key_once(store: MemoryStore) -> None:
    agent = f"filters-{uuid.uuid4()}"
    _seed(store, agent)
    store.store(agent, "The Zephyr team ships in pairs.",
                metadata={"project": ["zephyr", 2], "priority": 1})
    store.store(f"filters-{uuid.uuid4()}", "Another agent's Orion.", metadata={"project": "orion"})
    # jsonb order: strings before arrays.
    assert store.metadata_values(agent, "project") == ["atlas", "zephyr", ["zephyr", 2]]
    assert store.metadata_values(agent, "project", metadata={"priority": 1}) == [
        "atlas", ["zephyr", 2]]
    assert store.metadata_values(agent, "project", limit=1, offset=1) == ["zephyr"]
    assert store.metadata_values(agent, "absent") == []
    for field in ("", "a\x00b", 7):
        with pytest.raises(ValidationError) as refused:
            store.metadata_values(agent, field)  # type: ignore[arg-type]
        assert refused.value.field == "field"


def test_a_narrow_filter_on_a_large_agent_is_searched_exactly(store: MemoryStore) -> None:
    agent = f"filters-large-{uuid.uuid4()}"
    store.store_many(agent, [{"content": f"Note {i} about the harbour.",
                              "created_at": NOW - timedelta(days=i)} for i in range(40)])
    sizes = recall.AgentSizeCache(threshold=20)  # 40 memories: a large agent here
    with store.session() as session:
        def search(**filters: Any) -> str:
            built = recall.plan(session, sizes, agent, "harbour", recall.Filters(**filters),
                                30, ef_search=40)
            return str(built.vector_search)

        assert search() == "hnsw"
        assert search(since=NOW - timedelta(days=5)) == "exact"  # 6 memories
        assert search(since=NOW - timedelta(days=30)) == "hnsw"  # 31 memories
        assert search(metadata='{"missing": true}') == "exact"


def test_filters_through_a_worker_the_cli_and_http(
        client: Any, store: MemoryStore, service_env: dict[str, str],
        http: httpx.Client) -> None:
    agent = f"filters-paths-{uuid.uuid4()}"
    _seed(store, agent)
    hits = client.recall(agent, "launch", since=NOW - timedelta(days=7),
                         metadata={"project": "atlas"})
    assert _contents(hits) == {"The Atlas launch slipped to Friday."}
    assert client.list(agent, until=NOW - timedelta(days=30)).total == 1

    found = as_json(memoryd(service_env, "recall", agent, "launch", "--since", "7d",
                            "--where", "project=zephyr", "--json"))
    assert [h["memory"]["content"] for h in found] == ["The Zephyr launch is on track."]
    listed = as_json(memoryd(service_env, "list", agent, "--until", "30d", "--json"))
    assert [m["content"] for m in listed["items"]] == [
        "Launch retrospectives happen on Mondays."]

    auth = bearer(make_key(store, agents=(agent,)))
    answer = http.post(f"/v1/agents/{agent}/recall", headers=auth, json={
        "query": "launch", "until": (NOW - timedelta(days=5)).isoformat(),
        "metadata": {"project": "atlas"}})
    assert answer.status_code == 200, answer.text
    assert [h["memory"]["content"] for h in answer.json()] == ["The Atlas budget was approved."]
    page = http.get(f"/v1/agents/{agent}/memories", headers=auth,
                    params={"since": (NOW - timedelta(days=3)).isoformat()})
    assert page.json()["total"] == 2
    refused = http.post(f"/v1/agents/{agent}/recall", headers=auth,
                        json={"query": "launch", "since": "yesterday"})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "since"


def test_a_named_date_lifts_the_memories_of_that_period_when_the_boost_is_on(
        store: MemoryStore) -> None:
    agent = f"filters-dates-{uuid.uuid4()}"
    store.store_many(agent, [
        {"content": "Melanie painted a sunset with her kids.",
         "created_at": datetime(2023, 5, 8, 14, 0, tzinfo=UTC)},
        {"content": "Melanie painted a lake with her kids.",
         "created_at": datetime(2023, 10, 13, 18, 0, tzinfo=UTC)},
    ])
    question = "What did Melanie paint with her kids in October 2023?"
    # Shares the test store's engine (so it is not closed here).
    boosted = MemoryStore(engine=store.engine, settings=store.settings.model_copy(
        update={"recall_time_boost": 0.5}))
    hits = boosted.recall(agent, question, limit=2)
    assert hits[0].memory.content == "Melanie painted a lake with her kids."
    assert hits[0].score - hits[1].score >= 0.4
    unboosted = MemoryStore(engine=store.engine, settings=store.settings.model_copy(
        update={"recall_time_boost": 0.0}))
    plain = {h.memory.content: h.score for h in unboosted.recall(agent, question, limit=2)}
    lifted = {h.memory.content: h.score for h in hits}
    assert lifted["Melanie painted a lake with her kids."] == pytest.approx(
        plain["Melanie painted a lake with her kids."] + 0.5, abs=1e-5)
    assert lifted["Melanie painted a sunset with her kids."] == pytest.approx(
        plain["Melanie painted a sunset with her kids."], abs=1e-5)
