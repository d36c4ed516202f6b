"""The judges of supersession: does a new memory make an old one no longer true?

When an agent stores "Ilvar moved to Oslo last week" while it holds "Ilvar lives in
Lisbon", the old memory should be marked superseded; "Ilvar's sister lives in Oslo" or
"Ilvar also took up chess" should leave it alone. Two judges answer per (new, old) pair:

- the offline judge reads both texts into claims (``judging_rules``: subject, attribute,
  value, whether a cue says the value is new) and compares them: same subject and
  single-valued attribute with a different value is ``replaces`` when the new text has a
  cue, ``conflicts`` (the caller orders them by time) when it has none;
- the LLM judge asks the configured model once per store batch, one line per pair.

``combine`` turns the two into one decision; ``SUPERSEDE_AT`` says which decisions are
applied and which wait for review. Nothing here touches the database.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from memoryd.errors import LLMError
from memoryd.memory.judging_rules import (
    ANY,
    MAX_TEXT_CHARS,
    MULTI,
    SINGLE,
    Claim,
    Subject,
    mention_words,
    read_claims,
    relation_of,
    text_words,
)
from memoryd.memory.llm import LLM, is_fallback

__all__ = ["SUPERSEDE_AT", "Judgement", "Verdict", "combine", "judge_offline", "judge_with_llm",
           "may_replace", "parse_judgements", "subjects"]

Verdict = Literal["replaces", "conflicts", "additive", "unrelated"]

SUPERSEDE_AT = 0.8  # at or above: applied; below (but replaces/conflicts): review queue


@dataclass(frozen=True)
class Judgement:
    """One judge's view of one (new, old) pair."""

    verdict: Verdict  # see the module docstring and the LLM prompt below
    confidence: float  # 0..1
    attribute: str | None  # "residence", "employer", ..., None when no attribute is shared
    judge: str  # "offline" or "llm"


# Confidences of the offline judge: sure only when subject and attribute are both clear.
_CLEAR = 0.9  # both patterns name the attribute, the subjects are the same name
_LIKELY = 0.8  # one side's attribute is read from a loose verb but the topic matches
_PROBABLE = 0.75  # a preference whose topic one side does not say ("now prefers tea")
_UNSURE = 0.65  # the attribute or subject is a guess: review, never applied alone
_SAME_VALUE = 0.85
_MANY_VALUES = 0.8
_OTHER_SUBJECT = 0.9
_NOTHING_READ = 0.3
_RANK = {"unrelated": 0, "additive": 1, "conflicts": 2, "replaces": 3}


def claims_of(text: str) -> tuple[Claim, ...]:
    """``read_claims``, remembered: a store batch judges each new text against several
    candidates, and a memory is a candidate of many later stores."""
    return _claims(text[:MAX_TEXT_CHARS])


@lru_cache(maxsize=4096)
def _claims(text: str) -> tuple[Claim, ...]:
    return tuple(read_claims(text))


def judge_offline(new: str, old: str) -> Judgement:
    """The pattern judge: the strongest verdict any pair of the two texts' claims gives."""
    new_claims, old_claims = claims_of(new), claims_of(old)
    best = Judgement("unrelated", _NOTHING_READ, None, "offline")
    for n in new_claims:
        for o in old_claims:
            found = _pair(n, o)
            if (_RANK[found.verdict], found.confidence) > (_RANK[best.verdict], best.confidence):
                best = found
    if not old_claims:
        return _ended_unread(new_claims, old) or best
    return best


_POSSESSED = re.compile(r"['\u2019]s\s+([\w-]+)")
# A past event ("gave a talk at X", "visited X") stays true when X's value ends: only a
# statement in the present ("gets around in a X") is judged replaced without review.
_PAST = re.compile(r"\b(?:\w+ed|was|were|had|gave|went|met|got|took|made|saw|came|left|"
                   r"spent|bought|sold|did|ran|flew|drove|wrote|said|told|ate|won)\b",
                   re.IGNORECASE)


def _ended_unread(new_claims: Sequence[Claim], old: str) -> Judgement | None:
    """The new text ends a value ("left X", "sold the X", "has gone off X") that the old
    text, about the same person and no one close to them, names in words no pattern
    reads ("gets around in a X"): the value the new text ended is what the old one said."""
    if any(relation_of(w) for w in _POSSESSED.findall(old)):
        return None
    names, words = mention_words(old), text_words(old)
    for ended in new_claims:
        if (ended.positive or not ended.value or not ended.subject.names
                or ended.subject.relations or not ended.subject.names <= names
                or not ended.value <= words):
            continue
        stated = next((c.attribute for c in new_claims if c.positive
                       and c.subject == ended.subject and c.attribute in SINGLE), None)
        attribute = stated or (ended.attribute if ended.attribute in SINGLE else None)
        return _judged("replaces", _UNSURE if _PAST.search(old) else _LIKELY, attribute)
    return None


def may_replace(text: str) -> bool:
    """Whether the offline judge can find ``text`` replacing anything, or replaced: it
    states, or ends, a value of a single-valued attribute. Most memories do not, and
    with no LLM beside it their candidates need not be looked for."""
    return any(c.attribute in SINGLE or c.attribute == ANY for c in claims_of(text))


