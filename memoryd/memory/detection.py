"""Replaced facts found at store time (and by the ``reconcile`` job): each new memory is
compared with its candidates, the agent's current memories nearest in meaning that share
a named subject with it, and each pair is judged (``memoryd.memory.judging``).

A pair judged to state two values of one single-valued attribute of one subject is
ordered by time: the memory that became true later replaces the other, whichever was
stored first (a bulk import can bring the old value last). At or above
``judging.SUPERSEDE_AT`` the supersession is applied; below it, or where the judges
disagree, it waits in the review queue (``supersession.queue_review``).

Keyed memories are left out on both sides: a key is the caller's own identity for a fact
(a store under the same key replaces it), so memoryd never infers that a keyed memory
replaces, or is replaced by, another (two framework items under different keys stay two).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd.config import Settings
from memoryd.memory import judging, supersession
from memoryd.memory import llm as llm_mod
from memoryd.memory.supersession import Decision
from memoryd.types import StoreItem, StoreResult

CANDIDATES = 6  # per new memory: the nearest in meaning among those sharing a subject
# Memories sharing a subject that are looked at, newest first: bounds the work when a
# subject (the agent's own user, say) is named in thousands of memories.
SUBJECT_POOL = 500

_CANDIDATES = text(f"""
SELECT f.id AS fresh_id, c.id, c.content, coalesce(c.valid_from, c.created_at) AS valid_from
FROM unnest(CAST(:ids AS uuid[]), CAST(:subjects AS text[])) AS f(id, subjects)
JOIN memories n ON n.id = f.id AND n.agent_id = :agent_id AND n.key IS NULL
CROSS JOIN LATERAL (
    SELECT p.id, p.content, p.valid_from, p.created_at
    FROM (SELECT m.id, m.content, m.valid_from, m.created_at, m.embedding
          FROM memories m
          WHERE (m.agent_id = :agent_id) IS TRUE
            AND memoryd_agent_lexemes(m.agent_id, m.tsv) @@ (
                SELECT CAST(string_agg(quote_literal(left(md5(:agent_id), 12) || l), ' | ')
                            AS tsquery)
                FROM unnest(tsvector_to_array(to_tsvector('english', f.subjects))) AS l)
            AND m.valid_to IS NULL AND m.archived_at IS NULL AND m.id <> n.id
            AND m.key IS NULL
            AND m.embedding_model = n.embedding_model
          ORDER BY m.created_at DESC LIMIT {SUBJECT_POOL}) p
    ORDER BY p.embedding <=> n.embedding LIMIT :k) c
""")
_FRESH = text("""SELECT id, content, coalesce(valid_from, created_at) AS valid_from
                 FROM memories WHERE agent_id = :agent_id AND id = ANY(CAST(:ids AS uuid[]))
                   AND valid_to IS NULL""")


@dataclass(frozen=True)
class Judges:
    """Who judges: the offline judge always, an LLM beside it when one is configured."""

    llm: llm_mod.LLM | None = None

    @classmethod
    def configured(cls, settings: Settings, llm: llm_mod.LLM | None = None) -> Judges | None:
        """The judges ``settings.judge`` asks for (None: judging is off); ``llm`` stands
        in for the configured LLM."""
        if settings.judge == "off":
            return None
        if settings.judge == "offline":
            return cls()
        model = llm if llm is not None else llm_mod.get_llm(settings)
        return cls(None if llm_mod.is_fallback(model) else model)


@dataclass(frozen=True)
class Said:
    """A memory as the judges read it: its text and since when it holds."""

    id: uuid.UUID
    content: str
    valid_from: datetime


@dataclass
class Outcome:
    superseded: dict[uuid.UUID, list[uuid.UUID]] = field(default_factory=dict)  # new -> olds
    queued: int = 0
    judged: int = 0


def settle(session: Session, agent_id: str, ids: Sequence[uuid.UUID], judges: Judges, *,
           cause: str = "judge", actor: str | None = None) -> Outcome:
    """Judge the agent's memories ``ids`` against their candidates and apply or queue
    what the judges decide, in the caller's transaction (for judges that call nothing
    outside: an LLM's call is made between ``pairs_of`` and ``record``)."""
    pairs = pairs_of(session, agent_id, ids, offline=judges.llm is None)
    if not pairs:
        return Outcome()
    applied, queued = decide(pairs, judges, cause)
    return record(session, agent_id, applied, queued, judged=len(pairs), actor=actor)


def pairs_of(session: Session, agent_id: str, ids: Sequence[uuid.UUID], *,
             offline: bool = False) -> list[tuple[Said, Said]]:
    """The agent's current memories ``ids`` paired with their candidates (``offline``:
    for the offline judge alone, see ``candidate_pairs``)."""
    fresh = [Said(r.id, r.content, r.valid_from) for r in session.execute(
        _FRESH, {"agent_id": agent_id, "ids": [str(i) for i in ids]})]
    return candidate_pairs(session, agent_id, fresh, offline=offline)


