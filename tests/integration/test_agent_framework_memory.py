"""Microsoft Agent Framework's providers over working memory, against the framework's own
``InMemoryHistoryProvider``: the same runs load the same history, message for message
(tool calls, authors, ids and replayed transcripts included), through the real Redis and,
for memoryd's turn context and promotion, the real worker. The only fake is the LLM."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from agent_framework import (
    Agent,
    AgentResponse,
    AgentSession,
    BaseChatClient,
    ChatResponse,
    Content,
    ContextProvider,
    HistoryProvider,
    InMemoryHistoryProvider,
    Message,
    SessionContext,
)

from memoryd.client import MemoryClient
from memoryd.errors import ValidationError
from memoryd.integrations.agent_framework import (
    MESSAGE_KEY,
    MemorydContextProvider,
    MemorydHistoryProvider,
)


class EchoLLM(BaseChatClient):
    """The fake LLM: answers each request with its last message's text, and keeps what it
    was sent."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[list[Message]] = []

    def _inner_get_response(self, *, messages: Sequence[Message], stream: bool,
                            options: Mapping[str, Any], **kwargs: Any) -> Any:
        async def answer() -> ChatResponse:
            self.seen.append(list(messages))
            return ChatResponse(messages=Message("assistant", [f"echo: {messages[-1].text}"]))
        return answer()


def _said(role: str, *texts: str, **fields: Any) -> Message:
    return Message(role, list(texts), **fields)


CALL = Message("assistant", [Content.from_function_call(
    call_id="call_7", name="weather", arguments={"city": "Zürich"})], message_id="m-call")
RESULT = Message("tool", [Content.from_function_result(call_id="call_7", result="21 °C")])
# (inputs, response) of each run: repeats, authors, ids, tool calls, a system message, a
# run whose inputs replay the transcript so far, and an empty response.
RUNS: list[tuple[list[Message], list[Message]]] = [
    ([_said("user", "yes")], [_said("assistant", "Sure.", author_name="bot")]),
    ([_said("user", "yes")], [_said("assistant", "Sure.", author_name="bot")]),
    ([_said("user", "Weather in Zürich?", message_id="m-q")], [CALL, RESULT,
                                                              _said("assistant", "21 °C.")]),
    ([_said("system", "Be brief."), _said("user", "Two", "parts")], []),
    ([_said("developer", "Use metric units.")], [_said("assistant", "OK", author_name="")]),
]


