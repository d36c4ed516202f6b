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
from memoryd.tasks.working import get_working
from memoryd.types import RecallRequest, StoreItem
from memoryd.worker import app
from memoryd.worker.batching import DONE, FAILED, FALLBACK, BatchItem, batching_strategy
from memoryd.worker.strategies import guarded
from memoryd.working.model import thread_id as thread_ref

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
def store(agent_id: str, content: str, actor: str | None = None, **fields: Any) -> Any:
    """Store one memory. Idempotent: a redelivered message finds the row its first
    delivery wrote (dedup by content hash) and returns it with duplicate=True.
    ``actor``: who stores it (the gateway's ``key:<id>``), as versions record it.

    A worker runs these messages in batches (``store_batch``); this body is the
    ordinary path for a message a batch left to run alone."""
    agent, item, who = _parsed({"agent_id": agent_id, "content": content, "actor": actor,
                                **fields})
    return dump(get_store().store_validated([(agent, item)], actor=who)[0])


def store_batch(items: list[BatchItem]) -> list[str]:
    """Run in a pool process: several ``memoryd.store`` messages with one embedding
    pass and one transaction. Each message's result (or its ``ValidationError``) is
    stored under its own task id; the outcomes tell the worker which messages to
    acknowledge. Anything unexpected is left to the ordinary path (``FALLBACK``)."""
    backend = store.backend
    outcomes = [FALLBACK] * len(items)
    # Versions record who stored what: one transaction per actor (usually one, or two).
    by_actor: dict[str | None, list[tuple[int, str, tuple[str, StoreItem]]]] = {}
    for index, (task_id, args, kwargs) in enumerate(items):
        try:
            request = _store_request(args, kwargs)
        except ValidationError as exc:
            backend.mark_as_failure(task_id, exc, call_errbacks=False)
            outcomes[index] = FAILED
            continue
        except Exception:  # noqa: S112 - anything else: the ordinary path reports it
            continue
        if request is not None:
            agent, item, actor = request
            by_actor.setdefault(actor, []).append((index, task_id, (agent, item)))
    for actor, accepted in by_actor.items():
        _store_together(accepted, actor, outcomes)
    return outcomes


def _store_together(accepted: list[tuple[int, str, tuple[str, StoreItem]]],
                    actor: str | None, outcomes: list[str]) -> None:
    """One transaction for the messages of one actor; each message's result stored under
    its task id and its outcome set to ``DONE`` (left ``FALLBACK`` if anything fails)."""
    backend = store.backend
    try:
        results = get_store().store_validated([pair for _, _, pair in accepted], actor=actor)
    except Exception as exc:
        # Transient database trouble, a refused ``supersedes`` and the like: each message
        # runs alone, retried or refused as usual.
        log.warning("store.batch_failed", size=len(accepted), error=type(exc).__name__)
        return
    for (index, task_id, _), result in zip(accepted, results, strict=True):
        try:
            backend.mark_as_done(task_id, dump(result))
        except Exception as exc:
            log.warning("store.batch_result_failed", error=type(exc).__name__)
            continue  # committed: running it alone returns the row as a duplicate
        outcomes[index] = DONE


def _store_request(args: object, kwargs: dict[str, Any]
                   ) -> tuple[str, StoreItem, str | None] | None:
    """A store message's (agent id, validated item, actor), or None when the message is
    not in the client's shape (the ordinary path then reports it)."""
    if args or "agent_id" not in kwargs or "content" not in kwargs:
        return None
    return _parsed(kwargs)


def _parsed(kwargs: dict[str, Any]) -> tuple[str, StoreItem, str | None]:
    """A store message's arguments, validated: (agent id, item, actor)."""
    fields = dict(kwargs)
    agent = check.agent_id(fields.pop("agent_id"))
    actor = check.short_text("actor", fields.pop("actor", None))
    item = check.store_item({"content": fields.pop("content"), **fields},
                            get_store().settings.max_content_bytes)
    return agent, item, actor


