"""Renaming an agent: every row memoryd holds of it moves to another agent id in one
transaction, for an operator whose agents' names changed (the Google ADK adapter's older
names, ``memoryd rename-adk-agents``) or who chooses a new one (``memoryd rename-agent``).

What moves: its memories, evicted copies (and the agent id inside them, which a restore
reads), sessions, knowledge graph, links, maintenance runs, lexeme counts, dead letters
(found as erasure finds them, so a retried letter writes to the new agent) and the keys
that name it exactly (a key's agent prefixes are left alone: they name no agent). Its
own HNSW index, built for the old id, is dropped after the move; ``index_agents``
builds one for the new id. The run is audited as a ``maintenance_runs`` row of job
``rename_agent``.

The new agent must hold no data yet: a rename never merges two agents (that is an
export of one imported into the other: ``memoryd export`` and ``import``). Writes that
reach the old id while it moves stay under it, so its writers are stopped first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from memoryd import validation as check
from memoryd.errors import NotFound, ValidationError
from memoryd.memory.agent_indexes import drop_agent_index

if TYPE_CHECKING:
    from memoryd.memory.store import MemoryStore

JOB = "rename_agent"
_NEW = "CAST(:new AS text)"
_OLD = "CAST(:old AS text)"


def _json_set(column: str, path: str) -> str:
    return f"jsonb_set({column}, '{{{path}}}', to_jsonb({_NEW}))"


@dataclass(frozen=True)
class Move:
    """Rows of ``table`` matching ``where`` (``:old`` the old id), changed by ``sets``."""

    table: str
    where: str
    sets: str = f"agent_id = {_NEW}"


# The tables whose rows are an agent's data: a new id holding any is refused.
DATA_TABLES = ("memories", "evicted_memories", "sessions", "kg_entities", "kg_relations",
               "memory_links", "memory_versions", "memory_supersessions",
               "working_promotions")
MOVES: tuple[Move, ...] = (
    *(Move(table, "agent_id = :old") for table in DATA_TABLES
      if table not in ("evicted_memories", "memory_versions")),
    *(Move(table, "agent_id = :old",
           f"agent_id = {_NEW}, data = CASE WHEN data ? 'agent_id' "
           f"THEN {_json_set('data', 'agent_id')} ELSE data END")
      for table in ("evicted_memories", "memory_versions")),
    Move("maintenance_runs", "agent_id = :old"),
    Move("dead_letters", "agent_id = :old OR kwargs ->> 'agent_id' = :old "
                         "OR args ->> 0 = :old",
         f"agent_id = CASE WHEN agent_id = :old THEN {_NEW} ELSE agent_id END, "
         f"kwargs = CASE WHEN kwargs ->> 'agent_id' = :old "
         f"THEN {_json_set('kwargs', 'agent_id')} ELSE kwargs END, "
         f"args = CASE WHEN args ->> 0 = :old THEN {_json_set('args', '0')} ELSE args END"),
    Move("api_keys", f"{_OLD} = ANY(agents)",
         f"agents = CASE WHEN {_NEW} = ANY(agents) THEN array_remove(agents, {_OLD}) "
         f"ELSE array_replace(agents, {_OLD}, {_NEW}) END"),
)
# agent_terms refers to agent_term_stats by agent id: the counts are copied under the
# new id, the terms pointed at it, and the old counts dropped (in this order).
_TERM_COUNTS = (
    "DELETE FROM agent_term_stats WHERE agent_id = :new",  # stale: the new id holds nothing
    "INSERT INTO agent_term_stats (agent_id, memories, counted_at) "
    "SELECT :new, memories, counted_at FROM agent_term_stats WHERE agent_id = :old",
    "UPDATE agent_terms SET agent_id = :new WHERE agent_id = :old",
    "DELETE FROM agent_term_stats WHERE agent_id = :old",
)


@dataclass(frozen=True)
class Mark:
    """A metadata entry set on the moved memories (live and evicted) of ``source``: the
    ADK adapter's pair, so the moved memories read as named by its naming now."""

    source: str
    key: str
    value: Any

    def statements(self) -> tuple[str, ...]:
        entry = "jsonb_build_object(CAST(:mark_key AS text), CAST(:mark_value AS jsonb))"
        return (
            f"UPDATE memories SET metadata = metadata || {entry} "
            "WHERE agent_id = :new AND source = :mark_source",
            "UPDATE evicted_memories SET data = jsonb_set(data, '{metadata}', "
            f"coalesce(data -> 'metadata', '{{}}'::jsonb) || {entry}) "
            "WHERE agent_id = :new AND data ->> 'source' = :mark_source")

    def params(self) -> dict[str, Any]:
        return {"mark_source": self.source, "mark_key": self.key,
                "mark_value": json.dumps(self.value)}


@dataclass(frozen=True)
class Renamed:
    """Rows per table that moved from ``old`` to ``new`` (or would, for a preview)."""

    old: str
    new: str
    moved: dict[str, int] = field(default_factory=dict)
    # Whether the old id's own HNSW index was dropped (always False for a preview).
    index_dropped: bool = False
    done: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"old": self.old, "new": self.new, "moved": self.moved,
                "index_dropped": self.index_dropped, "done": self.done}


