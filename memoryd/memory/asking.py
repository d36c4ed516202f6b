"""What a question asks about: a named subject and one single-valued attribute ("Where
does Ilvar Ostberg live?" asks Ilvar Ostberg's residence), and what a memory states of
whom (``about``: its single-valued claims, read by the offline judge's rules when it is
stored).

Recall lifts the memories that state the asked attribute of the asked subject and lowers
those stating it of someone close to them ("Ilvar's sister lives in Porto"), by
``recall_fit_boost``: an embedding puts both near the question, and the relative's
sentence often mirrors the question's words more closely than the answer does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from memoryd.memory.judging import claims_of
from memoryd.memory.judging_rules import SINGLE, mention_words, relation_of

# Question words per attribute: what someone asking for it says.
_ASKS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (attribute, re.compile(pattern, re.IGNORECASE)) for attribute, pattern in (
        ("email", r"\be-?mail"),
        ("phone", r"\b(?:phone|mobile|cell)\b|\bnumber\b.*\b(?:call|reach)\b"),
        ("address", r"\b(?:postal|home|street|mailing)\s+address\b"),
        ("manager", r"\b(?:manager|boss|line manager|supervisor|reports? to)\b"),
        ("role", r"\b(?:job title|title|role|position)\b|\bwhat does \S+(?: \S+)? do\b"),
        ("employer", r"\b(?:work|works|working)\s+(?:for|at)\b|\bemployer\b"
                     r"|\bwhere does .+ work\b|\bwhich company\b"),
        ("residence", r"\bwhere (?:does|do|did) .+ (?:live|stay|reside)\b|\blives?\b"
                      r"|\bbased\b|\bhome town\b"),
        ("vehicle", r"\b(?:car|drive|drives|vehicle)\b"),
        ("pet", r"\bpets?\b"),
        ("relationship", r"\b(?:partner|dating|girlfriend|boyfriend|wife|husband|spouse|"
                         r"married to|seeing)\b"),
        ("preference", r"\bfavou?rite\b|\bprefer"),
    ))
# Relation words that name the asked attribute itself ("P's manager" asks P's manager).
_ATTRIBUTE_NOUNS = {"manager": frozenset({"manager", "boss", "supervisor"}),
                    "relationship": frozenset({"partner", "wife", "husband", "spouse",
                                               "girlfriend", "boyfriend"})}
_POSSESSIVE = re.compile(r"['\u2019]s\s+([a-z-]+)", re.IGNORECASE)


@dataclass(frozen=True)
class Asked:
    """A question's subject (name words, and the relatives after it) and attribute."""

    names: frozenset[str]
    relations: tuple[str, ...]
    attribute: str


def asked(query: str) -> Asked | None:
    """The subject and attribute ``query`` asks about, if it names someone and asks for
    exactly one single-valued attribute; None otherwise (most queries)."""
    names = mention_words(query)
    if not names:
        return None
    attributes = [a for a, pattern in _ASKS if pattern.search(query)]
    if len(attributes) != 1:
        return None
    attribute = attributes[0]
    own = _ATTRIBUTE_NOUNS.get(attribute, frozenset())
    relations = tuple(r for w in _POSSESSIVE.findall(query)
                      if (r := relation_of(w)) and r not in own)
    return Asked(names, relations, attribute)


def about(text: str) -> list[str]:
    """What ``text`` states of whom, one ``names|relations|attribute`` string per held
    single-valued claim (names space-separated, relations by ``/``): stored with each
    memory, so recall compares without reading the text."""
    found = dict.fromkeys(
        f"{' '.join(sorted(c.subject.names))}|{'/'.join(c.subject.relations)}|{c.attribute}"
        for c in claims_of(text)
        if c.positive and c.attribute in SINGLE and c.subject.names)
    return list(found)


def fit(question: Asked, stated: Sequence[str] | None) -> int:
    """+1: the memory states the asked attribute of the asked subject; -1: only of
    someone close to the subject (or, asked of a relative, of the subject); 0 otherwise."""
    other = False
    for entry in stated or ():
        names, relations, attribute = entry.split("|")
        if attribute != question.attribute or not question.names <= frozenset(names.split()):
            continue
        if tuple(r for r in relations.split("/") if r) == question.relations:
            return 1
        other = True
    return -1 if other else 0
