"""The LLM layer: Anthropic when a key is configured, a deterministic extractive fallback otherwise.

memoryd must keep working (and stay testable) without network access or an API key, so
every maintenance job talks to an ``LLM`` protocol and the prompt helpers below fall back
to plain extractive functions when ``get_llm()`` returned ``ExtractiveLLM``. Errors from
the Anthropic SDK are translated into memoryd's own types: ``LLMUnavailable`` (transient,
the Celery task retries after ``retry_after``) or ``LLMError`` (permanent). The API key is
never part of a message, a repr, or an exception chain.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from memoryd import clock
from memoryd.errors import LLMError, LLMUnavailable

# The deterministic offline fallback lives in llm_fallback; its public names are
# re-exported here, so this module stays the one to import from.
from memoryd.memory.llm_fallback import (
    CHARS_PER_TOKEN,
    KEY_TERMS,
    ExtractiveLLM,
    _clean,
    _clip,
    _distinct,
    _leading_sentences,
    extract_facts_by_pattern,
    extractive_summary,
    key_terms,
    split_sentences,
)
from memoryd.process import Slot

if TYPE_CHECKING:
    import anthropic

    from memoryd.config import Settings

__all__ = [
    "CHARS_PER_TOKEN",
    "KEY_TERMS",
    "LLM",
    "AnthropicLLM",
    "ExtractiveLLM",
    "extract_facts",
    "extract_facts_by_pattern",
    "extractive_summary",
    "get_llm",
    "is_fallback",
    "key_terms",
    "parse_fact_lines",
    "parse_ranking",
    "rerank",
    "session_gist",
    "set_llm",
    "split_sentences",
    "summarize",
]

GIST_MAX_CHARS = 300
_PROMPT_BUDGET = 48_000  # characters of source text per prompt: bounds cost and latency
_ITEM_BUDGET = 2_000  # characters per item, so one huge memory cannot crowd out the rest
_ERROR_DETAIL_CHARS = 300
_LEADING_JUNK = re.compile(r"^(?:[-*•>#]+\s*|\(?\d{1,3}[.):]\s+)+")
_INDEX_RUN = re.compile(r"\d+(?:\s*(?:,|>|;|\s)\s*\d+)*")
_DIGITS = re.compile(r"\d+")
_KEY_SHAPE = re.compile(r"sk-ant-[A-Za-z0-9_\-]+")


@runtime_checkable
class LLM(Protocol):
    """Anything that turns a system prompt and a user prompt into text."""

    name: str

    def complete(self, system: str, prompt: str, max_tokens: int) -> str:
        """The model's reply; raises ``LLMUnavailable`` (transient) or ``LLMError``."""
        ...


# --- Anthropic ------------------------------------------------------------------------------


class AnthropicLLM:
    """Claude through the official SDK, with SDK retries off by default.

    Retries are off (``max_retries=0``) because a Celery task retrying on
    ``LLMUnavailable`` respects the server's ``retry-after`` without holding a worker.
    """

    def __init__(self, api_key: str, model: str, timeout_s: float, max_retries: int = 0) -> None:
        import anthropic

        if not api_key.strip():
            raise LLMError("anthropic: empty API key")
        self.name = f"anthropic:{model}"
        self.model = model
        self._secret = api_key  # kept only to scrub it from error text
        self._client = anthropic.Anthropic(
            api_key=api_key, timeout=timeout_s, max_retries=max_retries)

    def __repr__(self) -> str:
        return f"AnthropicLLM(model={self.model!r})"

    def complete(self, system: str, prompt: str, max_tokens: int) -> str:
        import anthropic

        try:
            message = self._client.messages.create(
                model=self.model,
                max_tokens=max_tokens,
                system=system,
                messages=[{"role": "user", "content": prompt}],
            )
        except anthropic.AnthropicError as exc:
            # ``from None``: the SDK error holds the request, whose headers carry the key.
            raise self._translate(exc) from None
        return "".join(block.text for block in message.content if block.type == "text")

    def _translate(self, exc: anthropic.AnthropicError) -> LLMError:
        """memoryd's error for an SDK error: transient ones become ``LLMUnavailable``."""
        import anthropic

        message = self._describe(exc)
        transient = (anthropic.RateLimitError, anthropic.InternalServerError,
                     anthropic.APIConnectionError)  # APITimeoutError is an APIConnectionError
        if isinstance(exc, transient):
            return LLMUnavailable(message, retry_after=_retry_after(exc))
        return LLMError(message)

    def _describe(self, exc: anthropic.AnthropicError) -> str:
        """A short, key-free description: class, status, request id, API message."""
        import anthropic

        parts = [f"anthropic {type(exc).__name__}"]
        detail = str(exc)
        if isinstance(exc, anthropic.APIStatusError):
            parts.append(f"HTTP {exc.status_code}")
            if exc.request_id:
                parts.append(f"request {exc.request_id}")
            detail = exc.api_message or exc.message
        # scrub before clipping: a clip through the key would leave a prefix unmatched
        detail = _clip(_scrub(detail, self._secret), _ERROR_DETAIL_CHARS)
        return f"{', '.join(parts)}: {detail}"


