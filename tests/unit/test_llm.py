"""The LLM layer: extractive fallback, prompt-helper parsing, selection, error mapping.

No test here touches the network: Anthropic clients are constructed, and their
``messages.create`` is replaced on the instance before anything could be sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.types import TextBlock, ThinkingBlock

from memoryd.config import override_settings
from memoryd.errors import LLMError, LLMUnavailable
from memoryd.memory.llm import (
    LLM,
    AnthropicLLM,
    ExtractiveLLM,
    extract_facts,
    extract_facts_by_pattern,
    extractive_summary,
    get_llm,
    is_fallback,
    key_terms,
    rerank,
    session_gist,
    set_llm,
    split_sentences,
    summarize,
)

SECRET = "sk-ant-api03-TESTKEY-do-not-leak-0123456789"

CHAT = [
    "Hi there! My name is Ada Lovelace.",
    "I prefer green tea over coffee. The weather in London is grey today.",
    "Do you know what I like? I work at Acme Analytics as a data engineer.",
    "I live in Berlin these days.\nMy favourite editor is Emacs.",
    "I prefer green tea over coffee.",
]


@dataclass
class FakeLLM:
    """Records every call and replies with canned text, one reply per call."""

    replies: list[str]
    name: str = "fake"
    calls: list[tuple[str, str, int]] = field(default_factory=list)

    def complete(self, system: str, prompt: str, max_tokens: int) -> str:
        self.calls.append((system, prompt, max_tokens))
        return self.replies[len(self.calls) - 1]


@pytest.fixture(autouse=True)
def _no_override() -> Iterator[None]:
    set_llm(None)
    yield
    set_llm(None)


# --- extractive fallback ------------------------------------------------------------------


def test_split_sentences_on_punctuation_and_newlines() -> None:
    text = "First one. Second!  Third?\nFourth line\n\n  ...  \nFifth"
    assert split_sentences(text) == ["First one.", "Second!", "Third?", "Fourth line", "Fifth"]


def test_key_terms_counts_ranks_and_breaks_ties_alphabetically() -> None:
    texts = ["Zebra zebra apple mango.", "Mango banana, the and with; kiwi kiwi kiwi 1234 cat"]
    # kiwi 3, mango 2, zebra 2 (tie -> alphabetical), apple 1, banana 1; stopwords,
    # short words and digits never appear.
    assert key_terms(texts) == ["kiwi", "mango", "zebra", "apple", "banana"]
    assert key_terms(texts, limit=2) == ["kiwi", "mango"]


def test_extractive_summary_leads_with_sentences_and_ends_with_key_terms() -> None:
    summary = extractive_summary(CHAT, max_chars=600)
    body, terms = summary.rsplit("\n", 1)
    assert body.startswith("Hi there! My name is Ada Lovelace. I prefer green tea over coffee.")
    # the repeated sentence of the last message is not repeated in the summary
    assert body.count("I prefer green tea over coffee.") == 1
    # counts: coffee/green/prefer 3 (the repeat counts), then 1s alphabetically; "Ada" is
    # too short to be a term
    assert terms == "Key terms: coffee, green, prefer, acme, analytics"
    assert len(summary) <= 600


def test_extractive_summary_respects_budget_and_clips_a_long_first_sentence() -> None:
    short = extractive_summary(CHAT, max_chars=150)
    assert len(short) <= 150
    assert short.endswith("Key terms: coffee, green, prefer, acme, analytics")
    assert "Berlin" not in short
    long_sentence = " ".join(["word"] * 400) + "."
    clipped = extractive_summary([long_sentence], max_chars=100)
    assert len(clipped) <= 100
    first_line, terms_line = clipped.split("\n")
    assert first_line.startswith("word word")
    assert first_line.endswith("word…")
    assert terms_line == "Key terms: word"


def test_extractive_summary_rejects_non_positive_budget() -> None:
    with pytest.raises(ValueError, match="max_chars"):
        extractive_summary(CHAT, max_chars=0)


def test_extractive_llm_is_deterministic_and_sized_by_max_tokens() -> None:
    prompt = "\n".join(CHAT)
    first = ExtractiveLLM().complete("ignored", prompt, max_tokens=100)
    second = ExtractiveLLM().complete("other system prompt", prompt, max_tokens=100)
    assert first == second
    assert first == extractive_summary([prompt], max_chars=400)
    assert len(ExtractiveLLM().complete("", prompt, max_tokens=25)) <= 100
    assert ExtractiveLLM().name == "extractive"
    assert isinstance(ExtractiveLLM(), LLM)


def test_pattern_extraction_hits() -> None:
    facts = extract_facts_by_pattern(CHAT, limit=10)
    assert facts == [
        "My name is Ada Lovelace.",
        "I prefer green tea over coffee.",
        "I work at Acme Analytics as a data engineer.",
        "I live in Berlin these days.",
        "My favourite editor is Emacs.",
    ]
    assert extract_facts_by_pattern(CHAT) == facts[:3]


@pytest.mark.parametrize("sentence", [
    "I like hiking.", "I enjoy jazz.", "My favorite color is blue.", "I'm a nurse.",
    "I\u2019m vegetarian.", "I am 34 years old.", "i work as a pilot.", "  I   PREFER   tabs.  ",
])
def test_pattern_extraction_each_pattern(sentence: str) -> None:
    assert extract_facts_by_pattern([sentence]) == [" ".join(sentence.split())]


@pytest.mark.parametrize("text", [
    "The weather is nice.",
    "Do you know what I like?",
    "Jim likes tea.",  # third person
    "Kiwi am not.",  # "am" without "I"
    "Mike prefers vim.",
    "They live in Rome.",
])
def test_pattern_extraction_misses(text: str) -> None:
    assert extract_facts_by_pattern([text]) == []


def test_pattern_extraction_zero_limit() -> None:
    assert extract_facts_by_pattern(CHAT, limit=0) == []


# --- prompt helpers with a fake LLM ----------------------------------------------------------


def test_summarize_uses_llm_and_clips_reply() -> None:
    fake = FakeLLM(["  The user is Ada;\n\n  she   prefers tea.  " + "x " * 200])
    out = summarize(fake, ["memory one", "memory two"], max_chars=100)
    assert out.startswith("The user is Ada;\nshe prefers tea.")
    assert len(out) <= 100
    system, prompt, max_tokens = fake.calls[0]
    assert "summary" in system.lower()
    assert "1. memory one\n2. memory two" in prompt
    assert max_tokens >= 100 // 4


def test_summarize_empty_input_and_empty_reply() -> None:
    fake = FakeLLM([""])
    assert summarize(fake, ["  ", ""]) == ""
    assert fake.calls == []
    with pytest.raises(LLMError, match="empty summary"):
        summarize(fake, ["something"])


def test_summarize_falls_back_to_extractive() -> None:
    assert summarize(ExtractiveLLM(), CHAT, max_chars=200) == extractive_summary(CHAT, 200)


def test_extract_facts_parses_bullets_numbering_and_preambles() -> None:
    reply = ("Here are the facts:\n1. The user's name is Ada.\n- Prefers green tea\n"
             "* The user's name is Ada.\n(3) Works at Acme.\n\n4) Lives in Berlin.")
    fake = FakeLLM([reply])
    assert extract_facts(fake, CHAT) == [
        "The user's name is Ada.", "Prefers green tea", "Works at Acme."]
    system, prompt, _ = fake.calls[0]
    assert "at most 3" in system
    assert "I prefer green tea" in prompt


def test_extract_facts_none_and_limit() -> None:
    assert extract_facts(FakeLLM(["NONE"]), CHAT) == []
    assert extract_facts(FakeLLM(["a\nb\nc"]), CHAT, limit=2) == ["a", "b"]
    untouched = FakeLLM([])
    assert extract_facts(untouched, CHAT, limit=0) == []
    assert extract_facts(untouched, [" "]) == []
    assert untouched.calls == []


def test_extract_facts_falls_back_to_patterns() -> None:
    assert extract_facts(ExtractiveLLM(), CHAT, limit=2) == [
        "My name is Ada Lovelace.", "I prefer green tea over coffee."]


def test_session_gist() -> None:
    fake = FakeLLM(["  Ada talked about\n tea and   work.  "])
    assert session_gist(fake, CHAT) == "Ada talked about tea and work."
    assert "one or two sentences" in fake.calls[0][0]
    assert session_gist(FakeLLM([]), []) == ""
    with pytest.raises(LLMError):
        session_gist(FakeLLM(["   "]), CHAT)


def test_session_gist_fallback_is_two_leading_sentences() -> None:
    assert session_gist(ExtractiveLLM(), CHAT) == "Hi there! My name is Ada Lovelace."


@pytest.mark.parametrize(("reply", "expected"), [
    ("2,0,1", [2, 0, 1]),
    ("[1, 2, 0]", [1, 2, 0]),
    ("Ranking for 3 candidates: 2 > 1 > 0", [2, 1, 0]),
    ("2, 2, 0", [2, 0, 1]),  # duplicates dropped, the missing one appended
    ("1", [1, 0, 2]),
])
def test_rerank_parses_rankings(reply: str, expected: list[int]) -> None:
    fake = FakeLLM([reply])
    assert rerank(fake, "tea?", ["coffee", "tea", "green tea"]) == expected
    _, prompt, _ = fake.calls[0]
    assert "Query: tea?" in prompt
    assert "[2] green tea" in prompt


@pytest.mark.parametrize("reply", ["", "I cannot rank these.", "0, 7, 1", "-"])
def test_rerank_garbage_raises(reply: str) -> None:
    with pytest.raises(LLMError):
        rerank(FakeLLM([reply]), "q", ["a", "b", "c"])


def test_rerank_trivial_cases_and_fallback_skip_the_llm() -> None:
    fake = FakeLLM([])
    assert rerank(fake, "q", []) == []
    assert rerank(fake, "q", ["only"]) == [0]
    assert fake.calls == []
    assert rerank(ExtractiveLLM(), "q", ["a", "b", "c"]) == [0, 1, 2]


# --- selection --------------------------------------------------------------------------------


def test_get_llm_without_key_is_extractive() -> None:
    with override_settings(anthropic_api_key=None) as settings:
        chosen = get_llm(settings)
        assert isinstance(chosen, ExtractiveLLM)
        assert is_fallback(chosen)
        assert isinstance(get_llm(), ExtractiveLLM)


def test_get_llm_with_key_is_anthropic() -> None:
    with override_settings(anthropic_api_key="sk-test", llm_model="claude-test-model"):
        chosen = get_llm()
        assert isinstance(chosen, AnthropicLLM)
        assert not is_fallback(chosen)
        assert chosen.name == "anthropic:claude-test-model"
        assert "sk-test" not in repr(chosen)


def test_get_llm_keeps_one_client_while_key_model_and_timeout_stay() -> None:
    with override_settings(anthropic_api_key="sk-test", llm_model="claude-test-model"):
        first = get_llm()
        assert get_llm() is first
    with override_settings(anthropic_api_key="sk-test", llm_model="claude-other-model"):
        assert get_llm() is not first
    with override_settings(anthropic_api_key="sk-other", llm_model="claude-test-model"):
        assert get_llm() is not first


def test_get_llm_blank_key_is_extractive() -> None:
    with override_settings(anthropic_api_key="   "):
        assert isinstance(get_llm(), ExtractiveLLM)


def test_set_llm_overrides_and_resets() -> None:
    fake = FakeLLM([])
    set_llm(fake)
    with override_settings(anthropic_api_key="sk-test"):
        assert get_llm() is fake
    set_llm(None)
    with override_settings(anthropic_api_key=None):
        assert isinstance(get_llm(), ExtractiveLLM)


# --- Anthropic wrapper, network replaced --------------------------------------------------------

_REQUEST = httpx2.Request(
    "POST", "https://api.anthropic.com/v1/messages", headers={"x-api-key": SECRET})


def _response(status: int, message: str, headers: dict[str, str] | None = None) -> httpx2.Response:
    body = {"type": "error", "error": {"type": "some_error", "message": message}}
    return httpx2.Response(status, request=_REQUEST, headers=headers or {}, json=body)


def _status_error(cls: type[anthropic.APIStatusError], status: int, message: str = "boom",
                  headers: dict[str, str] | None = None) -> anthropic.APIStatusError:
    response = _response(status, message, headers)
    return cls(f"Error code: {status} - {message}", response=response, body=response.json())


def _llm_raising(monkeypatch: pytest.MonkeyPatch, exc: Exception) -> AnthropicLLM:
    llm = AnthropicLLM(SECRET, "claude-haiku-4-5", timeout_s=5.0)

    def raise_it(**_: Any) -> Any:
        raise exc

    monkeypatch.setattr(llm._client.messages, "create", raise_it)
    return llm


def test_anthropic_client_is_configured_without_sdk_retries() -> None:
    llm = AnthropicLLM(SECRET, "claude-haiku-4-5", timeout_s=7.5)
    assert llm._client.max_retries == 0
    assert llm._client.timeout == 7.5
    assert llm.name == "anthropic:claude-haiku-4-5"
    assert SECRET not in repr(llm)
    assert isinstance(llm, LLM)


def test_anthropic_rejects_empty_key() -> None:
    with pytest.raises(LLMError):
        AnthropicLLM("", "claude-haiku-4-5", timeout_s=5.0)


def test_anthropic_complete_sends_request_and_joins_text_blocks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    llm = AnthropicLLM(SECRET, "claude-haiku-4-5", timeout_s=5.0)
    seen: dict[str, Any] = {}

    def create(**kwargs: Any) -> Any:
        seen.update(kwargs)
        content = [
            ThinkingBlock(type="thinking", thinking="hmm", signature="sig"),
            TextBlock(type="text", text="Hello, "),
            TextBlock(type="text", text="world."),
        ]
        return anthropic.types.Message.model_construct(content=content)

    monkeypatch.setattr(llm._client.messages, "create", create)
    assert llm.complete("be brief", "say hi", max_tokens=42) == "Hello, world."
    assert seen == {
        "model": "claude-haiku-4-5",
        "max_tokens": 42,
        "system": "be brief",
        "messages": [{"role": "user", "content": "say hi"}],
    }


@pytest.mark.parametrize(("exc", "retry_after"), [
    (_status_error(anthropic.RateLimitError, 429, headers={"retry-after": "7"}), 7.0),
    (_status_error(anthropic.RateLimitError, 429, headers={"retry-after-ms": "1500"}), 1.5),
    (_status_error(anthropic.RateLimitError, 429, headers={"retry-after": "soon"}), None),
    (_status_error(anthropic.InternalServerError, 500), None),
    (_status_error(anthropic.InternalServerError, 529, "Overloaded",
                   headers={"retry-after": "30"}), 30.0),
    (anthropic.APIConnectionError(request=_REQUEST), None),
    (anthropic.APITimeoutError(request=_REQUEST), None),
])
def test_transient_errors_become_unavailable(
        monkeypatch: pytest.MonkeyPatch, exc: Exception, retry_after: float | None) -> None:
    llm = _llm_raising(monkeypatch, exc)
    with pytest.raises(LLMUnavailable) as info:
        llm.complete("s", "p", 10)
    assert info.value.retry_after == retry_after
    assert SECRET not in str(info.value)
    assert type(exc).__name__ in str(info.value)
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__


def test_retry_after_http_date_is_seconds_from_now(monkeypatch: pytest.MonkeyPatch) -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)
    exc = _status_error(anthropic.RateLimitError, 429, headers={"retry-after": when})
    with pytest.raises(LLMUnavailable) as info:
        _llm_raising(monkeypatch, exc).complete("s", "p", 10)
    assert info.value.retry_after is not None
    assert 100 < info.value.retry_after <= 120


@pytest.mark.parametrize(("cls", "status"), [
    (anthropic.BadRequestError, 400),
    (anthropic.AuthenticationError, 401),
    (anthropic.PermissionDeniedError, 403),
    (anthropic.NotFoundError, 404),
])
def test_permanent_errors_become_llm_error(
        monkeypatch: pytest.MonkeyPatch, cls: type[anthropic.APIStatusError], status: int) -> None:
    llm = _llm_raising(monkeypatch, _status_error(cls, status, "invalid request"))
    with pytest.raises(LLMError) as info:
        llm.complete("s", "p", 10)
    assert not isinstance(info.value, LLMUnavailable)
    assert f"HTTP {status}" in str(info.value)
    assert "invalid request" in str(info.value)
    assert SECRET not in str(info.value)


def test_key_echoed_by_the_api_is_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    exc = _status_error(anthropic.AuthenticationError, 401, f"invalid x-api-key {SECRET}")
    with pytest.raises(LLMError) as info:
        _llm_raising(monkeypatch, exc).complete("s", "p", 10)
    assert SECRET not in str(info.value)
    assert "[redacted]" in str(info.value)
    assert SECRET not in repr(info.value)
    assert all(SECRET not in str(arg) for arg in info.value.args)


def test_any_configured_key_is_redacted_not_only_anthropic_shaped_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    plain_key = "proxy-gateway-key-7f3a9c"
    llm = AnthropicLLM(plain_key, "claude-haiku-4-5", timeout_s=5.0)
    exc = _status_error(anthropic.AuthenticationError, 401, f"bad key {plain_key}")

    def raise_it(**_: Any) -> Any:
        raise exc

    monkeypatch.setattr(llm._client.messages, "create", raise_it)
    with pytest.raises(LLMError) as info:
        llm.complete("s", "p", 10)
    assert plain_key not in str(info.value)
    assert "bad key [redacted]" in str(info.value)


def test_non_api_sdk_errors_become_llm_error(monkeypatch: pytest.MonkeyPatch) -> None:
    llm = _llm_raising(monkeypatch, anthropic.CredentialsError("no credentials"))
    with pytest.raises(LLMError, match="CredentialsError"):
        llm.complete("s", "p", 10)


def test_an_installed_llm_lives_with_the_other_process_globals() -> None:
    from memoryd import process

    fake = FakeLLM([])
    set_llm(fake)
    assert process.SLOTS["llm"].value is fake
    set_llm(None)
    assert process.SLOTS["llm"].value is None