def record(session: Session, agent_id: str, applied: Sequence[Decision],
           queued: Sequence[Decision], *, judged: int = 0,
           actor: str | None = None) -> Outcome:
    """Apply and queue decisions (those whose old memory is still current)."""
    outcome = Outcome(judged=judged)
    replacement = {d.old_id: d.new_id for d in applied}
    for old in supersession.apply(session, agent_id, applied, actor=actor):
        outcome.superseded.setdefault(replacement[old], []).append(old)
    outcome.queued = supersession.queue_review(session, agent_id, queued, actor=actor)
    return outcome


def candidate_pairs(session: Session, agent_id: str, fresh: Sequence[Said], *,
                    offline: bool = False) -> list[tuple[Said, Said]]:
    """(new, candidate) pairs, each unordered pair once. ``offline``: only memories the
    offline judge can read as stating a single-valued attribute are looked at (its
    verdicts need one on the new side), which spares most stores the search."""
    if offline:
        fresh = [s for s in fresh if judging.may_replace(s.content)]
    with_subjects = [(s, " ".join(sorted(judging.subjects(s.content)))) for s in fresh]
    with_subjects = [(s, subj) for s, subj in with_subjects if subj]
    if not with_subjects:
        return []
    by_id = {s.id: s for s, _ in with_subjects}
    rows = session.execute(_CANDIDATES, {
        "agent_id": agent_id, "k": CANDIDATES,
        "ids": [str(s.id) for s, _ in with_subjects],
        "subjects": [subj for _, subj in with_subjects]})
    pairs: list[tuple[Said, Said]] = []
    seen: set[frozenset[uuid.UUID]] = set()
    for row in rows:
        pair = frozenset((row.fresh_id, row.id))
        if pair not in seen:
            seen.add(pair)
            pairs.append((by_id[row.fresh_id], Said(row.id, row.content, row.valid_from)))
    return pairs


def decide(pairs: Sequence[tuple[Said, Said]], judges: Judges, cause: str
           ) -> tuple[list[Decision], list[Decision]]:
    """The judges' decisions on ``pairs``: (to apply, to review)."""
    offline = [judging.judge_offline(new.content, old.content) for new, old in pairs]
    by_llm: Sequence[judging.Judgement | None] = [None] * len(pairs)
    if judges.llm is not None:
        by_llm = judging.judge_with_llm(judges.llm, [(n.content, o.content) for n, o in pairs])
    applied: list[Decision] = []
    queued: list[Decision] = []
    for (new, old), off, llm in zip(pairs, offline, by_llm, strict=True):
        verdict, confidence, label = judging.combine(off, llm)
        if verdict not in ("replaces", "conflicts"):
            continue
        attribute = off.attribute or (llm.attribute if llm is not None else None)
        later, earlier = (old, new) if old.valid_from > new.valid_from else (new, old)
        decision = Decision(earlier.id, later.id, cause, label, attribute, confidence)
        (applied if confidence >= judging.SUPERSEDE_AT else queued).append(decision)
    return applied, queued


def after_write(session: Session, pairs: Sequence[tuple[str, StoreItem]],
                results: Sequence[StoreResult], judges: Judges | None, *,
                actor: str | None = None, judging: bool = True
                ) -> tuple[list[StoreResult], dict[str, list[uuid.UUID]]]:
    """After a store's writes: each item's explicit ``supersedes`` is checked and applied;
    the new memories that named none are judged against their candidates by ``judges``,
    agent by agent, or, without them, returned to judge after the commit (when
    ``judging``). Results say what each memory superseded."""
    superseded: dict[uuid.UUID, list[uuid.UUID]] = {}
    unjudged: dict[str, list[uuid.UUID]] = {}
    for (agent, item), result in zip(pairs, results, strict=True):
        if item.supersedes:
            superseded.setdefault(result.id, []).extend(supersession.explicit(
                session, agent, result.id, item.supersedes, actor=actor))
        elif result.stored and judging:
            unjudged.setdefault(agent, []).append(result.id)
    if judges is not None:
        for agent, ids in unjudged.items():
            outcome = settle(session, agent, ids, judges, actor=actor)
            for new, olds in outcome.superseded.items():
                superseded.setdefault(new, []).extend(olds)
        unjudged = {}
    return with_superseded(results, superseded), unjudged


def with_superseded(results: Sequence[StoreResult],
                    superseded: Mapping[uuid.UUID, Sequence[uuid.UUID]]
                    ) -> list[StoreResult]:
    """``results``, each saying what its memory superseded."""
    return [r.model_copy(update={"superseded": (*r.superseded, *superseded.get(r.id, ()))})
            if r.id in superseded else r for r in results]
