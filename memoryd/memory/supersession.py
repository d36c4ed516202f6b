"""Supersession: one memory replaces another, which stays, marked, as history.

A decision names the old memory, the new one, its cause (``explicit``: the caller's
``supersedes``; ``key``: a new version of a key; ``judge``: judged at store time;
``reconcile``: judged by the maintenance job; ``review``: an operator accepted it), the
judge, the attribute and a confidence. ``apply`` marks the old memory (``valid_to``:
when the new one became true; ``superseded_by``), after keeping its row as a version;
``queue_review`` puts an unsure one in the review queue with a ``contradicts`` link.
Nothing here deletes a memory, and ``restore`` undoes a supersession.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from memoryd.errors import NotFound, ValidationError
from memoryd.memory import versions
from memoryd.types import Supersession

CAUSES = ("explicit", "key", "judge", "reconcile", "review", "restore")
REVIEW_STATUSES = ("review", "applied", "rejected", "undone")


@dataclass(frozen=True)
class Decision:
    """``new_id`` replaces ``old_id`` (both of one agent), and why."""

    old_id: uuid.UUID
    new_id: uuid.UUID
    cause: str
    judge: str | None = None
    attribute: str | None = None
    confidence: float = 1.0


_CURRENT = text("""
SELECT id FROM memories WHERE agent_id = :a AND id = ANY(CAST(:ids AS uuid[]))
  AND valid_to IS NULL ORDER BY id FOR UPDATE""")
# The old memory held until the new one became true (never before it became true itself).
_MARK = text("""
UPDATE memories o
SET valid_to = greatest(coalesce(o.valid_from, o.created_at),
                        coalesce(n.valid_from, n.created_at)),
    superseded_by = n.id, updated_at = now()
FROM unnest(CAST(:old AS uuid[]), CAST(:new AS uuid[])) AS d(old_id, new_id)
JOIN memories n ON n.id = d.new_id AND n.agent_id = :a
WHERE o.id = d.old_id AND o.agent_id = :a AND (o.valid_to IS NULL OR :released)
""")
_DECIDED = """
INSERT INTO memory_supersessions
    (agent_id, old_id, new_id, cause, judge, attribute, confidence, status, actor)
SELECT :a, d.old_id, d.new_id, d.cause, d.judge, d.attribute, d.confidence, :status, :actor
FROM unnest(CAST(:old AS uuid[]), CAST(:new AS uuid[]), CAST(:cause AS text[]),
            CAST(:judge AS text[]), CAST(:attr AS text[]), CAST(:conf AS float8[]))
     AS d(old_id, new_id, cause, judge, attribute, confidence)
ON CONFLICT (agent_id, old_id, new_id) DO """
_RECORD_APPLIED = text(_DECIDED + """UPDATE SET status = 'applied', cause = EXCLUDED.cause,
    judge = EXCLUDED.judge, attribute = EXCLUDED.attribute, confidence = EXCLUDED.confidence,
    actor = EXCLUDED.actor, decided_at = now()""")
_RECORD_REVIEW = text(_DECIDED + "NOTHING RETURNING old_id, new_id, confidence")
_CONTRADICTS = text("""
INSERT INTO memory_links (agent_id, source_id, target_id, kind, score)
SELECT :a, d.new_id, d.old_id, 'contradicts', d.confidence
FROM unnest(CAST(:new AS uuid[]), CAST(:old AS uuid[]), CAST(:conf AS float8[]))
     AS d(new_id, old_id, confidence)
