"""The turn's context: working memory and the three strategies' long-term memories,
deduplicated, fused and cut to the caller's budget; through the store and, with a live
thread in Redis, through the worker."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from memoryd.client import MemoryClient
from memoryd.errors import ValidationError
from memoryd.memory.store import MemoryStore
from memoryd.working.model import WorkingMemory, WorkingMessage

AGENT = "agent-turn"


def _thread(said: Sequence[tuple[str, str]] = (), **fields: object) -> WorkingMemory:
    now = datetime.now(UTC)
    messages = [WorkingMessage(seq=n + 1, role=role, content=content, at=now)
                for n, (role, content) in enumerate(said)]
    return WorkingMemory.model_validate({
        "agent_id": AGENT, "thread_id": "t1", "version": 3, "ttl_seconds": 3600,
        "messages": messages, **fields})


def test_a_memory_naming_the_inputs_entity_is_chosen_by_the_entity_strategy(
        store: MemoryStore) -> None:
    store.store(AGENT, "Ilvar keeps bees on the roof of the old mill.")
    store.store(AGENT, "The quarterly report is due on Friday.")
    found = store.turn_context(AGENT, "What should I bring when visiting Ilvar?")
    by_content = {item.memory.content: item.strategies for item in found.memories}
    assert "entities" in by_content["Ilvar keeps bees on the roof of the old mill."]


def test_the_threads_entities_bring_their_memories_even_when_the_input_names_none(
        store: MemoryStore) -> None:
    store.store(AGENT, "Marguerite prefers window seats on trains.")
    found = store.turn_context(AGENT, "Book the usual seat for her",
                               working=_thread(entities=["Marguerite"]))
    assert ["entities" in item.strategies for item in found.memories
            if item.memory.content.startswith("Marguerite")] == [True]


def test_a_memory_two_strategies_choose_appears_once_with_both(store: MemoryStore) -> None:
    store.store(AGENT, "Ilvar moved to Porto last spring.")
    found = store.turn_context(AGENT, "Where does Ilvar live?")
    assert [item.strategies for item in found.memories] == [["similar", "entities"]]


def test_the_threads_earlier_messages_come_by_the_recent_strategy(store: MemoryStore) -> None:
    store.store_many(AGENT, [{"content": f"Earlier turn {n} about the garden shed.",
                              "session_id": "t1", "role": "user"} for n in range(3)])
    store.store(AGENT, "Unrelated note about invoices.", session_id="other")
    found = store.turn_context(AGENT, "anything else?", thread_id="t1", limit=6)
    recent = {item.memory.content for item in found.memories if "recent" in item.strategies}
    assert recent == {f"Earlier turn {n} about the garden shed." for n in range(3)}


def test_the_block_shows_working_memory_first_then_messages_then_memories(
        store: MemoryStore) -> None:
    store.store(AGENT, "The user is allergic to peanuts.", category="fact")
    working = _thread(topic="dinner plans", entities=["Ana"], flags=["booked"],
                      variables={"guests": 4},
                      said=[("user", "Plan a dinner for Ana."), ("assistant", "Sure.")])
    block = store.turn_context(AGENT, "Any food allergies to consider?",
                               working=working).context
    lines = block.splitlines()
    assert lines[:6] == ["## Working memory", "Topic: dinner plans", "Entities: Ana",
                         "Flags: booked", "Variable guests: 4", "### Recent messages"]
    assert lines[6:8] == ["user: Plan a dinner for Ana.", "assistant: Sure."]
    assert lines[8] == "## Relevant memories"
    assert any("allergic to peanuts" in line for line in lines[9:])


@pytest.mark.parametrize("unit", ["chars", "tokens"])
def test_the_block_stays_within_the_budget_and_holds_memories_whole(
        store: MemoryStore, unit: str) -> None:
    store.store_many(AGENT, [{"content": f"Fact number {n} about the lighthouse keeper."}
                             for n in range(20)])
    budget = 200 if unit == "chars" else 50
    found = store.turn_context(AGENT, "lighthouse keeper", limit=20, budget=budget,
                               budget_unit=unit)
    assert found.used <= budget
    assert 0 < len(found.memories) < 20
    for item in found.memories:
        assert item.memory.content in found.context


def test_without_a_thread_or_budget_the_block_is_the_familiar_one(store: MemoryStore) -> None:
    store.store(AGENT, "The user prefers tea over coffee.", category="preference")
    assert store.context(AGENT, "tea or coffee?").splitlines()[:2] == [
        "## Relevant memories", "### Preference"]


@pytest.mark.parametrize(("options", "field"), [
    ({"budget": 0}, "budget"), ({"budget": "many"}, "budget"),
    ({"budget_unit": "words"}, "budget_unit"), ({"thread_id": " "}, "thread_id")])
def test_bad_context_options_are_refused_by_name(store: MemoryStore,
                                                 options: dict[str, object],
                                                 field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        store.turn_context(AGENT, "anything", **options)  # type: ignore[arg-type]
    assert refused.value.field == field


def test_the_worker_reads_the_live_thread_for_the_turns_context(
        client: MemoryClient, agent_id: str, worker: object) -> None:
    client.store(agent_id, "Ana is vegetarian.")
    client.update_working(agent_id, "dinner", topic="menu",
                          messages=[{"role": "user", "content": "What should we cook?"}])
    found = client.context(agent_id, "What can Ana eat?", thread_id="dinner",
                           structured=True)
    assert found.working is not None and found.working.topic == "menu"
    assert "Topic: menu" in found.context
    assert "user: What should we cook?" in found.context
    assert [m.memory.content for m in found.memories] == ["Ana is vegetarian."]
    assert client.context(agent_id, "What can Ana eat?", thread_id="dinner") == found.context
    with pytest.raises(ValidationError):
        client.context(agent_id, "x", budget=-1)
