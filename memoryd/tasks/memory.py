"""Store and recall tasks (queue ``memory``). Arguments and results are plain JSON;
every task validates its input again (the store does), so a hand-crafted
message gets the same ``ValidationError`` as a client call."""

from __future__ import annotations

from typing import Any

import structlog

from memoryd import validation as check
from memoryd.config import get_settings
from memoryd.errors import ValidationError
from memoryd.tasks.base import MemorydTask, dump, get_store
from memoryd.types import RecallRequest, StoreItem
from memoryd.worker import app
from memoryd.worker.batching import DONE, FAILED, FALLBACK, BatchItem, batching_strategy
from memoryd.worker.strategies import guarded

log = structlog.get_logger(__name__)

# Store messages a worker may embed and write together (see memoryd.worker.batching).
# Opt-in: with batching a worker holds up to STORE_HELD_FACTOR x this many store
# messages unacknowledged (read ahead), instead of one per pool process.
STORE_HELD_FACTOR = 4


def store_batch_size() -> int:
    """Store messages per batch (``MEMORYD_STORE_BATCH_SIZE``); 1, the default, is off."""
    return get_settings().store_batch_size


class StoreTask(MemorydTask):
    """With ``MEMORYD_STORE_BATCH_SIZE`` > 1, the worker that receives ``memoryd.store``
    messages embeds and writes them in batches; otherwise one task per message."""

    abstract = True

    def Strategy(self, task: Any, app: Any, consumer: Any, **kwargs: Any) -> Any:
        size = store_batch_size()
        if size <= 1:
            return guarded(task, app, consumer, **kwargs)
        log.info("store.batching", max_batch=size, max_held=STORE_HELD_FACTOR * size)
        return batching_strategy(task, app, consumer, store_batch, max_batch=size,
                                 max_held=STORE_HELD_FACTOR * size, **kwargs)


@app.task(name="memoryd.store", base=StoreTask)
def store(agent_id: str, content: str, **fields: Any) -> Any:
    """Store one memory. Idempotent: a redelivered message finds the row its first
    delivery wrote (dedup by content hash) and returns it with duplicate=True.

    A worker runs these messages in batches (``store_batch``); this body is the
    ordinary path for a message a batch left to run alone."""
    return dump(get_store().store(agent_id, content, **fields))


def store_batch(items: list[BatchItem]) -> list[str]:
    """Run in a pool process: several ``memoryd.store`` messages with one embedding
    pass and one transaction. Each message's result (or its ``ValidationError``) is
    stored under its own task id; the outcomes tell the worker which messages to
    acknowledge. Anything unexpected is left to the ordinary path (``FALLBACK``)."""
    backend = store.backend
    outcomes = [FALLBACK] * len(items)
    accepted: list[tuple[int, str]] = []  # (index, task id)
    pairs: list[tuple[str, StoreItem]] = []
    for index, (task_id, args, kwargs) in enumerate(items):
        try:
            pair = _store_request(args, kwargs)
        except ValidationError as exc:
            backend.mark_as_failure(task_id, exc, call_errbacks=False)
            outcomes[index] = FAILED
            continue
        except Exception:  # noqa: S112 - anything else: the ordinary path reports it
            continue
        if pair is not None:
            accepted.append((index, task_id))
            pairs.append(pair)
    if not pairs:
        return outcomes
    try:
        results = get_store().store_validated(pairs)
    except Exception as exc:
        # Transient database trouble and the like: each message runs alone, retried as usual.
        log.warning("store.batch_failed", size=len(pairs), error=type(exc).__name__)
        return outcomes
    for (index, task_id), result in zip(accepted, results, strict=True):
        try:
            backend.mark_as_done(task_id, dump(result))
        except Exception as exc:
            log.warning("store.batch_result_failed", error=type(exc).__name__)
            continue  # committed: running it alone returns the row as a duplicate
        outcomes[index] = DONE
    return outcomes


def _store_request(args: object, kwargs: dict[str, Any]) -> tuple[str, StoreItem] | None:
    """A store message's (agent id, validated item), or None when the message is not
    in the client's shape (the ordinary path then reports it)."""
    if args or "agent_id" not in kwargs or "content" not in kwargs:
        return None
    fields = dict(kwargs)
    agent = check.agent_id(fields.pop("agent_id"))
    item = check.store_item({"content": fields.pop("content"), **fields},
                            get_store().settings.max_content_bytes)
    return agent, item


@app.task(name="memoryd.store_many", base=MemorydTask)
def store_many(agent_id: str, items: list[dict[str, Any]]) -> Any:
    """Store a batch in one embedding pass and one transaction. Idempotent like ``store``."""
    return dump(get_store().store_many(agent_id, items))


@app.task(name="memoryd.recall", base=MemorydTask)
def recall(agent_id: str, query: str, **options: Any) -> Any:
    """Hybrid recall. Safe to repeat (it only bumps access counters)."""
    unknown = sorted(set(options) - RECALL_OPTIONS)
    if unknown:
        raise ValidationError(unknown[0], "is not a recall option")
    return dump(get_store().recall(agent_id, query, **options))


RECALL_OPTIONS = frozenset(RecallRequest.model_fields) - {"query"}


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
                  offset: int = 0, since: str | None = None, until: str | None = None,
                  metadata: dict[str, Any] | None = None, order: str = "newest") -> Any:
    return dump(get_store().list(agent_id, category=category, limit=limit, offset=offset,
                                 since=since, until=until, metadata=metadata, order=order))


@app.task(name="memoryd.metadata_values", base=MemorydTask)
def metadata_values(agent_id: str, field: str, metadata: dict[str, Any] | None = None,
                    limit: int = 100, offset: int = 0) -> Any:
    return get_store().metadata_values(agent_id, field, metadata=metadata, limit=limit,
                                       offset=offset)


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


@app.task(name="memoryd.session_messages", base=MemorydTask)
def session_messages(agent_id: str, session_id: str, limit: int | None = None) -> Any:
    return dump(get_store().session_messages(agent_id, session_id, limit=limit))
