"""Putting an evicted memory back, under its old id (``memoryd restore``), kept as a
version of cause ``restored`` (its history, from before the eviction, goes on)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from memoryd.errors import NotFound, ValidationError
from memoryd.memory import versions
from memoryd.memory.rows import STORED_COLUMNS

if TYPE_CHECKING:
    from memoryd.memory.store import MemoryStore

# How long a restored eviction number is remembered (``already_restored``): a redelivered
# restore message comes within hours, and the rows are small.
RESTORED_KEEP_DAYS = 7

# What a restored memory gets instead of its stored value: it counts as changed now,
# no longer expires (or it would be expired again at once), and its embedding was
# kept in a column of its own (as was its model, for memories evicted before migration
# 0012).
_RESET = {"updated_at": "now()", "expires_at": "NULL", "embedding": "e.embedding",
          "embedding_model": "coalesce(r.embedding_model, e.embedding_model)"}
_INSERT = text(f"""
    INSERT INTO memories ({", ".join(STORED_COLUMNS)})
    SELECT {", ".join(_RESET.get(column, f"r.{column}") for column in STORED_COLUMNS)}
    FROM evicted_memories e,
         jsonb_populate_record(NULL::memories, e.data) r
    WHERE e.eviction_id = :eid
    RETURNING agent_id
""")
# The memory's eviction rows are removed, and each of their numbers remembered as
# restored (the numbers are never reused, so a conflict is a restore seen twice).
_REMOVE = text("""
    WITH gone AS (DELETE FROM evicted_memories WHERE memory_id = :m
                  RETURNING eviction_id, memory_id)
    INSERT INTO restored_evictions (eviction_id, memory_id)
    SELECT eviction_id, memory_id FROM gone
    ON CONFLICT (eviction_id) DO NOTHING
""")
_FORGET_OLD = text(f"""
    DELETE FROM restored_evictions
    WHERE restored_at < now() - interval '{RESTORED_KEEP_DAYS} days'
""")


def restore(store: MemoryStore, eviction_or_memory_id: int | str, *,
            actor: str | None = None) -> Any:
    """Put an evicted memory back (same id). Raises NotFound or ValidationError when its
    content or key is in use again. Returns the restored memory's id. ``actor``: who
    restores it, as its version names it."""
    key_sql = ("eviction_id = :v" if isinstance(eviction_or_memory_id, int)
               else "memory_id = CAST(:v AS uuid)")
    with store.session() as session:
        row = session.execute(text(f"""
            SELECT eviction_id, memory_id FROM evicted_memories WHERE {key_sql}
            ORDER BY evicted_at DESC LIMIT 1 FOR UPDATE
        """), {"v": eviction_or_memory_id}).first()
        if row is None:
            raise NotFound(f"no evicted memory {eviction_or_memory_id}")
        try:
            with session.begin_nested():
                agent = session.execute(_INSERT, {"eid": row.eviction_id}).scalar_one()
        except IntegrityError:
            raise ValidationError("memory_id", "its content, key or id is in use again; "
                                  "forget the newer memory first") from None
        versions.record(session, [row.memory_id], "restored", actor=actor, agent_id=agent)
        session.execute(_REMOVE, {"m": row.memory_id})
        session.execute(_FORGET_OLD)
    store.mark_written([agent])
    return row.memory_id


def already_restored(store: MemoryStore, eviction_or_memory_id: int | str) -> Any | None:
    """The memory that a restore of this eviction number or memory id finds already in
    place (a restore that ran before), or None: by number, the memory it was restored
    as (within ``RESTORED_KEEP_DAYS``), if that memory is still there; by memory id,
    that memory, if it is there."""
    sql = ("SELECT m.id FROM restored_evictions r JOIN memories m ON m.id = r.memory_id "
           "WHERE r.eviction_id = :v" if isinstance(eviction_or_memory_id, int)
           else "SELECT id FROM memories WHERE id = CAST(:v AS uuid)")
    with store.session() as session:
        return session.execute(text(sql), {"v": eviction_or_memory_id}).scalar()