def subjects(text: str) -> frozenset[str]:
    """The named entities a text is about, lower-cased words usable as keywords
    ("ilvar", "ostberg"): the coordinator's candidate search keeps only memories sharing one.

    The subjects of its claims when it has any named one (not the values: "Oslo" in "Ilvar
    moved to Oslo" is not what it is about); else every name in it, so a text the patterns
    do not read still finds its candidates.
    """
    named = {w for c in claims_of(text) for w in c.subject.names if w != "we"}
    return frozenset(named) if named else mention_words(text)


def _pair(n: Claim, o: Claim) -> Judgement:
    """What one new claim says about one old claim."""
    same = _same_subject(n.subject, o.subject)
    if same is False:
        return _judged("unrelated", _OTHER_SUBJECT, None)
    attribute = _shared_attribute(n, o)
    if attribute is None:
        return _judged("unrelated", _UNSURE, None)
    if attribute in MULTI:
        return _judged("additive", _MANY_VALUES, attribute)
    verdict, confidence = _single(n, o)
    if same is None and verdict in ("replaces", "conflicts"):
        confidence = min(confidence, _UNSURE)
    return _judged(verdict, confidence, attribute)


def _single(n: Claim, o: Claim) -> tuple[Verdict, float]:
    """Verdict for two claims on one single-valued attribute of one subject."""
    equal = _same_value(n.value, o.value)
    if not n.positive:  # "left X", "no longer ...": ends the old value if it names it
        if o.positive and (equal or not n.value):
            return "replaces", _ended_confidence(n, o)
        return "unrelated", _UNSURE
    if not o.positive:  # the old text ended a value; the new states one
        if equal and n.cue:
            return "replaces", _LIKELY
        return ("conflicts", _UNSURE) if equal else ("unrelated", _UNSURE)
    if equal:
        return "additive", _SAME_VALUE
    if n.also or (n.attribute == o.attribute == "preference" and not (n.strong or o.strong)):
        return "additive", _UNSURE
    if n.attribute == o.attribute == "preference" and not (n.topic or o.topic or n.value & o.value):
        return "unrelated", _UNSURE  # "prefers Python", "prefers dark mode": topics unknown
    confidence = _confidence(n, o)
    if not n.cue:  # no word says which is newer: only two clear statements conflict surely
        return "conflicts", confidence if confidence >= _CLEAR else min(confidence, _PROBABLE)
    return "replaces", confidence


def _ended_confidence(n: Claim, o: Claim) -> float:
    """How sure "no longer X" ends the old value: a generic "left Lisbon" may be a trip."""
    if n.attribute != ANY and n.value:
        return _CLEAR
    return _UNSURE if o.attribute == "residence" else _LIKELY


def _confidence(n: Claim, o: Claim) -> float:
    """How sure two different values of one attribute are about the same thing."""
    if ANY in (n.attribute, o.attribute):
        return _UNSURE
    if n.attribute == "preference" and (n.topic is None or o.topic is None):
        return _PROBABLE if n.strong and o.strong else _UNSURE
    if n.strong and o.strong:
        return _CLEAR
    return _LIKELY


def _shared_attribute(n: Claim, o: Claim) -> str | None:
    """The attribute both claims are about, if any: a generic change ("left X") shares
    one with whatever claim holds the value it names; a preference needs the same topic."""
    if n.attribute == ANY and o.attribute == ANY:
        return None
    if ANY in (n.attribute, o.attribute):
        named = o.attribute if n.attribute == ANY else n.attribute
        if named not in SINGLE or (not _same_value(n.value, o.value) and named != "preference"):
            return None
        return named
    if n.attribute != o.attribute:
        return None
    if n.topic and o.topic and n.topic != o.topic:
        return None
    return n.attribute


def _same_subject(a: Subject, b: Subject) -> bool | None:
    """True, False, or None when either is unknown ("she" with no name before it)."""
    if a.relations != b.relations:  # "her sister" is never she, whoever she is
        return False
    if not a.names or not b.names:
        return None
    return a.names <= b.names or b.names <= a.names


def _same_value(a: frozenset[str], b: frozenset[str]) -> bool:
    return bool(a) and bool(b) and (a <= b or b <= a)


def _judged(verdict: Verdict, confidence: float, attribute: str | None) -> Judgement:
    return Judgement(verdict, confidence, attribute, "offline")


# --- the LLM judge ------------------------------------------------------------------------

