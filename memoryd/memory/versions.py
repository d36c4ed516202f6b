"""Every earlier state of a memory: a row of ``memory_versions`` per change, written
before the change (``record``), read back with the supersessions by ``history``.

A version holds the memory's row as it was (every column but the embedding and the
generated ones), the change's cause and who made it: an API key (``key:<id>``), a
maintenance run (``run:<id>``) or an operator. Set-based, so a maintenance batch records
its thousands of changes in one statement.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd.errors import NotFound
from memoryd.memory.rows import select_list, to_memory
from memoryd.types import History, Supersession, Version

# Why a memory changed. ``updated``: stored again under its key with new metadata;
# ``superseded``/``restored``: replaced, or put back; the rest are maintenance's.
CAUSES = ("updated", "superseded", "restored", "merged", "summarized", "archived",
          "unarchived", "evicted", "edited", "compacted", "reconciled")

# What a version keeps of the row: the embedding can be recomputed from the content.
ROW_JSON = "to_jsonb(m) - 'embedding' - 'tsv' - 'content_norm_hash'"

_RECORD = text(f"""
INSERT INTO memory_versions (agent_id, memory_id, cause, actor, data)
SELECT m.agent_id, m.id, :cause, :actor, {ROW_JSON}
FROM memories m WHERE m.id = ANY(CAST(:ids AS uuid[])) AND m.agent_id = :agent_id
""")
_RECORD_ANY_AGENT = text(f"""
INSERT INTO memory_versions (agent_id, memory_id, cause, actor, data)
SELECT m.agent_id, m.id, :cause, :actor, {ROW_JSON}
FROM memories m WHERE m.id = ANY(CAST(:ids AS uuid[]))
""")


def actor_of_run(run_id: int | None) -> str | None:
    """How a maintenance run names itself in a version: ``run:<id>``."""
    return None if run_id is None else f"run:{run_id}"


def record(session: Session, ids: Sequence[uuid.UUID | str], cause: str, *,
           actor: str | None = None, agent_id: str | None = None) -> int:
    """Keep the current rows of ``ids`` (of ``agent_id`` if given) as versions, before
    the caller changes them in the same transaction. Returns how many were kept."""
    if cause not in CAUSES:
        raise ValueError(f"unknown version cause {cause!r}")
    if not ids:
        return 0
    params: dict[str, Any] = {"ids": [str(i) for i in ids], "cause": cause, "actor": actor}
    if agent_id is None:
        return int(session.execute(_RECORD_ANY_AGENT, params).rowcount)  # type: ignore[attr-defined]
    params["agent_id"] = agent_id
    return int(session.execute(_RECORD, params).rowcount)  # type: ignore[attr-defined]


def history(session: Session, agent_id: str, memory_id: uuid.UUID) -> History:
    """The memory now, its versions oldest first, and every supersession naming it."""
    row = session.execute(text(
        f"SELECT {select_list()} FROM memories m WHERE m.agent_id = :a AND m.id = :id"),
        {"a": agent_id, "id": memory_id}).mappings().first()
    if row is None:
        raise NotFound(f"memory {memory_id} not found for this agent")
    versions = session.execute(text("""
        SELECT changed_at, cause, actor, data FROM memory_versions
        WHERE agent_id = :a AND memory_id = :id ORDER BY id"""),
        {"a": agent_id, "id": memory_id}).mappings()
    decisions = session.execute(text("""
        SELECT * FROM memory_supersessions
        WHERE agent_id = :a AND (new_id = :id OR old_id = :id) ORDER BY id"""),
        {"a": agent_id, "id": memory_id}).mappings()
    return History(memory=to_memory(row),
                   versions=[Version.model_validate(dict(v)) for v in versions],
                   supersessions=[Supersession.model_validate(dict(d)) for d in decisions])