def holds_data(store: MemoryStore, agent_id: str) -> bool:
    """Whether any data table holds a row of ``agent_id``."""
    with store.session() as session:
        return _holds(session, check.agent_id(agent_id))


def preview(store: MemoryStore, old: str, new: str) -> Renamed:
    """What ``rename_agent`` would move now; changes nothing. Refuses as it would."""
    old, new = _checked(old, new)
    with store.session() as session:
        moved = _counts(session, old)
        _refuse(session, old, new, moved)
    return Renamed(old=old, new=new, moved=moved)


def rename_agent(store: MemoryStore, old: str, new: str, *, mark: Mark | None = None
                 ) -> Renamed:
    """Move every row of agent ``old`` to agent ``new`` in one transaction (see the
    module docstring), setting ``mark`` on the moved memories. Raises ``NotFound`` when
    ``old`` holds nothing and ``ValidationError`` naming ``new_agent`` when ``new``
    holds data."""
    old, new = _checked(old, new)
    params = {"old": old, "new": new, **(mark.params() if mark else {})}
    try:
        with store.session() as session:
            # One rename at a time: two renames onto one new id cannot both pass the check.
            session.execute(text("SELECT pg_advisory_xact_lock(hashtext(:k))"),
                            {"k": f"memoryd.{JOB}"})
            moved = _counts(session, old)
            _refuse(session, old, new, moved)
            for move in MOVES:
                session.execute(text(
                    f"UPDATE {move.table} SET {move.sets} WHERE {move.where}"), params)
            for statement in (*_TERM_COUNTS, *(mark.statements() if mark else ())):
                session.execute(text(statement), params)
            _audit(session, old, new, moved)
    except IntegrityError:  # a write to the new id landed meanwhile: nothing moved
        raise ValidationError("new_agent", "began to hold data during the rename; "
                                           "nothing moved") from None
    store.mark_written([old, new])
    dropped = drop_agent_index(store.engine, old)
    return Renamed(old=old, new=new, moved=moved, index_dropped=dropped, done=True)


def sourced_agents(store: MemoryStore, source: str, marker: str, named: str
                   ) -> list[tuple[str, int, int]]:
    """The agents whose name matches the POSIX regex ``named`` and that hold memories
    (live or evicted) of ``source``: per agent, how many carry the metadata key
    ``marker`` and how many do not. Reads every memory of ``source``."""
    with store.session() as session:
        rows = session.execute(text("""
            SELECT agent_id, count(*) FILTER (WHERE marked) AS marked,
                   count(*) FILTER (WHERE NOT marked) AS unmarked
            FROM (SELECT agent_id, metadata ? :marker AS marked FROM memories
                  WHERE source = :source AND agent_id ~ :named
                  UNION ALL
                  SELECT agent_id, coalesce(data -> 'metadata' ? :marker, false)
                  FROM evicted_memories
                  WHERE data ->> 'source' = :source AND agent_id ~ :named) found
            GROUP BY agent_id ORDER BY agent_id
        """), {"source": source, "marker": marker, "named": named}).all()
    return [(str(r.agent_id), int(r.marked), int(r.unmarked)) for r in rows]


def _checked(old: str, new: str) -> tuple[str, str]:
    """Both ids valid (an error names ``old_agent`` or ``new_agent``) and different."""
    checked = []
    for name, value in (("old_agent", old), ("new_agent", new)):
        try:
            checked.append(check.agent_id(value))
        except ValidationError as exc:
            raise ValidationError(name, exc.message) from None
    if checked[0] == checked[1]:
        raise ValidationError("new_agent", "is the agent's name already")
    return checked[0], checked[1]


def _counts(session: Session, old: str) -> dict[str, int]:
    """Rows per table that name ``old``, the term counts among them."""
    counts = {move.table: int(session.execute(text(
        f"SELECT count(*) FROM {move.table} WHERE {move.where}"), {"old": old}).scalar_one())
        for move in MOVES}
    for table in ("agent_term_stats", "agent_terms"):
        counts[table] = int(session.execute(text(
            f"SELECT count(*) FROM {table} WHERE agent_id = :old"), {"old": old}).scalar_one())
    return counts


def _holds(session: Session, agent: str) -> bool:
    found = " OR ".join(f"EXISTS (SELECT 1 FROM {table} WHERE agent_id = :a)"
                        for table in DATA_TABLES)
    return bool(session.execute(text(f"SELECT {found}"), {"a": agent}).scalar_one())


def _refuse(session: Session, old: str, new: str, moved: dict[str, int]) -> None:
    if not any(moved.values()):
        raise NotFound("no rows name the agent to rename")
    if _holds(session, new):
        raise ValidationError("new_agent", "already holds data; a rename never merges two "
                                           "agents (export one and import it into the other)")


def _audit(session: Session, old: str, new: str, moved: dict[str, int]) -> None:
    session.execute(text("""
        INSERT INTO maintenance_runs (job, agent_id, params, status, finished_at, stats)
        VALUES (:job, :new, CAST(:params AS jsonb), 'ok', now(), CAST(:stats AS jsonb))
    """), {"job": JOB, "new": new, "params": json.dumps({"from": old, "to": new}),
           "stats": json.dumps({"moved": moved})})