_ATTRIBUTES = SINGLE | MULTI
_TEXT_CHARS = 600  # per memory in the prompt: a pair is about one fact, not an essay
_SYSTEM = (
    "You judge whether a newly stored memory makes an older memory no longer true. For each "
    "numbered pair, NEW was just stored and OLD is an earlier memory. Verdicts:\n"
    "replaces: NEW states a different value of a single-valued attribute (where someone "
    "lives, employer, job title, manager, phone, email, postal address, vehicle, pet, "
    "partner, a preference or decision) of the same subject OLD states it for, and NEW's "
    "own words say the value changed or is the current one (moved to, now, new, left, "
    "switched, no longer), or NEW says OLD's value no longer holds;\n"
    "conflicts: same subject and attribute, different values, and neither text says which "
    "is newer (the order they were stored in does not count);\n"
    "additive: same subject and an attribute that holds many values at once (hobbies, places "
    "visited, allergies, languages, children), or the same value restated;\n"
    "unrelated: anything else, including a statement about someone else (a relative, "
    "colleague, friend or neighbour of the person).\n"
    "Reply with exactly one line per pair, in order: <number>: <verdict> <confidence> "
    "<attribute>, where confidence is from 0 to 1 and attribute is one of: "
    f"{' '.join(sorted(_ATTRIBUTES))} none. Example: 1: replaces 0.92 residence\n"
    "No other text.")
_LINE = re.compile(
    r"^\s*(?:[-*]\s*)?`?\[?(?P<n>\d{1,4})\]?\s*[:.)]\s*(?P<verdict>replaces|conflicts|additive|"
    r"unrelated)\s+(?P<conf>[01](?:\.\d+)?|\.\d+)(?:\s+(?P<attr>[a-z_]+))?\s*\.?`?\s*$",
    re.IGNORECASE)


def judge_with_llm(llm: LLM, pairs: Sequence[tuple[str, str]]) -> list[Judgement]:
    """One LLM call for a whole store batch: each (new, old) pair judged; `LLMError`/
    `LLMUnavailable` propagate (memoryd.errors); an unparsable line -> Judgement("unrelated", 0.0,
    None, "llm") for that pair (never guess).

    The offline fallback (``ExtractiveLLM``) cannot judge: it raises ``LLMError`` rather
    than answer "unrelated" for every pair, which would send each offline verdict to review.
    """
    if not pairs:
        return []
    if is_fallback(llm):
        raise LLMError(f"{llm.name}: no LLM judge without a model; use judge_offline")
    blocks = [f"{i}.\nNEW: {_prompt_text(new)}\nOLD: {_prompt_text(old)}"
              for i, (new, old) in enumerate(pairs, start=1)]
    reply = llm.complete(_SYSTEM, "\n\n".join(blocks), 16 + 12 * len(pairs))
    return parse_judgements(reply, len(pairs))


def parse_judgements(reply: str, count: int) -> list[Judgement]:
    """One judgement per pair from "<n>: <verdict> <confidence> <attribute>" lines.

    Strict: a pair whose line is missing, malformed, out of range (confidence above 1) or
    given twice with different answers is "unrelated" at 0.0; other lines are ignored.
    An attribute outside the known ones is kept as None, the verdict stands.
    """
    seen: dict[int, Judgement | None] = {}
    for line in reply.splitlines():
        found = _LINE.match(line)
        if found is None:
            continue
        number, confidence = int(found["n"]), float(found["conf"])
        if not 1 <= number <= count or confidence > 1:
            continue
        attribute = (found["attr"] or "").lower()
        verdict: Verdict = found["verdict"].lower()  # type: ignore[assignment]
        judged = Judgement(verdict, confidence,
                           attribute if attribute in _ATTRIBUTES else None, "llm")
        seen[number] = judged if seen.get(number, judged) == judged else None
    blank = Judgement("unrelated", 0.0, None, "llm")
    return [seen.get(i) or blank for i in range(1, count + 1)]


def _prompt_text(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _TEXT_CHARS else flat[:_TEXT_CHARS - 1] + "\u2026"


# --- both -----------------------------------------------------------------------------------

_SUPERSEDING = ("replaces", "conflicts")
_DISAGREED = round(SUPERSEDE_AT - 0.1, 2)  # below the threshold: a person decides


def combine(offline: Judgement, llm: Judgement | None) -> tuple[Verdict, float, str]:
    """The decision when both judged: (verdict, confidence, judge label "offline", "llm" or
    "offline+llm"). Both say replaces/conflicts -> that, the higher confidence. They disagree
    (one says replaces/conflicts, the other additive/unrelated) -> "conflicts" with a
    confidence below SUPERSEDE_AT (review). llm None -> offline as is.

    When both supersede, "replaces" wins over "conflicts" (one judge saw which is newer) and
    the confidence is the higher: a second judge agreeing never lowers it. When neither
    supersedes, the LLM's verdict stands (it read more than patterns).
    """
    if llm is None:
        return offline.verdict, offline.confidence, offline.judge
    both = "offline+llm"
    says = (offline.verdict in _SUPERSEDING, llm.verdict in _SUPERSEDING)
    if all(says):
        verdict: Verdict = "replaces" if "replaces" in (offline.verdict, llm.verdict) else \
            "conflicts"
        return verdict, max(offline.confidence, llm.confidence), both
    if any(says):
        sayer = offline if says[0] else llm
        return "conflicts", min(sayer.confidence, _DISAGREED), both
    if offline.verdict == llm.verdict:
        return llm.verdict, max(offline.confidence, llm.confidence), both
    return llm.verdict, llm.confidence, llm.judge