@app.task(name="memoryd.store_many", base=MemorydTask)
def store_many(agent_id: str, items: list[dict[str, Any]], actor: str | None = None) -> Any:
    """Store a batch in one embedding pass and one transaction. Idempotent like ``store``."""
    memory_store = get_store()
    agent = check.agent_id(agent_id)
    checked = check.store_items(items, memory_store.settings.max_content_bytes)
    return dump(memory_store.store_validated([(agent, item) for item in checked],
                                             actor=check.short_text("actor", actor)))


@app.task(name="memoryd.recall", base=MemorydTask)
def recall(agent_id: str, query: str, **options: Any) -> Any:
    """Hybrid recall. Safe to repeat (it only bumps access counters)."""
    unknown = sorted(set(options) - RECALL_OPTIONS)
    if unknown:
        raise ValidationError(unknown[0], "is not a recall option")
    return dump(get_store().recall(agent_id, query, **options))


RECALL_OPTIONS = frozenset(RecallRequest.model_fields) - {"query"}


@app.task(name="memoryd.context", base=MemorydTask)
def context(agent_id: str, query: str, limit: int = 10, as_of: str | None = None,
            thread_id: str | None = None, budget: int | None = None,
            budget_unit: str = "chars", structured: bool = False) -> Any:
    """The turn's context: the block (``structured``: the whole ``TurnContext``), with
    the thread's working memory read from Redis (which slides its deadline)."""
    working = None
    if thread_id is not None:
        working = get_working().get(check.agent_id(agent_id), thread_ref(thread_id))
    found = get_store().turn_context(agent_id, query, limit=limit, as_of=as_of,
                                     thread_id=thread_id, budget=budget,
                                     budget_unit=budget_unit, working=working)
    return dump(found) if check.boolean("structured", structured) else found.context


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
                  metadata: dict[str, Any] | None = None, order: str = "newest",
                  include_superseded: bool = False, as_of: str | None = None) -> Any:
    return dump(get_store().list(agent_id, category=category, limit=limit, offset=offset,
                                 since=since, until=until, metadata=metadata, order=order,
                                 include_superseded=include_superseded, as_of=as_of))


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
def kg_query(agent_id: str, start_id: str, depth: int = 2, as_of: str | None = None) -> Any:
    return dump(get_store().kg_query(agent_id, start_id, depth=depth, as_of=as_of))


@app.task(name="memoryd.history", base=MemorydTask)
def history(agent_id: str, memory_id: str) -> Any:
    """A memory, its earlier states and its supersessions. Read-only."""
    return dump(get_store().history(agent_id, memory_id))


@app.task(name="memoryd.supersede", base=MemorydTask)
def supersede(agent_id: str, memory_id: str, supersedes: list[str],
              actor: str | None = None) -> list[str]:
    """Mark memories as replaced by ``memory_id``. Idempotent in effect: a redelivered
    message finds them superseded already and is refused, having changed nothing."""
    done = get_store().supersede(agent_id, memory_id, supersedes,
                                 actor=check.short_text("actor", actor))
    return [str(memory) for memory in done]


@app.task(name="memoryd.unsupersede", base=MemorydTask)
def unsupersede(agent_id: str, memory_id: str, actor: str | None = None) -> bool:
    """Make a superseded memory current again. Idempotent: a second delivery finds it
    current and returns False."""
    return get_store().restore_superseded(agent_id, memory_id,
                                          actor=check.short_text("actor", actor))


@app.task(name="memoryd.sessions", base=MemorydTask)
def sessions(agent_id: str) -> Any:
    return dump(get_store().sessions(agent_id))


@app.task(name="memoryd.session_messages", base=MemorydTask)
def session_messages(agent_id: str, session_id: str, limit: int | None = None) -> Any:
    return dump(get_store().session_messages(agent_id, session_id, limit=limit))
