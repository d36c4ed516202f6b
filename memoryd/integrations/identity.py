"""How the framework adapters name memoryd agents after a framework's identities.

A framework scopes memory by a tuple of names (Google ADK: an app and a user); memoryd by
one agent id. ``agent_id(*parts)`` joins the parts with ``/`` after escaping each one:
``%`` becomes ``%25`` and ``/`` becomes ``%2F``. An escaped part holds no ``/``, so the id
splits back into exactly its parts, and no two different tuples share an agent (the
adapters' isolation rests on this). A tuple whose parts hold neither character keeps the
name memoryd gave it before (``shop/ana``).

The first part comes first and ends at the first ``/``: a key scoped to
``scope_prefix(app)`` (``memoryd keys create --agent-prefix``) covers that app's agents
and no other app's, whatever its users are called, since no escaped user name can hold
the ``/`` that would reach out of it.

Older memoryd (ADK) joined the parts unescaped; ``legacy_splits`` tells which tuples an
old name may have come from, so an operator can move them (``memoryd rename-adk-agents``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memoryd import validation as check
from memoryd.errors import ValidationError

SEPARATOR = "/"
ESCAPE = "%"
_ESCAPES = {"%": "%25", "/": "%2F"}
_TO_ESCAPE = re.compile(r"[%/]")
_ESCAPED = re.compile(r"%(?:25|2F)")
# A part as ``escaped`` writes it: any "%" starts one of its two escapes.
_PART = re.compile(r"(?:[^%/]|%25|%2F)*")

# The ADK adapter's memories: their source, and the metadata key naming the (app_name,
# user_id) they were stored for, which older memoryd did not write: it tells the agents
# named by ``agent_id`` from those older memoryd named.
ADK_SOURCE = "adk"
ADK_SCOPE_KEY = "adk_scope"
# The old names that may differ from their pair's name now: a "%", or two "/" (POSIX).
LEGACY_PATTERN = "%|/.*/"


def escaped(part: str) -> str:
    """``part`` with ``%`` and ``/`` escaped, so it holds no ``/``."""
    return _TO_ESCAPE.sub(lambda m: _ESCAPES[m[0]], part)


def unescaped(part: str) -> str:
    """The inverse of ``escaped`` (for a part it wrote)."""
    return _ESCAPED.sub(lambda m: "%" if m[0] == "%25" else "/", part)


def agent_id(*parts: str) -> str:
    """The memoryd agent of a framework identity (its parts in order, most general
    first), validated as memoryd's agent ids are (``ValidationError`` naming
    ``agent_id`` when the escaped parts are too long together)."""
    return check.agent_id(SEPARATOR.join(escaped(part) for part in parts))


def scope_prefix(*parts: str) -> str:
    """The agent-id prefix of every identity that starts with ``parts`` (an app's
    users): what a key scoped to them names as its ``--agent-prefix``."""
    return "".join(escaped(part) + SEPARATOR for part in parts)


def parts_of(agent: str) -> tuple[str, ...] | None:
    """The parts ``agent_id`` made ``agent`` of, or None when it did not make it (a
    ``%`` that starts no escape)."""
    pieces = agent.split(SEPARATOR)
    if not all(_PART.fullmatch(piece) for piece in pieces):
        return None
    return tuple(unescaped(piece) for piece in pieces)


def legacy_splits(agent: str) -> list[tuple[str, str]]:
    """The (app_name, user_id) pairs older memoryd named ``agent`` for: it joined them
    with an unescaped ``/`` and refused blank ones, so a name with several ``/`` may
    have come from several pairs."""
    return [(agent[:at], agent[at + 1:]) for at, char in enumerate(agent)
            if char == SEPARATOR and agent[:at].strip() and agent[at + 1:].strip()]


def renamed_legacy(agent: str) -> list[tuple[tuple[str, str], str | None]]:
    """For each pair older memoryd may have named ``agent`` for, the pair and its agent
    now (None when escaping makes it longer than an agent id may be); empty when
    ``agent`` is already its one pair's name now."""
    pairs = legacy_splits(agent)
    if len(pairs) == 1 and _now_named(pairs[0]) == agent:
        return []
    return [(pair, _now_named(pair)) for pair in pairs]


def _now_named(pair: tuple[str, str]) -> str | None:
    try:
        return agent_id(*pair)
    except ValidationError:
        return None


@dataclass(frozen=True)
class LegacyAgent:
    """An agent older memoryd's ADK adapter named, and what becomes of it: ``status``
    is ``move`` (to ``target``), ``ambiguous`` (several pairs make the name: the
    operator picks one), ``mixed`` (older and newer adapters both wrote to it),
    ``unmatched`` (no pair makes it) or ``too long`` (its pair's name now is longer than
    an agent id may be)."""

    agent_id: str
    # Each (app_name, user_id) the name may stand for, and that pair's agent now.
    pairs: tuple[tuple[tuple[str, str], str | None], ...]
    status: str

    @property
    def target(self) -> str | None:
        return self.pairs[0][1] if self.status == "move" else None


def legacy_adk_agent(agent: str, *, scoped: int, unscoped: int) -> LegacyAgent | None:
    """What becomes of an agent holding ADK memories, ``scoped`` of them stored with
    their pair (``ADK_SCOPE_KEY``) and ``unscoped`` without; None when nothing: its name
    is its pair's name now, or only the newer adapter wrote to it."""
    pairs = tuple(renamed_legacy(agent))
    if (not pairs and legacy_splits(agent)) or not unscoped:
        return None
    status = ("mixed" if scoped else "unmatched" if not pairs
              else "ambiguous" if len(pairs) > 1 else "too long" if pairs[0][1] is None
              else "move")
    return LegacyAgent(agent_id=agent, pairs=pairs, status=status)
