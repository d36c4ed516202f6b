"""The turn's context: what an agent should know before its next reply, from working
memory and long-term memory together, within the caller's budget.

Long-term memories come by three strategies: similar to the input (recall), recent in
this thread (the newest messages of session ``thread_id`` that already left working
memory), and naming the input's entities (the names in the query and those the thread
keeps, through the agent's lexeme index). Each strategy ranks its own; the memories are
deduplicated and fused by weighted reciprocal rank, so a memory two strategies agree on
rises. The prompt block puts the working state first, then the thread's newest messages
(at most half the budget while memories wait), then the memories in rank order, each
whole or not at all."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd.memory.keywords import AGENT_LEXEMES, SAME_AGENT
from memoryd.memory.rows import select_list, to_memory
from memoryd.types import Memory
from memoryd.working.model import ContextItem, TurnContext, WorkingMemory

# How much each strategy's ranking counts, and the reciprocal-rank constant.
WEIGHTS = {"similar": 1.0, "entities": 0.6, "recent": 0.4}
RRF_K = 10
CHARS_PER_TOKEN = 4  # a budget in tokens, estimated without a tokenizer

ENTITY_POOL = 200  # matches of the names read before ranking: bounded for any agent
MAX_NAMES = 16
_NAME = re.compile(r"\b[A-Z][\w'\u2019-]*\w")
_NOT_NAMES = frozenset({
    "I", "I'm", "I've", "A", "An", "The", "What", "Where", "When", "Who", "Whom", "Whose",
    "Why", "How", "Which", "Is", "Are", "Was", "Were", "Do", "Does", "Did", "Can", "Could",
    "Should", "Would", "Will", "Has", "Have", "Had", "Tell", "Please", "My", "Our", "Your",
    "It", "In", "On", "At", "And", "Or", "But", "If", "Then", "So", "Yes", "No", "Hi",
    "Hello", "Thanks", "We", "You", "He", "She", "They", "This", "That"})


def named(session: Session, agent_id: str, names: Sequence[str], limit: int,
          as_of: datetime | None) -> list[Memory]:
    """The strategy of the input's entities: memories holding the names' stems."""
    if not names:
        return []
    sql = _ENTITY_SQL.format(columns=select_list(), lexemes=AGENT_LEXEMES, same=SAME_AGENT,
                             validity=_validity(as_of), pool=ENTITY_POOL)
    rows = session.execute(text(sql), {"agent_id": agent_id, "names": " ".join(names),
                                       "k": limit, "as_of": as_of}).mappings().all()
    return [to_memory(row) for row in rows]


def assemble(similar: Sequence[Memory], named: Sequence[Memory], recent: Sequence[Memory],
             working: WorkingMemory | None, *, limit: int, budget: int | None,
             unit: str) -> TurnContext:
    """The three strategies' memories fused (``recent`` oldest first, as a session lists
    them), then rendered with ``working`` within ``budget``."""
    ranked = {"similar": list(similar), "entities": list(named),
              "recent": list(reversed(recent))}
    return render(fuse(ranked, limit), working, budget=_chars(budget, unit), unit=unit)


# The agent's memories holding any of the names' stems, through the (agent, lexeme) GIN
# index; a bounded pool of them ranked by how many names they hold, newest first.
_ENTITY_SQL = """
WITH q AS (
    SELECT CAST(string_agg(quote_literal(left(md5(:agent_id), 12) || a), ' | ') AS tsquery)
               AS any_q,
           array_agg(CAST(quote_literal(a) AS tsquery)) AS each_q
    FROM unnest(tsvector_to_array(to_tsvector('english', :names))) AS a),
pool AS (
    SELECT {columns}, m.tsv FROM memories m, q
    WHERE {same} AND {lexemes} @@ q.any_q AND m.archived_at IS NULL AND {validity}
    LIMIT {pool})
