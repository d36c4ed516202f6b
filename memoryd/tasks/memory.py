"""Store and recall tasks (queue ``memory``). Arguments and results are plain JSON;
every task validates its input again (the store does), so a hand-crafted
message gets the same ``ValidationError`` as a client call."""

from __future__ import annotations

from typing import Any

from memoryd.tasks.base import MemorydTask, dump, get_store
from memoryd.worker import app


@app.task(name="memoryd.store", base=MemorydTask)
def store(agent_id: str, content: str, **fields: Any) -> Any:
    """Store one memory. Idempotent: a redelivered message finds the row its first
    delivery wrote (dedup by content hash) and returns it with duplicate=True."""
    return dump(get_store().store(agent_id, content, **fields))


@app.task(name="memoryd.store_many", base=MemorydTask)
def store_many(agent_id: str, items: list[dict[str, Any]]) -> Any:
    """Store a batch in one embedding pass and one transaction. Idempotent like ``store``."""
    return dump(get_store().store_many(agent_id, items))


@app.task(name="memoryd.recall", base=MemorydTask)
def recall(agent_id: str, query: str, **options: Any) -> Any:
    """Hybrid recall. Safe to repeat (it only bumps access counters)."""
    return dump(get_store().recall(agent_id, query, **options))


@app.task(name="memoryd.context", base=MemorydTask)
def context(agent_id: str, query: str, limit: int = 10) -> str:
    return get_store().context(agent_id, query, limit=limit)


@app.task(name="memoryd.forget", base=MemorydTask)
def forget(agent_id: str, memory_id: str) -> bool:
    """Delete one memory. Idempotent: forgetting a vanished memory returns False."""
    return get_store().forget(agent_id, memory_id)


@app.task(name="memoryd.get", base=MemorydTask)
def get(agent_id: str, memory_id: str) -> Any:
    return dump(get_store().get(agent_id, memory_id))


@app.task(name="memoryd.list", base=MemorydTask)
def list_memories(agent_id: str, category: str | None = None, limit: int = 50,
                  offset: int = 0) -> Any:
    return dump(get_store().list(agent_id, category=category, limit=limit, offset=offset))


@app.task(name="memoryd.kg.add", base=MemorydTask)
def kg_add(agent_id: str, entity: dict[str, Any]) -> bool:
    """Upsert an entity and its relations. Idempotent: relations are never duplicated."""
    return get_store().kg_add(agent_id, entity)


@app.task(name="memoryd.kg.query", base=MemorydTask)
def kg_query(agent_id: str, start_id: str, depth: int = 2) -> Any:
    return dump(get_store().kg_query(agent_id, start_id, depth=depth))


@app.task(name="memoryd.sessions", base=MemorydTask)
def sessions(agent_id: str) -> Any:
    return dump(get_store().sessions(agent_id))
