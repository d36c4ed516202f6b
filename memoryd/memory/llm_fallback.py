"""The deterministic offline fallback of the LLM layer: extractive text functions.

No network, no randomness: ``ExtractiveLLM`` and the prompt helpers in
``memoryd.memory.llm`` use these when no API key is configured, so summaries, facts and
gists degrade to something useful (and reproducible in tests) instead of failing.
``memoryd.memory.llm`` re-exports the public names; import them from there.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

__all__ = [
    "CHARS_PER_TOKEN",
    "KEY_TERMS",
    "ExtractiveLLM",
    "extract_facts_by_pattern",
    "extractive_summary",
    "key_terms",
    "split_sentences",
]

CHARS_PER_TOKEN = 4  # rough English average; only used to size budgets
KEY_TERMS = 5
_MAX_TERM_LEN = 32  # longer letter runs are encoded blobs, not terms

_STOPWORDS = frozenset({
    "about", "above", "across", "after", "again", "against", "almost", "alone", "along",
    "already", "also", "although", "always", "among", "another", "anyone", "anything", "anyway",
    "anywhere", "aren", "around", "because", "been", "before", "behind", "being", "below",
    "beside", "besides", "between", "beyond", "both", "cannot", "could", "couldn", "didn", "does",
    "doesn", "doing", "done", "down", "during", "each", "either", "else", "enough", "even",
    "ever", "every", "everyone", "everything", "except", "from", "further", "gets", "give",
    "given", "goes", "going", "gone", "gonna", "gotta", "great", "hadn", "hasn", "have", "haven",
    "having", "hello", "hence", "here", "hers", "herself", "himself", "into", "itself", "just",
    "know", "last", "least", "less", "like", "likely", "made", "make", "many", "maybe", "might",
    "mine", "more", "most", "mostly", "much", "must", "myself", "near", "need", "needs",
    "neither", "never", "next", "none", "nothing", "okay", "once", "only", "onto", "other",
    "others", "otherwise", "ours", "ourselves", "over", "perhaps", "please", "quite", "rather",
    "really", "said", "same", "says", "seem", "seemed", "seems", "shall", "shan", "should",
    "shouldn", "since", "some", "someone", "something", "sometimes", "somewhat", "soon", "still",
    "such", "sure", "take", "than", "thank", "thanks", "that", "thats", "their", "theirs", "them",
    "themselves", "then", "there", "therefore", "these", "they", "thing", "things", "think",
    "this", "those", "though", "through", "thus", "together", "told", "took", "toward",
    "towards", "under", "unless", "until", "upon", "used", "using", "very", "want", "wants",
    "wasn", "well", "went", "were", "weren", "what", "whatever", "when", "whenever", "where",
    "whereas", "wherever", "whether", "which", "while", "whom", "whose", "will", "with", "within",
    "without", "would", "wouldn", "yeah", "your", "yours", "yourself",
    "yourselves",
})

_WORD = re.compile(r"[^\W\d_]{4,}")
_SENTENCE = re.compile(r"[^.!?\n]*[.!?]+|[^.!?\n]+")
_SPACES = re.compile(r"\s+")
_PREFERENCE = re.compile(r"\b(?:i\s+(?:like|prefer|enjoy)|my\s+favou?rite)\b", re.IGNORECASE)
_FACT = re.compile(
    r"\b(?:i\s+am|i['\u2019]m|my\s+name\s+is|i\s+work\s+(?:at|as)|i\s+live\s+in)\b", re.IGNORECASE)


class ExtractiveLLM:
    """No network, no randomness: leading sentences plus a "Key terms:" line.

    Used when no API key is configured, so summaries degrade to something useful
    (and reproducible in tests) instead of failing.
    """

    name = "extractive"

    def complete(self, system: str, prompt: str, max_tokens: int) -> str:
        """An extractive summary of ``prompt``; ``system`` is ignored (nothing to instruct)."""
        del system
        return extractive_summary([prompt], max_chars=max(1, max_tokens) * CHARS_PER_TOKEN)

    def __repr__(self) -> str:
        return "ExtractiveLLM()"


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``, split on . ! ? and newlines, whitespace-collapsed."""
    out = []
    for raw in _SENTENCE.findall(text):
        sentence = _clean(raw)
        if any(ch.isalnum() for ch in sentence):
            out.append(sentence)
    return out


def key_terms(texts: Iterable[str], limit: int = KEY_TERMS) -> list[str]:
    """The most frequent salient words (4+ letters, not stopwords); ties alphabetical."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(
            w for w in _WORD.findall(text.lower())
            if len(w) <= _MAX_TERM_LEN and w not in _STOPWORDS)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [term for term, _ in ranked[:max(0, limit)]]


def extractive_summary(texts: Sequence[str], max_chars: int = 600) -> str:
    """Leading distinct sentences plus a final "Key terms: ..." line, at most ``max_chars``.

    The key-terms line keeps the words keyword recall needs even when the leading
    sentences are about something else; it is dropped only if it would not fit.
    """
    if max_chars < 1:
        raise ValueError("max_chars must be positive")
    terms = key_terms(texts)
    terms_line = f"Key terms: {', '.join(terms)}" if terms else ""
    body_budget = max_chars - len(terms_line) - 1 if terms_line else max_chars
    if terms_line and body_budget < min(80, max_chars // 2):
        terms_line, body_budget = "", max_chars
    body = _leading_sentences(texts, body_budget)
    return "\n".join(part for part in (body, terms_line) if part)


def _leading_sentences(texts: Iterable[str], max_chars: int, max_sentences: int = 0) -> str:
    """Distinct sentences in order, joined by spaces, within ``max_chars``.

    The first sentence is clipped at a word boundary rather than dropped, so a
    single long paragraph still yields a summary.
    """
    chosen: list[str] = []
    length = 0
    for sentence in _distinct(s for text in texts for s in split_sentences(text)):
        extra = len(sentence) + (1 if chosen else 0)
        if length + extra > max_chars:
            if not chosen:
                chosen.append(_clip(sentence, max_chars))
            break
        chosen.append(sentence)
        length += extra
        if max_sentences and len(chosen) >= max_sentences:
            break
    return " ".join(chosen)


def extract_facts_by_pattern(texts: Sequence[str], limit: int = 3) -> list[str]:
    """First-person preference and fact sentences ("I prefer ...", "I live in ...").

    Questions are skipped: "Do you know what I like?" states nothing.
    """
    if limit < 1:
        return []
    hits = (
        sentence
        for text in texts
        for sentence in split_sentences(text)
        if not sentence.endswith("?") and (_PREFERENCE.search(sentence) or _FACT.search(sentence))
    )
    return _distinct(hits, limit)


# --- small text utilities (also used by memoryd.memory.llm) ------------------------


def _clean(text: str) -> str:
    """Whitespace collapsed to single spaces, ends stripped."""
    return _SPACES.sub(" ", text).strip()


def _clip(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` at a word boundary, with an ellipsis when cut."""
    if len(text) <= max_chars:
        return text
    if max_chars <= 1:
        return text[:max_chars]
    cut = text[:max_chars - 1]
    space = cut.rfind(" ")
    if space > max_chars // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def _distinct(items: Iterable[str], limit: int = 0) -> list[str]:
    """Items in first-seen order, duplicates (case-insensitive) dropped, at most ``limit``."""
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        key = item.casefold()
        if key in seen:
            continue
        seen.add(key)
        out.append(item)
        if limit and len(out) >= limit:
            break
    return out

