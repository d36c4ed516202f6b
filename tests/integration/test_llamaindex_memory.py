"""LlamaIndex over memoryd: ``MemorydChatStore`` against LlamaIndex's own
``SimpleChatStore`` (random sequences of the chat store's calls get the same answers from
both, message for message), ``ChatMemoryBuffer`` over either, and ``MemorydMemoryBlock``
inside LlamaIndex's ``Memory`` beside its ``StaticMemoryBlock``, through the real Redis
and worker. No LLM is called; tokens are counted by words (no tokenizer is loaded)."""

from __future__ import annotations

import asyncio
import random
import threading
import uuid
from typing import Any

import pytest
from llama_index.core.base.llms.types import ImageBlock, TextBlock, ToolCallBlock
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import ChatMemoryBuffer, Memory, StaticMemoryBlock
from llama_index.core.storage.chat_store import BaseChatStore, SimpleChatStore
from sqlalchemy.ext.asyncio import create_async_engine

from memoryd.client import MemoryClient
from memoryd.errors import ValidationError
from memoryd.integrations.llamaindex import MemorydChatStore, MemorydMemoryBlock
from tests.support.flower import until

MESSAGES = [
    ChatMessage(role="user", content="yes"),
    ChatMessage(role="assistant", content="Olá, tudo bem? ☀️"),
    ChatMessage(role="system", content="Be brief."),
    ChatMessage(role="developer", content="Use metric units."),
    ChatMessage(role="user", blocks=[TextBlock(text="Look:"),
                                     ImageBlock(url="https://example.com/a.png")]),
    ChatMessage(role="assistant", blocks=[ToolCallBlock(
        tool_call_id="c1", tool_name="weather", tool_kwargs={"city": "Porto"})]),
    ChatMessage(role="tool", content="21 °C", additional_kwargs={"tool_call_id": "c1"}),
    ChatMessage(role="chatbot", content="two\nlines"),
]
KEYS = ["k1", "k2", "k3"]


def _words(text: str) -> list[str]:
    return text.split()


def _ours(client: MemoryClient, agent: str | None = None) -> MemorydChatStore:
    return MemorydChatStore(client=client, agent_id=agent or f"agent-{uuid.uuid4()}")


def _step(rng: random.Random, ours: BaseChatStore, theirs: SimpleChatStore) -> None:
    """One call on both stores, the same answer from each; only calls 0.14.25's
    SimpleChatStore answers without an IndexError (the rest: test_out_of_range_...)."""
    key = rng.choice(KEYS)
    held = theirs.get_messages(key)
    op = rng.choices(["add", "insert", "extend", "replace", "get", "delete", "past",
                      "last", "clear", "keys"], weights=[6, 1, 2, 1, 3, 2, 1, 1, 1, 1])[0]
    if op in ("add", "insert") and len(held) < 40:
        idx = rng.randint(-len(held), len(held)) if op == "insert" else None
        message = rng.choice(MESSAGES).model_copy()
        ours.add_message(key, message, idx=idx)  # type: ignore[call-arg]
        theirs.add_message(key, message.model_copy(), idx=idx)
    elif op in ("extend", "replace"):
        start = list(held) if op == "extend" else []
        messages = start + rng.sample(MESSAGES, rng.randint(0, 3))
        ours.set_messages(key, list(messages))
        theirs.set_messages(key, list(messages))
    elif op == "delete" and held:
        idx = rng.randint(-len(held), len(held) - 1)
        assert ours.delete_message(key, idx) == theirs.delete_message(key, idx)
    elif op == "past":
        assert ours.delete_message(key, len(held)) == theirs.delete_message(key, len(held))
    elif op == "last" and (held or key not in theirs.store):
        assert ours.delete_last_message(key) == theirs.delete_last_message(key)
    elif op == "clear":
        assert ours.delete_messages(key) == theirs.delete_messages(key)
    elif op == "keys":
        assert sorted(ours.get_keys()) == sorted(theirs.get_keys())
    assert ours.get_messages(key) == theirs.get_messages(key)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_random_calls_get_the_same_answers_as_simple_chat_store(
        worker: object, client: MemoryClient, seed: int) -> None:
    rng, ours, theirs = random.Random(seed), _ours(client), SimpleChatStore()
    for _ in range(40):
        _step(rng, ours, theirs)
    for key in KEYS:
        assert ours.get_messages(key) == theirs.get_messages(key)
    assert sorted(ours.get_keys()) == sorted(theirs.get_keys())