def _scrub(text: str, secret: str) -> str:
    """Remove the key (and anything shaped like an Anthropic key) from ``text``."""
    if secret:
        text = text.replace(secret, "[redacted]")
    return _KEY_SHAPE.sub("[redacted]", text)


def _retry_after(exc: BaseException) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` or ``retry-after`` (seconds or HTTP date)."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    millis = _as_seconds(headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    raw = headers.get("retry-after")
    seconds = _as_seconds(raw)
    if seconds is not None or raw is None:
        return seconds
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - clock.now()).total_seconds())


def _as_seconds(raw: str | None) -> float | None:
    """A non-negative finite float, or None when ``raw`` is not one."""
    if raw is None:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        return None
    return value if 0 <= value < float("inf") else None


# --- choosing the LLM -------------------------------------------------------------------------

# The LLM a test installed, if any; otherwise one is chosen from the settings per call.
_INSTALLED: Slot[LLM] = Slot("llm")
# The Anthropic client of the configured key, model and timeout (the key by its digest):
# store-time judging asks for the LLM on every store batch, and a client built each time
# would open a new connection for each call.
_ANTHROPIC: Slot[tuple[tuple[str, str, float], AnthropicLLM]] = Slot("anthropic_llm")


def set_llm(llm: LLM | None) -> None:
    """Make ``get_llm`` return ``llm`` in this process (tests); ``None`` resets."""
    _INSTALLED.value = llm


def get_llm(settings: Settings | None = None) -> LLM:
    """The override if set, else Anthropic when a key is configured, else ``ExtractiveLLM``.

    The Anthropic client is kept while the key, model and timeout stay the same (settings
    can change between calls: tests).
    """
    installed = _INSTALLED.value
    if installed is not None:
        return installed
    if settings is None:
        from memoryd.config import get_settings

        settings = get_settings()
    key = settings.anthropic_api_key.get_secret_value() if settings.anthropic_api_key else ""
    if not key.strip():
        return ExtractiveLLM()
    wanted = (hashlib.sha256(key.encode()).hexdigest(), settings.llm_model,
              settings.llm_timeout_s)
    cached = _ANTHROPIC.value
    if cached is None or cached[0] != wanted:
        cached = (wanted, AnthropicLLM(key, settings.llm_model, settings.llm_timeout_s))
        _ANTHROPIC.value = cached
    return cached[1]


def is_fallback(llm: LLM) -> bool:
    """True when ``llm`` is the offline extractive fallback (for job stats)."""
    return isinstance(llm, ExtractiveLLM)


# --- prompt helpers -------------------------------------------------------------------------

_SUMMARY_SYSTEM = (
    "You condense an AI agent's long-term memories into one faithful summary. Keep concrete "
    "facts: names, numbers, dates, preferences, decisions. Never invent anything. Reply with "
    "the summary text only, no preamble.")
_FACTS_SYSTEM = (
    "You extract durable facts about the user from a conversation: preferences, identity, "
    "work, location, relationships, plans. Each fact is one short self-contained sentence. "
    "Reply with at most {limit} facts, one per line, nothing else. If there are none, reply "
    "NONE.")
_GIST_SYSTEM = (
    "You describe what a conversation was about in one or two sentences, for a session "
    "index. Reply with those sentences only.")
_RERANK_SYSTEM = (
    "You rank candidate memories by how relevant they are to a query. Reply with every "
    "candidate index, most relevant first, comma-separated (for example: 2,0,1). No other "
    "text.")


def summarize(llm: LLM, texts: Sequence[str], max_chars: int = 600) -> str:
    """A summary of ``texts`` of at most ``max_chars``; "" when there is nothing to say."""
    if not any(t.strip() for t in texts):
        return ""
    if is_fallback(llm):
        return extractive_summary(texts, max_chars)
    prompt = (f"Summarize these {len(texts)} memories in at most {max_chars} characters.\n\n"
              f"{_numbered(texts)}")
    reply = _clean_block(llm.complete(_SUMMARY_SYSTEM, prompt, _tokens_for(max_chars)))
    if not reply:
        raise LLMError(f"{llm.name}: empty summary")
    return _clip(reply, max_chars)


def extract_facts(llm: LLM, messages: Sequence[str], limit: int = 3) -> list[str]:
    """At most ``limit`` durable facts stated in ``messages``, one sentence each."""
    if limit < 1 or not any(m.strip() for m in messages):
        return []
    if is_fallback(llm):
        return extract_facts_by_pattern(messages, limit)
    prompt = f"Conversation:\n\n{_numbered(messages)}"
    reply = llm.complete(_FACTS_SYSTEM.format(limit=limit), prompt, 64 * limit)
    return parse_fact_lines(reply, limit)


def parse_fact_lines(reply: str, limit: int) -> list[str]:
    """Facts from a one-per-line reply: bullets and numbering stripped, "NONE" and
    preamble lines ("Here are the facts:") dropped, duplicates removed."""
    facts = []
    for line in reply.splitlines():
        fact = _LEADING_JUNK.sub("", _clean(line)).strip().strip('"').strip()
        if not fact or fact.endswith(":") or fact.rstrip(".").upper() == "NONE":
            continue
        facts.append(fact)
    return _distinct(facts, limit)


def session_gist(llm: LLM, messages: Sequence[str]) -> str:
    """One or two sentences saying what a session was about; "" for an empty session."""
    if not any(m.strip() for m in messages):
        return ""
    if is_fallback(llm):
        return _leading_sentences(messages, GIST_MAX_CHARS, max_sentences=2)
    prompt = f"Conversation:\n\n{_numbered(messages)}"
    reply = _clean(llm.complete(_GIST_SYSTEM, prompt, _tokens_for(GIST_MAX_CHARS)))
    if not reply:
        raise LLMError(f"{llm.name}: empty session gist")
    return _clip(reply, GIST_MAX_CHARS * 2)


def rerank(llm: LLM, query: str, candidates: Sequence[str]) -> list[int]:
    """A permutation of ``range(len(candidates))``, most relevant first.

    The fallback keeps the given order: recall's fusion already has a keyword score,
    so a lexical re-sort here would only count it twice. Raises ``LLMError`` when the
    reply contains no usable ranking.
    """
    if len(candidates) < 2 or is_fallback(llm):
        return list(range(len(candidates)))
    listing = "\n".join(f"[{i}] {_clip(_clean(c), 500)}" for i, c in enumerate(candidates))
    prompt = f"Query: {_clean(query)}\n\nCandidates:\n{listing}"
    reply = llm.complete(_RERANK_SYSTEM, prompt, 8 + 4 * len(candidates))
    return parse_ranking(reply, len(candidates), llm.name)


def parse_ranking(reply: str, count: int, source: str = "llm") -> list[int]:
    """The longest run of indices in ``reply`` ("2, 0, 1", "[2,0,1]", "2 > 0 > 1"),
    de-duplicated, with unmentioned indices appended in their original order."""
    runs = _INDEX_RUN.findall(reply)
    if not runs:
        raise LLMError(f"{source}: no ranking in reply {_clip(reply, 80)!r}")
    best = max(runs, key=lambda run: len(_DIGITS.findall(run)))
    indices = [int(n) for n in _DIGITS.findall(best)]
    if any(i >= count for i in indices):
        raise LLMError(f"{source}: ranking index out of range in {_clip(reply, 80)!r}")
    ranked = list(dict.fromkeys(indices))
    mentioned = set(ranked)
    return ranked + [i for i in range(count) if i not in mentioned]


# --- small text utilities ---------------------------------------------------------------------


def _clean_block(text: str) -> str:
    """Like ``_clean`` but keeps paragraph breaks, for multi-line summaries."""
    lines = (_clean(line) for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def _numbered(texts: Sequence[str]) -> str:
    """Texts as "1. ..." lines, each clipped, the whole within the prompt budget."""
    lines: list[str] = []
    used = 0
    for number, text in enumerate(texts, start=1):
        line = f"{number}. {_clip(_clean(text), _ITEM_BUDGET)}"
        if lines and used + len(line) > _PROMPT_BUDGET:
            break
        lines.append(line)
        used += len(line) + 1
    return "\n".join(lines)


def _tokens_for(max_chars: int) -> int:
    """A ``max_tokens`` that lets a reply of ``max_chars`` finish, with some slack."""
    return max(32, max_chars // CHARS_PER_TOKEN + 32)