ON CONFLICT DO NOTHING""")


def _params(decisions: Sequence[Decision]) -> dict[str, list[object]]:
    return {"old": [str(d.old_id) for d in decisions], "new": [str(d.new_id) for d in decisions],
            "cause": [d.cause for d in decisions], "judge": [d.judge for d in decisions],
            "attr": [d.attribute for d in decisions],
            "conf": [float(d.confidence) for d in decisions]}


def _one_per_old(decisions: Sequence[Decision]) -> list[Decision]:
    """Of several decisions replacing one memory, the most confident (then the first)."""
    best: dict[uuid.UUID, Decision] = {}
    for d in decisions:
        if d.old_id != d.new_id and (d.old_id not in best
                                     or d.confidence > best[d.old_id].confidence):
            best[d.old_id] = d
    return list(best.values())


def apply(session: Session, agent_id: str, decisions: Sequence[Decision], *,
          actor: str | None = None) -> list[uuid.UUID]:
    """Supersede each decision's old memory by its new one, in the caller's transaction;
    the ids actually superseded (those still current)."""
    chosen = _one_per_old(decisions)
    if not chosen:
        return []
    current = set(session.execute(_CURRENT, {"a": agent_id, "ids": [
        str(d.old_id) for d in chosen]}).scalars())
    chosen = [d for d in chosen if d.old_id in current]
    if not chosen:
        return []
    versions.record(session, [d.old_id for d in chosen], "superseded", actor=actor,
                    agent_id=agent_id)
    _mark(session, agent_id, chosen, actor=actor)
    return [d.old_id for d in chosen]


def _mark(session: Session, agent_id: str, decisions: Sequence[Decision], *,
          actor: str | None, released: bool = False) -> None:
    params = {"a": agent_id, "status": "applied", "actor": actor, "released": released,
              **_params(decisions)}
    session.execute(_MARK, params)
    session.execute(_RECORD_APPLIED, params)


# --- a key's new version ------------------------------------------------------------------
def release_key(session: Session, agent_id: str, memory_id: uuid.UUID, *,
                actor: str | None = None) -> None:
    """The first half of a key's new version: keep the current row as a version and take
    it out of the current set, so the new version can take the key (and the content
    index); ``replace_key`` finishes, in the same transaction."""
    versions.record(session, [memory_id], "superseded", actor=actor, agent_id=agent_id)
    session.execute(text("""UPDATE memories SET valid_to = now(), updated_at = now()
                            WHERE agent_id = :a AND id = :id"""), {"a": agent_id, "id": memory_id})


def replace_key(session: Session, agent_id: str, old_id: uuid.UUID, new_id: uuid.UUID, *,
                actor: str | None = None) -> None:
    """The second half: the released row is superseded by the key's new version."""
    _mark(session, agent_id, [Decision(old_id, new_id, "key")], actor=actor, released=True)


def queue_review(session: Session, agent_id: str, decisions: Sequence[Decision], *,
                 actor: str | None = None) -> int:
    """Put unsure decisions in the review queue: a ``review`` row each (a pair already
    decided keeps its decision) and a ``contradicts`` link from the new to the old."""
    chosen = [d for d in decisions if d.old_id != d.new_id]
    if not chosen:
        return 0
    params = {"a": agent_id, "status": "review", "actor": actor, **_params(chosen)}
    queued = session.execute(_RECORD_REVIEW, params).all()
    if queued:  # a pair decided before (rejected, say) gets no link back
        session.execute(_CONTRADICTS, {"a": agent_id, "new": [str(r.new_id) for r in queued],
                                       "old": [str(r.old_id) for r in queued],
                                       "conf": [float(r.confidence) for r in queued]})
    return len(queued)


# --- explicit supersession ------------------------------------------------------------
_HELD = text("""SELECT id, valid_to IS NULL AS current, superseded_by FROM memories
                WHERE agent_id = :a AND id = ANY(CAST(:ids AS uuid[]))""")
# Whether ``new`` was itself replaced, directly or down a chain, by one of ``olds``.
_REPLACED_BY = text("""
WITH RECURSIVE later(id) AS (
    SELECT s.new_id FROM memory_supersessions s
    WHERE s.agent_id = :a AND s.old_id = :new AND s.status IN ('applied', 'undone')
    UNION
    SELECT s.new_id FROM memory_supersessions s JOIN later l ON s.old_id = l.id
    WHERE s.agent_id = :a AND s.status IN ('applied', 'undone'))
SELECT 1 FROM later WHERE id = ANY(CAST(:olds AS uuid[])) LIMIT 1""")


def check_explicit(session: Session, agent_id: str, new_id: uuid.UUID | None,
                   old_ids: Sequence[uuid.UUID]) -> None:
    """Refuse ``supersedes`` naming a memory the agent does not hold (``NotFound``), one
    already superseded, the new memory itself, or one that replaced it (a cycle)."""
    if not old_ids:
        return
    held = {row.id: row for row in session.execute(_HELD, {
        "a": agent_id, "ids": [str(i) for i in old_ids]})}
    for index, old in enumerate(old_ids):
        field = f"supersedes[{index}]"
        if old not in held:
            raise NotFound(f"{field}: no such memory for this agent")
        if new_id is not None and old == new_id:
            raise ValidationError(field, "names the memory being stored")
        # Superseded by this very memory already: a retried store or call, done once.
        if not held[old].current and (new_id is None or held[old].superseded_by != new_id):
            raise ValidationError(field, "names a memory that is already superseded")
    if new_id is not None and session.execute(_REPLACED_BY, {
            "a": agent_id, "new": new_id, "olds": [str(i) for i in old_ids]}).first():
        raise ValidationError("supersedes", "would make a cycle: that memory replaced this one")


