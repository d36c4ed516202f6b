"""Heuristics used when a memory is stored without a category or importance.

Cheap, deterministic keyword rules: they run on every store, so no LLM here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# Days until recency halves; None means the category never decays.
HALF_LIFE_DAYS: dict[str, float | None] = {
    "task": 7, "context": 14, "event": 14, "fact": 30, "summary": 30,
    "reflection": 60, "preference": 90, "decision": None,
}

_RULES: dict[str, tuple[str, ...]] = {
    "decision": (r"\bdecided\b", r"\bdecision\b", r"\bwe (?:will|'ll) go with\b", r"\bchose\b",
                 r"\bagreed\b", r"\bsettled on\b", r"\bgoing forward\b", r"\bfrom now on\b"),
    "preference": (r"\bprefers?\b", r"\bpreferred\b", r"\bfavou?rite\b", r"\blikes?\b",
                   r"\bloves?\b", r"\bhates?\b", r"\bdislikes?\b", r"\benjoys?\b",
                   r"\brather\b", r"\bwants?\b"),
    "task": (r"\btodo\b", r"\bto-do\b", r"\bneed to\b", r"\bneeds to\b", r"\bmust\b",
             r"\bdeadline\b", r"\bremind\b", r"\bschedule\b", r"\bby (?:monday|tuesday|"
             r"wednesday|thursday|friday|tomorrow|tonight|next week)\b", r"\bfollow up\b"),
    "event": (r"\byesterday\b", r"\blast (?:week|month|year|night)\b", r"\bhappened\b",
              r"\bmeeting\b", r"\battended\b", r"\bwent to\b", r"\bon (?:monday|tuesday|"
              r"wednesday|thursday|friday|saturday|sunday)\b", r"\b(?:19|20)\d\d\b"),
    "reflection": (r"\bi (?:think|feel|realized|learned|noticed)\b", r"\blesson\b",
                   r"\bin hindsight\b", r"\breflect", r"\binsight\b"),
    "summary": (r"^summary\b", r"\bin summary\b", r"\btl;?dr\b", r"\boverall\b"),
    "context": (r"\bcurrently\b", r"\bright now\b", r"\bworking on\b", r"\bthis session\b",
                r"\bcontext\b", r"\bproject\b"),
    "fact": (r"\bis\b", r"\bare\b", r"\bwas\b", r"\bhas\b", r"\bmy name\b", r"\bi am\b",
             r"\bi work\b", r"\bi live\b", r"\blocated\b", r"\bborn\b"),
}
_COMPILED = {cat: [re.compile(p, re.IGNORECASE) for p in pats] for cat, pats in _RULES.items()}
# Ties resolve toward the category that decays slowest and matters most.
_PRIORITY = ("decision", "preference", "task", "event", "summary", "reflection", "context", "fact")

_SIGNALS = re.compile(
    r"\b(always|never|remember|important|importantly|critical|must|prefer|prefers|decided|"
    r"decision|key|crucial|essential|don't forget|do not forget|allergic|password|deadline)\b",
    re.IGNORECASE)
_ROLE_WEIGHT = {"user": 0.15, "tool": 0.05, "assistant": 0.05, "system": 0.0, None: 0.08}


@dataclass(frozen=True)
class Classification:
    category: str
    confidence: float


def classify(content: str) -> Classification:
    """Pick a category by keyword rules; confidence grows with the margin of the win."""
    scores = {cat: sum(1 for rx in rxs if rx.search(content)) for cat, rxs in _COMPILED.items()}
    best = max(_PRIORITY, key=lambda cat: (scores[cat], -_PRIORITY.index(cat)))
    if scores[best] == 0:
        return Classification("fact", 0.3)
    runner_up = max(v for c, v in scores.items() if c != best)
    margin = scores[best] - runner_up
    return Classification(best, round(min(0.95, 0.5 + 0.15 * scores[best] + 0.1 * margin), 2))


def importance(content: str, role: str | None = None, category: str | None = None) -> float:
    """0..1 from length (diminishing), role (user > assistant > system) and signal words."""
    words = len(content.split())
    length_part = min(0.25, 0.06 * math.log1p(words))
    signal_part = min(0.3, 0.12 * len(_SIGNALS.findall(content)))
    category_part = {"decision": 0.2, "preference": 0.1, "task": 0.05}.get(category or "", 0.0)
    score = 0.2 + length_part + signal_part + category_part + _ROLE_WEIGHT.get(role, 0.08)
    return round(min(1.0, max(0.0, score)), 3)
