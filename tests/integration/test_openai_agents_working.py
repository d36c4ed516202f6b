"""``MemorydWorkingSession``, the OpenAI Agents session's working-memory mode, against
the SDK's own ``SQLiteSession``: random calls (enough items to trim the thread, so some
are read back from long-term memory while others are on their way) get the same
answers, item for item; concurrent pops never share an item; ending the session puts
its items in long-term memory."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest
from agents import SQLiteSession
from agents.memory.session import Session

from memoryd.client import MemoryClient
from memoryd.integrations.openai_agents import MemorydWorkingSession
from tests.integration.test_openai_agents_session import ITEMS

pytestmark = pytest.mark.slow
LIMITS = [None, 1, 3, 30, 60, -1]


def _same(got: Any, want: Any) -> None:
    assert json.dumps(got) == json.dumps(want)


@pytest.mark.parametrize("seed", [1, 2])
def test_random_calls_answer_as_the_sdks_sqlite_session_does_across_trims(
        worker: object, client: MemoryClient, agent_id: str, seed: int) -> None:
    async def run() -> None:
        rng = random.Random(seed)
        ours = MemorydWorkingSession("chat", client=client, agent_id=agent_id)
        theirs = SQLiteSession("chat")
        assert isinstance(ours, Session)
        opening = [dict(rng.choice(ITEMS)) for _ in range(56)]  # past 50: a trim
        await ours.add_items(opening)
        await theirs.add_items(opening)
        trimmed = client.working(agent_id, "chat").promoted
        for step in range(40):
            op = rng.choices(["add", "get", "pop", "clear"], weights=[6, 4, 2, 0 if step < 30
                                                                      else 1])[0]
            if op == "add":
                items = [dict(rng.choice(ITEMS)) for _ in range(rng.randint(1, 9))]
                await ours.add_items(items)
                await theirs.add_items(items)
                trimmed = max(trimmed, client.working(agent_id, "chat").promoted)
            elif op == "get":
                limit = rng.choice(LIMITS)
                _same(await ours.get_items(limit), await theirs.get_items(limit))
            elif op == "pop":
                _same(await ours.pop_item(), await theirs.pop_item())
            else:
                await ours.clear_session()
                await theirs.clear_session()
        _same(await ours.get_items(), await theirs.get_items())
        assert trimmed > 0  # the thread was trimmed: long-term memory answered too

    asyncio.run(run())


def test_ending_the_session_promotes_its_items_and_they_still_read_back(
        worker: object, client: MemoryClient, agent_id: str) -> None:
    async def run() -> None:
        session = MemorydWorkingSession("chat", client=client, agent_id=agent_id)
        await session.add_items([ITEMS[1], ITEMS[4], ITEMS[5]])
        await session.end_session()
        assert client.working(agent_id, "chat").version == 0
        assert len(client.session_messages(agent_id, "chat")) == 3
        _same(await session.get_items(), [ITEMS[1], ITEMS[4], ITEMS[5]])
        await session.add_items([ITEMS[0]])
        _same(await session.get_items(2), [ITEMS[5], ITEMS[0]])

    asyncio.run(run())


def test_concurrent_pops_never_return_the_same_item(
        worker: object, client: MemoryClient, agent_id: str) -> None:
    async def run() -> None:
        session = MemorydWorkingSession("chat", client=client, agent_id=agent_id)
        items = [{"role": "user", "content": f"turn {n}"} for n in range(12)]
        await session.add_items(items)
        popped = await asyncio.gather(*(session.pop_item() for _ in range(12)))
        assert sorted(json.dumps(p) for p in popped) == sorted(json.dumps(i) for i in items)
        assert await session.get_items() == []

    asyncio.run(run())