def _dicts(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages as dicts, without the provider's attribution (it names the source)."""
    out = []
    for message in messages:
        whole = message.to_dict()
        whole.get("additional_properties", {}).pop("_attribution", None)
        out.append(whole)
    return out


async def _run(provider: HistoryProvider | ContextProvider, session: AgentSession,
               inputs: list[Message], outputs: list[Message]) -> SessionContext:
    """One run as the agent drives a provider: before_run, the response, after_run."""
    context = SessionContext(session_id=session.session_id, input_messages=inputs)
    state = session.state.setdefault(provider.source_id, {})
    agent: Any = None  # the providers never look at the agent
    await provider.before_run(agent=agent, session=session, context=context, state=state)
    context._response = AgentResponse(messages=outputs)
    await provider.after_run(agent=agent, session=session, context=context, state=state)
    return context


def test_the_same_runs_load_the_same_history_as_the_in_memory_provider(
        client: MemoryClient, agent_id: str) -> None:
    async def scenario() -> None:
        ours = MemorydHistoryProvider(client, agent_id)
        theirs = InMemoryHistoryProvider()
        mine, reference = AgentSession(), AgentSession()
        for inputs, outputs in RUNS:
            got = await _run(ours, mine, inputs, outputs)
            want = await _run(theirs, reference, inputs, outputs)
            assert _dicts(got.context_messages.get(ours.source_id, [])) == _dicts(
                want.context_messages.get(theirs.source_id, []))
        # A client replaying the whole transcript adds only what is new, in both.
        history = await theirs.get_messages(None, state=reference.state["in_memory"])
        replay = [*history, _said("user", "and now?")]
        await _run(ours, mine, replay, [])
        await _run(theirs, reference, replay, [])
        held = await ours.get_messages(mine.session_id)
        assert _dicts(held) == _dicts(await theirs.get_messages(
            None, state=reference.state["in_memory"]))
        assert len(held) == len(history) + 1 and held[-1].text == "and now?"

    asyncio.run(scenario())


def test_an_agent_sends_its_model_the_same_history_with_either_provider(
        client: MemoryClient, agent_id: str) -> None:
    async def conversation(provider: HistoryProvider) -> list[list[tuple[str, str]]]:
        llm = EchoLLM()
        agent = Agent(client=llm, instructions="Be brief.", context_providers=[provider])
        session = agent.create_session()
        for said in ("Hello", "My name is Ana.", "What is my name?"):
            await agent.run(said, session=session)
        return [[(m.role, m.text) for m in sent] for sent in llm.seen]

    ours = asyncio.run(conversation(MemorydHistoryProvider(client, agent_id)))
    assert ours == asyncio.run(conversation(InMemoryHistoryProvider()))
    assert ours[-1] == [("user", "Hello"), ("assistant", "echo: Hello"),
                        ("user", "My name is Ana."), ("assistant", "echo: My name is Ana."),
                        ("user", "What is my name?")]


def test_concurrent_saves_to_one_thread_all_land(client: MemoryClient, agent_id: str) -> None:
    provider = MemorydHistoryProvider(client, agent_id)

    async def saves() -> None:
        await asyncio.gather(*[provider.save_messages("t", [_said("user", f"message {i}")])
                               for i in range(8)])

    asyncio.run(saves())
    state = client.working(agent_id, "t")
    assert sorted(m.content for m in state.messages) == [f"message {i}" for i in range(8)]
    assert state.version == 8  # each save one update: none was lost and retried into two


def test_a_tool_call_comes_back_whole_and_a_plain_message_carries_no_metadata(
        client: MemoryClient, agent_id: str) -> None:
    provider = MemorydHistoryProvider(client, agent_id)
    asyncio.run(provider.save_messages("t", [_said("user", "Weather?"), CALL, RESULT]))
    stored = client.working(agent_id, "t").messages
    assert [(m.role, m.metadata is None) for m in stored] == [
        ("user", True), ("assistant", False), ("tool", False)]
    assert stored[1].metadata == {MESSAGE_KEY: CALL.to_dict()}
    assert json.loads(stored[1].content)[0]["name"] == "weather"  # what recall reads
    assert _dicts(asyncio.run(provider.get_messages("t"))) == _dicts(
        [_said("user", "Weather?"), CALL, RESULT])


def test_messages_another_writer_appended_load_as_plain_messages(
        client: MemoryClient, agent_id: str) -> None:
    client.update_working(agent_id, "t", messages=[
        {"role": "user", "content": "from the gateway", "name": "ana",
         "metadata": {"channel": "sms"}}])
    [loaded] = asyncio.run(MemorydHistoryProvider(client, agent_id).get_messages("t"))
    assert (loaded.role, loaded.text, loaded.author_name) == ("user", "from the gateway", "ana")


def test_a_session_without_an_id_uses_the_default_thread(client: MemoryClient,
                                                         agent_id: str) -> None:
    provider = MemorydHistoryProvider(client, agent_id, default_thread="main")
    asyncio.run(provider.save_messages(None, [_said("user", "hi")]))
    assert [m.content for m in client.working(agent_id, "main").messages] == ["hi"]


def test_excluded_messages_are_skipped_only_when_asked(client: MemoryClient,
                                                      agent_id: str) -> None:
    hidden = _said("assistant", "old", additional_properties={"_excluded": True})
    asyncio.run(MemorydHistoryProvider(client, agent_id).save_messages(
        "t", [_said("user", "keep"), hidden]))
    for skip, texts in ((False, ["keep", "old"]), (True, ["keep"])):
        provider = MemorydHistoryProvider(client, agent_id, skip_excluded=skip)
        assert [m.text for m in asyncio.run(provider.get_messages("t"))] == texts


def test_a_message_over_the_content_limit_is_refused_and_nothing_is_saved(
        client: MemoryClient, agent_id: str) -> None:
    huge = _said("user", "x" * (client.settings.max_content_bytes + 1))
    provider = MemorydHistoryProvider(client, agent_id)
    with pytest.raises(ValidationError) as refused:
        asyncio.run(provider.save_messages("t", [_said("user", "fine"), huge]))
    assert refused.value.field == "messages[1].content"
    assert client.working(agent_id, "t").version == 0


@pytest.mark.parametrize(("option", "value"), [("budget", 0), ("budget_unit", "words"),
                                               ("limit", 0)])
def test_a_bad_context_option_is_refused_by_name(client: MemoryClient, agent_id: str,
                                                 option: str, value: object) -> None:
    options: dict[str, Any] = {option: value}
    with pytest.raises(ValidationError) as refused:
        MemorydContextProvider(client, agent_id, **options)
    assert refused.value.field == option


@pytest.mark.slow
def test_the_context_provider_adds_memoryd_context_and_stores_the_turn(
        worker: object, client: MemoryClient, agent_id: str) -> None:
    client.store(agent_id, "Ana lives in Porto.")
    session = AgentSession()
    client.update_working(agent_id, session.session_id, topic="moving house")
    provider = MemorydContextProvider(client, agent_id)
    context = asyncio.run(_run(provider, session, [_said("user", "Where does Ana live?")],
                               [_said("assistant", "In Porto.")]))
    [added] = context.context_messages[provider.source_id]
    assert added.role == "user"
    assert "Ana lives in Porto." in added.text and "Topic: moving house" in added.text
    held = client.working(agent_id, session.session_id)
    assert [(m.role, m.content) for m in held.messages] == [
        ("user", "Where does Ana live?"), ("assistant", "In Porto.")]


@pytest.mark.slow
def test_the_context_provider_can_leave_the_thread_out_and_store_nothing(
        worker: object, client: MemoryClient, agent_id: str) -> None:
    client.store(agent_id, "Ana lives in Porto.")
    session = AgentSession()
    client.update_working(agent_id, session.session_id, topic="moving house")
    provider = MemorydContextProvider(client, agent_id, include_thread=False,
                                      store_turns=False)
    context = asyncio.run(_run(provider, session, [_said("user", "Where does Ana live?")],
                               [_said("assistant", "In Porto.")]))
    [added] = context.context_messages[provider.source_id]
    assert "Ana lives in Porto." in added.text and "moving house" not in added.text
    assert client.working(agent_id, session.session_id).messages == []


@pytest.mark.slow
def test_a_run_without_text_asks_memoryd_nothing(worker: object, client: MemoryClient,
                                                 agent_id: str) -> None:
    provider = MemorydContextProvider(client, agent_id, store_turns=False)
    context = asyncio.run(_run(provider, AgentSession(), [CALL], []))
    assert provider.source_id not in context.context_messages


@pytest.mark.slow
def test_an_agent_with_both_providers_remembers_across_sessions(
        worker: object, client: MemoryClient, agent_id: str) -> None:
    """The history provider holds the thread; ending it promotes the thread into
    long-term memory, where the context provider finds it for a new session."""
    llm = EchoLLM()
    agent = Agent(client=llm, context_providers=[
        MemorydHistoryProvider(client, agent_id),
        MemorydContextProvider(client, agent_id, store_turns=False)])

    async def talk() -> None:
        first = agent.create_session()
        await agent.run("My favourite colour is teal.", session=first)
        assert client.end_thread(agent_id, first.session_id).promoted == 2
        assert [m.content for m in client.session_messages(agent_id, first.session_id)] == [
            "My favourite colour is teal.", "echo: My favourite colour is teal."]
        await agent.run("What is my favourite colour?", session=agent.create_session())

    asyncio.run(talk())
    sent = llm.seen[-1]
    assert sent[-1].text == "What is my favourite colour?"
    assert any("favourite colour is teal" in m.text for m in sent[:-1])


def test_each_agent_sees_only_its_own_threads(client: MemoryClient, agent_id: str) -> None:
    other = f"agent-{uuid.uuid4()}"
    asyncio.run(MemorydHistoryProvider(client, agent_id).save_messages(
        "t", [_said("user", "mine")]))
    assert asyncio.run(MemorydHistoryProvider(client, other).get_messages("t")) == []


# --- Agent Framework's own tests of its reference providers, ported: the same body on the
# reference and on memoryd's provider (python/packages/core/tests/core/test_sessions.py,
# TestInMemoryHistoryProvider; TestFileHistoryProvider's missing-session case). Left out:
# test_state_is_serializable, which asserts the history lives in ``session.state``.

@pytest.fixture(params=["in_memory", "memoryd"])
def history(request: pytest.FixtureRequest, client: MemoryClient,
            agent_id: str) -> HistoryProvider:
    if request.param == "in_memory":
        return InMemoryHistoryProvider()
    return MemorydHistoryProvider(client, agent_id, "in_memory")


def test_an_empty_session_loads_no_messages(history: HistoryProvider) -> None:
    context = asyncio.run(_run(history, AgentSession(), [], []))
    assert context.context_messages.get(history.source_id, []) == []


def test_a_run_is_stored_and_loaded_by_the_next_run(history: HistoryProvider) -> None:
    session = AgentSession()
    asyncio.run(_run(history, session, [_said("user", "hello")],
                     [_said("assistant", "hi there")]))
    context = asyncio.run(_run(history, session, [_said("user", "again")], []))
    loaded = context.context_messages.get(history.source_id, [])
    assert [m.text for m in loaded] == ["hello", "hi there"]
    assert all(m.additional_properties["_attribution"]["source_id"] == "in_memory"
               for m in loaded)


def test_a_session_never_saved_loads_no_messages(history: HistoryProvider) -> None:
    assert asyncio.run(history.get_messages("missing", state={})) == []
