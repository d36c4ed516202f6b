"""Whether two texts state the same facts: the check every merge makes besides similarity.

An embedding puts "Order 4411 shipped" and "Order 4412 shipped" next to each other; a
merge of the two would answer a recall with the wrong order. So maintenance merges two
memories only when they state the same facts by this rule:

- the same *fact tokens*, in the same order: numbers (normalised: "4,411" is 4411,
  "5.00" is 5; a sign, a currency symbol before it or "%" after it is part of it),
  tokens with a digit in them (dates, times, versions, order numbers, codes, "10:30",
  "v1.2.3", "2024-03-05"), emails, URLs, UUIDs and words with "+", "#" or "&" in
  them ("C++"; case ignored), number words ("three"), month and weekday names,
  negations ("not", "n't", "no", "never", "without", ...; "doesn't" is "does not")
  and the marked side of opposite states ("off", "disabled", "failed", "dislikes", ...);
- the same *names*: every capitalised word of one, other than a common English word,
  appears (in any case) in the other ("Alice likes tea" is not "Bob likes tea").

Case, spacing and punctuation that is not part of a number or identifier do not count,
so true duplicates ("User prefers dark mode." and "user prefers  dark mode") still merge.
"""

from __future__ import annotations

import calendar
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Facts", "carries", "facts_of", "plain", "same_facts"]

# Cut from the ends of a whitespace-separated token before it is read ("(4411)," is
# 4411; "#4411" is 4411 too: the sign says "number", it is not part of it).
_EDGES_LEFT = "\"'([{<#\u2116\u201c\u2018\u00ab"
_EDGES_RIGHT = "\"')]}>.,;:!?\u2026\u201d\u2019\u00bb"
# One number with its sign, currency and percent: "4,411" (thousands grouped by
# commas), "4.5", "-$5.00", "+3%". Anything else with a digit is an identifier.
_NUMBER = re.compile(
    "(?P<sign>[-+\u2212])?(?P<cur>[$\u20ac\u00a3\u00a5\u20b9])?(?P<sign2>[-+\u2212])?"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)(?P<pct>%)?")
# A text's pieces, in order: a whitespace-separated token with a digit or an identifier's
# symbol in it ("4411", "v1.2.3", "user@x.com", "https://...", "C++", "C#", "AT&T"), read
# whole; else a word ("Alice's", "doesn't"). Tried at a token's start, the first
# alternative takes the whole token whenever it has such a character anywhere.
_PIECE = re.compile(r"(?P<fact>\S*?(?:\d|[@+#&]|://)\S*)|(?P<word>[^\W\d_]+(?:['\u2019][^\W\d_]+)*)")
_ALNUM = re.compile(r"[^\W_]")
# What ``plain`` drops from a text's end: only what ``_EDGES_RIGHT`` cuts from the last
# token anyway, and spaces.
_PLAIN_END = " .,;:!?\"')]}"

_NEGATIONS = frozenset({
    "not", "no", "never", "none", "nobody", "nothing", "nowhere", "neither", "nor",
    "without", "cannot", "nope"})
_NUMBER_WORDS = frozenset({
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
    "eighteen", "nineteen", "twenty", "thirty", "forty", "fifty", "sixty", "seventy",
    "eighty", "ninety", "hundred", "thousand", "million", "billion", "trillion", "dozen",
    "half", "once", "twice", "first", "second", "third", "fourth", "fifth", "sixth",
    "seventh", "eighth", "ninth", "tenth"})
_DATE_WORDS = frozenset(
    {name.lower() for name in (*calendar.month_name, *calendar.month_abbr,
                               *calendar.day_name, *calendar.day_abbr) if name}
    | {f"{name.lower()}s" for name in calendar.day_name}
    | {"today", "tomorrow", "yesterday", "tonight", "noon", "midnight", "am", "pm"})
# The marked side of opposite states: "Dark mode is disabled" is not "... enabled".
_OPPOSITES = frozenset({
    "off", "disabled", "disable", "false", "failed", "fail", "fails", "failing", "closed",
    "rejected", "denied", "inactive", "invalid", "unavailable", "cancelled", "canceled",
    "stopped", "lost", "down", "dislike", "dislikes", "disliked", "hate", "hates", "hated"})