def test_the_async_twins_answer_as_simple_chat_store_does(client: MemoryClient) -> None:
    async def both(store: BaseChatStore) -> list[Any]:
        await store.aset_messages("k", MESSAGES[:3])
        await store.async_add_message("k", MESSAGES[5])
        answers: list[Any] = [await store.adelete_message("k", 0),
                              await store.adelete_last_message("k"),
                              await store.aget_messages("k"), await store.aget_keys()]
        return answers

    assert asyncio.run(both(_ours(client))) == asyncio.run(both(SimpleChatStore()))


def test_out_of_range_deletes_answer_none_as_llamaindex_now_expects(
        client: MemoryClient) -> None:
    store = _ours(client)
    assert store.delete_last_message("k") is None and store.delete_message("k", 0) is None
    store.add_message("k", MESSAGES[0])
    assert store.delete_message("k", -2) is None and store.delete_message("k", 1) is None
    assert store.delete_last_message("k") == MESSAGES[0]
    assert store.delete_last_message("k") is None  # an empty history that still exists
    assert store.get_keys() == ["k"]


def test_concurrent_appends_to_one_thread_all_land(client: MemoryClient) -> None:
    store, start = _ours(client), threading.Barrier(8)

    def add(i: int) -> None:
        start.wait()
        store.add_message("k", ChatMessage(role="user", content=f"message {i}"))

    threads = [threading.Thread(target=add, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(m.content or "" for m in store.get_messages("k")) == [
        f"message {i}" for i in range(8)]


def test_a_plain_message_is_stored_as_its_text_and_the_rest_whole(client: MemoryClient,
                                                                   agent_id: str) -> None:
    store = _ours(client, agent_id)
    store.set_messages("k", MESSAGES[:2] + MESSAGES[5:6])
    held = client.working(agent_id, "k").messages
    assert [(m.role, m.content, m.metadata is None) for m in held[:2]] == [
        ("user", "yes", True), ("assistant", "Olá, tudo bem? ☀️", True)]
    assert held[2].metadata is not None and '"tool_name": "weather"' in held[2].content
    client.update_working(agent_id, "k", messages=[{"role": "user", "content": "via MCP"}])
    assert store.get_messages("k")[-1] == ChatMessage(role="user", content="via MCP")


def test_a_refused_rewrite_leaves_the_thread_as_it_was(client: MemoryClient) -> None:
    store = _ours(client)
    store.set_messages("k", MESSAGES[:2])
    huge = ChatMessage(role="user", content="x" * (client.settings.max_content_bytes + 1))
    with pytest.raises(ValidationError) as refused:
        store.set_messages("k", [MESSAGES[3], huge])
    assert refused.value.field == "messages[1].content"
    assert store.get_messages("k") == MESSAGES[:2]


def test_a_long_thread_keeps_its_first_and_last_messages(client: MemoryClient) -> None:
    """Working memory's window, where SimpleChatStore keeps every message."""
    store, said = _ours(client), [ChatMessage(role="user", content=f"m{i}") for i in range(55)]
    store.set_messages("k", said)
    assert store.get_messages("k") == said[:5] + said[-40:]


@pytest.mark.slow
def test_what_a_rewrite_or_a_delete_takes_out_goes_to_long_term_memory(
        worker: object, client: MemoryClient, agent_id: str) -> None:
    store = _ours(client, agent_id)
    store.set_messages("k", [ChatMessage(role="user", content=c) for c in ("a", "b", "c")])
    assert store.delete_message("k", 1) == ChatMessage(role="user", content="b")
    assert [m.content for m in store.get_messages("k")] == ["a", "c"]
    until(lambda: "b" in [m.content for m in client.session_messages(agent_id, "k")],
          "the deleted message in long-term memory", timeout=60)
    assert [m.content for m in store.delete_messages("k") or []] == ["a", "c"]
    assert store.get_keys() == [] and store.get_messages("k") == []
    assert {m.content for m in client.session_messages(agent_id, "k")} == {"a", "b", "c"}


@pytest.mark.slow
def test_chat_memory_buffer_answers_the_same_over_either_store(worker: object,
                                                               client: MemoryClient) -> None:
    def run(store: BaseChatStore) -> list[list[ChatMessage]]:
        memory = ChatMemoryBuffer.from_defaults(
            chat_history=[MESSAGES[0]], chat_store=store, chat_store_key="chat",
            token_limit=6, tokenizer_fn=_words)
        seen = [memory.get()]
        for message in MESSAGES[1:3] + MESSAGES[6:]:
            memory.put(message)  # SimpleChatStore answers its own list: copies kept
            seen += [list(memory.get()), list(memory.get_all())]
        memory.set(MESSAGES[:1])
        seen.append(list(memory.get_all()))
        memory.reset()
        return [*seen, memory.get_all()]

    assert run(_ours(client)) == run(SimpleChatStore())


def test_the_block_answers_nothing_for_no_messages_or_no_text(client: MemoryClient,
                                                             agent_id: str) -> None:
    block = MemorydMemoryBlock(client=client, agent_id=agent_id)
    assert asyncio.run(block.aget([])) == ""
    assert asyncio.run(block.aget([MESSAGES[5]])) == ""  # a tool call has no text


@pytest.mark.parametrize(("option", "value"), [("budget", 0), ("limit", 1001),
                                               ("retrieval_context_window", 0),
                                               ("agent_id", " ")])
def test_a_bad_block_option_is_refused_by_name(client: MemoryClient, option: str,
                                               value: object) -> None:
    options: dict[str, Any] = {"client": client, "agent_id": "a", option: value}
    with pytest.raises(ValidationError) as refused:
        MemorydMemoryBlock(**options)
    assert refused.value.field == option


@pytest.mark.slow
def test_memory_flushes_to_the_block_and_reads_long_term_memory_back(
        worker: object, client: MemoryClient, agent_id: str) -> None:
    """The block inside ``Memory``, beside a ``StaticMemoryBlock``: what the FIFO queue
    flushes lands in long-term memory (session = the Memory's session), and the next
    read puts memoryd's context into the system message under the block's name."""
    session = f"s-{uuid.uuid4()}"

    async def _talk(memory: Memory) -> list[ChatMessage]:
        await memory.aput(ChatMessage(role="user", content="My dog Rex loves long walks."))
        await memory.aput(ChatMessage(role="assistant", content="Rex sounds lovely."))
        for i in range(6):
            await memory.aput(ChatMessage(role="user" if i % 2 else "assistant",
                                          content=f"small talk number {i} about the weather"))
        return await memory.aget(input="Where does Rex like to go?")

    async def talk() -> list[ChatMessage]:
        engine = create_async_engine("sqlite+aiosqlite:///:memory:")  # Memory's default
        memory = Memory.from_defaults(
            session_id=session, token_limit=40, token_flush_size=10,
            chat_history_token_ratio=0.5, tokenizer_fn=_words, async_engine=engine,
            memory_blocks=[StaticMemoryBlock(static_content="The user is called Ana."),
                           MemorydMemoryBlock(client=client, agent_id=agent_id)])
        try:
            return await _talk(memory)
        finally:
            await engine.dispose()

    got = asyncio.run(talk())
    stored = client.session_messages(agent_id, session)
    assert [m.content for m in stored][:2] == ["My dog Rex loves long walks.",
                                               "Rex sounds lovely."]
    assert all("session_id" not in m.metadata for m in stored)
    system = got[0].content or ""
    assert got[0].role == "system" and "The user is called Ana." in system
    assert "<LongTermMemory>" in system and "My dog Rex loves long walks." in system


@pytest.mark.slow
def test_a_block_that_refuses_short_term_memory_stores_nothing(
        worker: object, client: MemoryClient, agent_id: str) -> None:
    block = MemorydMemoryBlock(client=client, agent_id=agent_id,
                               accept_short_term_memory=False)
    asyncio.run(block.aput([ChatMessage(role="user", content="hello")],
                           from_short_term_memory=True, session_id="s"))
    asyncio.run(block.aput([ChatMessage(role="user", content="kept")], session_id="s"))
    assert [m.content for m in client.session_messages(agent_id, "s")] == ["kept"]


# --- LlamaIndex's own tests, ported: the same body on SimpleChatStore and on memoryd's
# store (llama-index-core/tests/storage/chat_store/test_simple_chat_store.py; its
# out-of-bounds and empty-history cases, which 0.14.25's SimpleChatStore fails, are
# test_out_of_range_deletes_... above, and test_persist_non_ascii_unescaped is about
# SimpleChatStore's file; tests/memory/test_chat_memory_buffer.py's test_set and
# test_max_tokens, words counted as tokens as tiktoken counts these messages).

def _hello(content: str) -> ChatMessage:
    return ChatMessage(role="user", content=content)


@pytest.fixture(params=["simple", "memoryd"])
def chat_store(request: pytest.FixtureRequest, client: MemoryClient) -> BaseChatStore:
    return SimpleChatStore() if request.param == "simple" else _ours(client)


def test_messages_are_added_per_key_and_at_an_index(chat_store: BaseChatStore) -> None:
    for key in ("user1", "user2"):
        chat_store.add_message(key, _hello("hello"))
        chat_store.add_message(key, _hello("world"))
    assert chat_store.get_messages("user1") == [_hello("hello"), _hello("world")]
    assert chat_store.get_messages("user2") == [_hello("hello"), _hello("world")]
    assert chat_store.get_keys() == ["user1", "user2"]
    chat_store.add_message("user1", _hello("hello"), idx=0)  # type: ignore[call-arg]
    assert chat_store.get_messages("user1") == [_hello("hello"), _hello("hello"),
                                                _hello("world")]


@pytest.mark.slow
def test_deleting_a_keys_messages_leaves_the_other_keys(worker: object,
                                                        chat_store: BaseChatStore) -> None:
    for key in ("user1", "user2"):
        chat_store.add_message(key, _hello("hello"))
        chat_store.add_message(key, _hello("world"))
    chat_store.delete_messages("user1")
    assert chat_store.get_messages("user1") == []
    assert chat_store.get_messages("user2") == [_hello("hello"), _hello("world")]


@pytest.mark.parametrize(("delete", "left"), [("last", "hello"), ("first", "world")])
def test_one_message_is_deleted(chat_store: BaseChatStore, delete: str, left: str) -> None:
    chat_store.add_message("user1", _hello("hello"))
    chat_store.add_message("user1", _hello("world"))
    if delete == "last":
        chat_store.delete_last_message("user1")
    else:
        chat_store.delete_message("user1", 0)
    assert chat_store.get_messages("user1") == [_hello(left)]


def test_a_buffer_set_replaces_its_history(chat_store: BaseChatStore) -> None:
    first = _hello("first message")
    memory = ChatMemoryBuffer.from_defaults(chat_history=[first], chat_store=chat_store,
                                            tokenizer_fn=_words)
    memory.put(first)
    assert len(memory.get()) == 2
    memory.set([first])
    assert len(memory.get()) == 1


def test_a_buffer_gets_what_fits_its_token_limit(chat_store: BaseChatStore) -> None:
    first = _hello("first message")
    memory = ChatMemoryBuffer.from_defaults(chat_history=[first], chat_store=chat_store,
                                            token_limit=5, tokenizer_fn=_words)
    memory.put(first)
    assert len(memory.get()) == 2
    memory.put(first)
    memory.put(first)
    assert len(memory.get()) == 2 and len(memory.get_all()) == 4
    memory.put(_hello("test message2"))
    assert memory.get()[-1].content == "test message2" and len(memory.get()) == 2
