"""``MemorydSession`` against the OpenAI Agents SDK's own ``SQLiteSession``: random
sequences of the Session protocol's calls must get the same answers from both, item
for item (their JSON text included, so key order counts), through a real worker."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest
from agents import Agent, Model, ModelResponse, RunConfig, Runner, SQLiteSession, Usage
from agents.memory.session import Session
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from memoryd.client import MemoryClient
from memoryd.errors import ContentTooLarge, ValidationError
from memoryd.integrations.openai_agents import MemorydSession
from memoryd.memory.maintenance import run_job
from memoryd.memory.maintenance.compact_sessions import SUMMARY_PREFIX
from memoryd.memory.store import MemoryStore
from tests.support.maint import FakeLLM

pytestmark = pytest.mark.slow

# Items as the SDK writes them: repeated messages, content parts, tool calls and outputs,
# key orders, numbers and text JSON must carry exactly.
ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "yes"},
    {"role": "user", "content": "What is the weather in Zürich? ☀️"},
    {"content": "Reversed key order", "role": "assistant"},
    {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
     "content": [{"type": "output_text", "text": "It is 21 °C.", "annotations": []}]},
    {"type": "function_call", "call_id": "call_7", "name": "weather",
     "arguments": "{\"city\": \"Zürich\"}"},
    {"type": "function_call_output", "call_id": "call_7", "output": "21.5"},
    {"role": "developer", "content": "Be brief."},
    {"type": "reasoning", "id": "rs_1", "summary": []},
    {"role": "user", "content": [{"type": "input_text", "text": ""}]},
    {"role": "user", "content": "numbers", "extra": {"pi": 3.14159, "big": 2 ** 60,
                                                     "neg": -0.5, "none": None}},
]
LIMITS = [None, 0, 1, 2, 3, 7, -1]


def _same(got: list[Any] | Any, want: list[Any] | Any) -> None:
    assert json.dumps(got) == json.dumps(want)


async def _step(rng: random.Random, ours: MemorydSession, theirs: SQLiteSession) -> None:
    op = rng.choices(["add", "get", "pop", "clear"], weights=[5, 4, 2, 1])[0]
    if op == "add":
        items = [dict(rng.choice(ITEMS)) for _ in range(rng.randint(0, 3))]
        await ours.add_items(items)
        await theirs.add_items(items)
    elif op == "get":
        limit = rng.choice(LIMITS)
        _same(await ours.get_items(limit), await theirs.get_items(limit))
    elif op == "pop":
        _same(await ours.pop_item(), await theirs.pop_item())
    else:
        await ours.clear_session()
        await theirs.clear_session()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_calls_answer_as_the_sdks_sqlite_session_does(
        worker: object, client: MemoryClient, agent_id: str, seed: int) -> None:
    async def run() -> None:
        rng = random.Random(seed)
        ours = MemorydSession("chat", client=client, agent_id=agent_id)
        theirs = SQLiteSession("chat")
        for _ in range(24):
            await _step(rng, ours, theirs)
        _same(await ours.get_items(), await theirs.get_items())

    asyncio.run(run())


def test_it_is_a_session_of_the_sdk_and_sessions_do_not_see_each_other(
        worker: object, client: MemoryClient, agent_id: str) -> None:
    first = MemorydSession("one", client=client, agent_id=agent_id)
    second = MemorydSession("two", client=client, agent_id=agent_id)
    assert isinstance(first, Session)

    async def run() -> None:
        await first.add_items([ITEMS[0], ITEMS[1]])
        await second.add_items([ITEMS[0]])
        await second.clear_session()
        _same(await first.get_items(), [ITEMS[0], ITEMS[1]])
        assert await second.get_items() == []

    asyncio.run(run())


def test_the_items_are_messages_of_a_memoryd_session_that_recall_finds(
        worker: object, client: MemoryClient, agent_id: str) -> None:
    session = MemorydSession("trip", client=client, agent_id=agent_id)
    asyncio.run(session.add_items([{"role": "user", "content": "I am flying to Lisbon."},
                                   {"role": "assistant", "content": "Have a good flight."}]))
    messages = client.session_messages(agent_id, "trip")
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[0].content.startswith("I am flying to Lisbon.")
    assert client.recall(agent_id, "where is the user flying?", limit=1)[0].id == messages[0].id


def test_an_item_over_the_content_limit_or_not_json_is_refused_by_name_and_nothing_is_added(
        worker: object, client: MemoryClient, agent_id: str) -> None:
    session = MemorydSession("big", client=client, agent_id=agent_id)
    too_big = {"role": "user", "content": "x" * client.settings.max_content_bytes}
    with pytest.raises(ContentTooLarge) as refused:
        asyncio.run(session.add_items([ITEMS[0], too_big]))
    assert refused.value.field == "items[1]"
    with pytest.raises(ValidationError) as refused:
        asyncio.run(session.add_items([ITEMS[0], {"role": "user", "content": float("nan")}]))
    assert refused.value.field == "items[1]"
    assert asyncio.run(session.get_items()) == []


def test_compaction_folds_old_items_into_a_system_message_and_clear_removes_them_too(
        store: MemoryStore, worker: object, client: MemoryClient, agent_id: str) -> None:
    session = MemorydSession("long", client=client, agent_id=agent_id)
    said = [{"role": ("user", "assistant")[n % 2], "content": f"Turn {n} of the talk."}
            for n in range(6)]
    asyncio.run(session.add_items(said))
    record = run_job(store, "compact_sessions", agent_id=agent_id, llm=FakeLLM(),
                     params={"threshold": 5, "keep": 2})
    assert record.stats["compacted"] == 1
    items = asyncio.run(session.get_items())
    assert items[0]["role"] == "system"
    assert items[0]["content"].startswith(SUMMARY_PREFIX)
    _same(items[1:], said[-2:])
    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items()) == []
    assert client.list(agent_id).total == 0


class _EchoModel(Model):
    """The SDK's model seam answered locally: it records the input each turn gets and
    repeats the last user message (no LLM is called)."""

    def __init__(self) -> None:
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions: Any, input: Any, *args: Any,
                           **kwargs: Any) -> ModelResponse:
        self.inputs.append(json.loads(json.dumps(input)))
        said = [i["content"] for i in input if isinstance(i, dict) and i.get("role") == "user"]
        reply = ResponseOutputMessage(
            id=f"msg_{len(self.inputs)}", type="message", role="assistant", status="completed",
            content=[ResponseOutputText(type="output_text", text=f"You said: {said[-1]}",
                                        annotations=[])])
        return ModelResponse(output=[reply], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def test_the_sdks_runner_keeps_its_conversation_in_the_session(
        worker: object, client: MemoryClient, agent_id: str) -> None:
    model = _EchoModel()
    agent = Agent(name="echo", instructions="Repeat.", model=model)
    session = MemorydSession("runner", client=client, agent_id=agent_id)
    config = RunConfig(tracing_disabled=True)

    async def run() -> None:
        await Runner.run(agent, "My name is Ana.", session=session, run_config=config)
        second = await Runner.run(agent, "What is my name?", session=session,
                                  run_config=config)
        assert second.final_output == "You said: What is my name?"
        items = await session.get_items()
        assert [i.get("role") for i in items] == ["user", "assistant", "user", "assistant"]
        assert model.inputs[1][:2] == json.loads(json.dumps(items[:2]))

    asyncio.run(run())