_TOKEN_WORDS = _NUMBER_WORDS | _DATE_WORDS | _OPPOSITES
# Capitalised for being first in a sentence far more often than for being a name.
_COMMON = frozenset({
    "a", "an", "the", "this", "that", "these", "those", "it", "its", "i", "i'm", "i've",
    "i'd", "i'll", "we", "you", "he", "she", "they", "me", "my", "our", "your", "his", "her",
    "their", "there", "here", "in", "on", "at", "for", "to", "of", "from", "by", "with",
    "as", "and", "or", "but", "so", "if", "when", "then", "also", "after", "before",
    "yes", "ok", "okay", "please", "note", "is", "are", "was", "were", "be", "do", "does",
    "did", "has", "have", "had", "will", "would", "can", "could", "should", "what", "who",
    "why", "how", "where", "which", "all", "some", "any", "each", "every", "hi", "hello"})


@dataclass(frozen=True)
class Facts:
    """What a text states, as far as merging is concerned (see the module docstring)."""

    tokens: tuple[str, ...]  # fact tokens in order
    names: frozenset[str]  # capitalised words, lowercased
    words: frozenset[str]  # every word, lowercased (names are looked up in these)

    def same_as(self, other: Facts) -> bool:
        """Whether merging the two texts loses no fact."""
        return (self.tokens == other.tokens and self.names <= other.words
                and other.names <= self.words)


def facts_of(text: str) -> Facts:
    """The facts of ``text``, read in one pass over its pieces."""
    tokens: list[str] = []
    names: set[str] = set()
    words: set[str] = set()
    for found in _PIECE.finditer(text):
        word = found["word"]
        if word is None:
            token = found["fact"].lstrip(_EDGES_LEFT).rstrip(_EDGES_RIGHT)
            if _ALNUM.search(token):
                tokens.append(_number(token) or token.lower())
            continue
        lowered = word.lower().replace("\u2019", "'")
        if lowered.endswith("'s"):
            lowered = lowered[:-2]
        words.add(lowered)
        if lowered.endswith("n't"):
            tokens.append("not")  # "doesn't" is "does not"
        elif lowered in _NEGATIONS:
            tokens.append("not" if lowered == "cannot" else lowered)
        elif lowered in _TOKEN_WORDS:
            tokens.append(lowered)
        elif word[0].isupper() and lowered not in _COMMON:
            names.add(lowered)
    return Facts(tuple(tokens), frozenset(names), frozenset(words))


def _number(token: str) -> str | None:
    """``token`` as a normalised number ("-$4411.5", "12%"), or None if it is no number."""
    found = _NUMBER.fullmatch(token)
    if found is None:
        return None
    num = found["num"].replace(",", "")
    if "." in num:
        num = num.rstrip("0").rstrip(".")
    num = num.lstrip("0") or "0"
    negative = (found["sign"] or found["sign2"] or "") in ("-", "\u2212")
    return f"{'-' if negative and num != '0' else ''}{found['cur'] or ''}{num}{found['pct'] or ''}"


def plain(text: str) -> str:
    """``text`` lowercased, its whitespace collapsed and its trailing punctuation dropped:
    two texts with the same ``plain`` form state the same facts, without reading them
    (what most true duplicates need)."""
    return " ".join(text.lower().split()).rstrip(_PLAIN_END)


def same_facts(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` state the same facts, so that merging them loses none."""
    return plain(a) == plain(b) or facts_of(a).same_as(facts_of(b))


def carries(summary: Facts, texts: Iterable[str]) -> list[bool]:
    """For each of ``texts``, whether ``summary`` states all of its facts: each fact token
    (as often as the text has it, in any order) and each name."""
    have = Counter(summary.tokens)
    out = []
    for text in texts:
        facts = facts_of(text)
        out.append(not (Counter(facts.tokens) - have) and facts.names <= summary.words)
    return out