def explicit(session: Session, agent_id: str, new_id: uuid.UUID,
             old_ids: Sequence[uuid.UUID], *, actor: str | None = None) -> list[uuid.UUID]:
    """The caller's ``supersedes``: checked, then applied with full confidence."""
    check_explicit(session, agent_id, new_id, old_ids)
    return apply(session, agent_id, [Decision(old, new_id, "explicit") for old in old_ids],
                 actor=actor)


# --- undo and the review queue ----------------------------------------------------------
def restore(session: Session, agent_id: str, memory_id: uuid.UUID, *,
            actor: str | None = None) -> bool:
    """Make a superseded memory current again (its supersession marked ``undone``);
    False if it is current already. A memory whose content or key is current again
    under another memory cannot come back beside it: ``ValidationError``."""
    row = session.execute(text("""SELECT valid_to FROM memories
                                  WHERE agent_id = :a AND id = :id FOR UPDATE"""),
                          {"a": agent_id, "id": memory_id}).first()
    if row is None:
        raise NotFound(f"memory {memory_id} not found for this agent")
    if row.valid_to is None:
        return False
    versions.record(session, [memory_id], "restored", actor=actor, agent_id=agent_id)
    try:
        with session.begin_nested():
            session.execute(text("""UPDATE memories SET valid_to = NULL, superseded_by = NULL,
                                    updated_at = now() WHERE agent_id = :a AND id = :id"""),
                            {"a": agent_id, "id": memory_id})
    except IntegrityError:
        raise ValidationError("memory_id", "its content or key is held by a current memory; "
                                           "supersede or forget that one first") from None
    session.execute(text("""UPDATE memory_supersessions SET status = 'undone',
                            reviewed_at = now(), reviewed_by = :actor
                            WHERE agent_id = :a AND old_id = :id AND status = 'applied'"""),
                    {"a": agent_id, "id": memory_id, "actor": actor})
    return True


_REVIEWS = """SELECT * FROM memory_supersessions WHERE status = :status {agent}
              ORDER BY id LIMIT :n OFFSET :o"""


def reviews(session: Session, agent_id: str | None, *, status: str = "review",
            limit: int = 50, offset: int = 0) -> list[Supersession]:
    """The review queue (or the decisions of another status), oldest first; of one agent
    or of all."""
    if status not in REVIEW_STATUSES:
        raise ValidationError("status", f"must be one of {', '.join(REVIEW_STATUSES)}")
    sql = _REVIEWS.format(agent="AND agent_id = :a" if agent_id is not None else "")
    rows = session.execute(text(sql), {"status": status, "a": agent_id, "n": limit,
                                       "o": offset}).mappings()
    return [Supersession.model_validate(dict(r)) for r in rows]


def decide(session: Session, review_id: int, *, accept: bool, actor: str | None = None,
           agent_id: str | None = None) -> Supersession:
    """Accept (the old memory is superseded) or reject (both stay current, the
    ``contradicts`` link goes) one queued candidate. ``agent_id``: only that agent's."""
    row = session.execute(text("""SELECT * FROM memory_supersessions
                                  WHERE id = :id AND status = 'review' FOR UPDATE"""),
                          {"id": review_id}).mappings().first()
    if row is None or (agent_id is not None and row["agent_id"] != agent_id):
        raise NotFound(f"review {review_id} not found in the queue")
    agent, old, new = row["agent_id"], row["old_id"], row["new_id"]
    if accept:
        apply(session, agent, [Decision(old, new, "review", row["judge"], row["attribute"],
                                        row["confidence"])], actor=actor)
    else:
        session.execute(text("""DELETE FROM memory_links WHERE agent_id = :a
                                AND source_id = :new AND target_id = :old
                                AND kind = 'contradicts'"""), {"a": agent, "new": new, "old": old})
    session.execute(text("""UPDATE memory_supersessions SET status = :status,
                            reviewed_at = now(), reviewed_by = :actor WHERE id = :id"""),
                    {"status": "applied" if accept else "rejected", "actor": actor,
                     "id": review_id})
    done = session.execute(text("SELECT * FROM memory_supersessions WHERE id = :id"),
                           {"id": review_id}).mappings().one()
    return Supersession.model_validate(dict(done))