SELECT m.* FROM pool m, q
ORDER BY (SELECT count(*) FROM unnest(q.each_q) e WHERE m.tsv @@ e) DESC, m.created_at DESC
LIMIT :k
"""


def _validity(as_of: datetime | None) -> str:
    if as_of is None:
        return "m.valid_to IS NULL AND CAST(:as_of AS timestamptz) IS NULL"
    return ("coalesce(m.valid_from, m.created_at) <= :as_of "
            "AND (m.valid_to IS NULL OR m.valid_to > :as_of)")


def entity_names(query: str, kept: Iterable[str] = ()) -> list[str]:
    """The names a query mentions (capitalised words that are not question or function
    words), with those the thread keeps, first seen first."""
    found = [word for word in _NAME.findall(query) if word not in _NOT_NAMES]
    return list(dict.fromkeys([*found, *kept]))[:MAX_NAMES]


def fuse(ranked: dict[str, list[Memory]], limit: int) -> list[ContextItem]:
    """Deduplicate the strategies' rankings and order by weighted reciprocal rank."""
    scores: dict[str, float] = {}
    found: dict[str, tuple[Memory, list[str]]] = {}
    for strategy, memories in ranked.items():
        for rank, memory in enumerate(memories, start=1):
            key = str(memory.id)
            if key in found and strategy in found[key][1]:
                continue  # a repeated message of the thread counts once
            scores[key] = scores.get(key, 0.0) + WEIGHTS[strategy] / (RRF_K + rank)
            found.setdefault(key, (memory, []))[1].append(strategy)
    order = sorted(scores, key=lambda key: (-scores[key], key))[:limit]
    return [ContextItem(memory=found[key][0], score=round(scores[key], 6),
                        strategies=found[key][1]) for key in order]


def render(chosen: Sequence[ContextItem], working: WorkingMemory | None, *,
           budget: int | None, unit: str) -> TurnContext:
    """The prompt block within ``budget`` characters (None: no limit), and what it holds."""
    left = math.inf if budget is None else budget
    lines: list[str] = []
    state = _state_lines(working) if working is not None and working.version else []
    for line in state:
        if len(line) + 1 <= left:
            lines.append(line)
            left -= len(line) + 1
    messages, left = _messages(working, left, share=0.5 if chosen else 1.0)
    lines += messages
    kept, memory_lines = _memories(chosen, left)
    lines += memory_lines
    prompt = "\n".join(lines)
    used = len(prompt) if unit == "chars" else math.ceil(len(prompt) / CHARS_PER_TOKEN)
    return TurnContext(context=prompt, working=working if working and working.version else None,
                       memories=kept, messages_included=max(0, len(messages) - 1),
                       budget=None if budget is None else budget, unit=unit, used=used)


def _state_lines(working: WorkingMemory) -> list[str]:
    lines = ["## Working memory"]
    if working.topic:
        lines.append(f"Topic: {working.topic}")
    if working.entities:
        lines.append(f"Entities: {', '.join(working.entities)}")
    if working.flags:
        lines.append(f"Flags: {', '.join(working.flags)}")
    if working.counters:
        lines.append("Counters: " + ", ".join(f"{k}={v}" for k, v in working.counters.items()))
    lines += [f"Variable {name}: {json.dumps(value, ensure_ascii=False)}"
              for name, value in working.variables.items()]
    return lines


def _messages(working: WorkingMemory | None, left: float,
              share: float) -> tuple[list[str], float]:
    """The thread's newest messages that fit ``share`` of what is left, oldest first."""
    if working is None or not working.messages:
        return [], left
    header = "### Recent messages"
    room = left * share - (len(header) + 1)
    picked: list[str] = []
    for message in reversed(working.messages):
        line = f"{message.role}: {' '.join(message.content.split())}"
        if len(line) + 1 > room:
            break
        picked.append(line)
        room -= len(line) + 1
    if not picked:
        return [], left
    block = [header, *reversed(picked)]
    return block, left - sum(len(line) + 1 for line in block)


def _memories(chosen: Sequence[ContextItem], left: float
              ) -> tuple[list[ContextItem], list[str]]:
    """Memories in rank order, each whole or not at all, grouped by category as the
    block shows them."""
    header = "## Relevant memories"
    room = left - (len(header) + 1)
    kept: list[tuple[ContextItem, str]] = []
    for item in chosen:
        line = _memory_line(item.memory)
        cost = len(line) + 1 + len(item.memory.category) + 6  # its category's heading, at most
        if cost <= room:
            kept.append((item, line))
            room -= cost
    if not kept:
        return [], []
    groups: dict[str, list[str]] = {}
    for item, line in kept:
        groups.setdefault(item.memory.category, []).append(line)
    lines = [header]
    for category, members in groups.items():
        lines += [f"### {category.capitalize()}", *members]
    return [item for item, _ in kept], lines


def _memory_line(memory: Memory) -> str:
    return f"- {' '.join(memory.content.split())} ({memory.created_at.date().isoformat()})"


def _chars(budget: int | None, unit: str) -> int | None:
    if budget is None:
        return None
    return budget * CHARS_PER_TOKEN if unit == "tokens" else budget
