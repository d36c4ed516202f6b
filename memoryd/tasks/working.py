"""Promotion tasks (queue ``memory``): a thread's working memory into long-term memory.

``memoryd.working.promote`` is sent by whoever finds something to promote (a client whose
update trimmed messages, a worker's sweep) and nobody waits on it; ``memoryd.working.end``
is the one ``end_thread`` waits on. Both run ``memory.promotion.promote``, which is
idempotent: a redelivered or repeated message writes nothing twice."""

from __future__ import annotations

from typing import Any

from memoryd.memory import promotion
from memoryd.process import Slot
from memoryd.tasks.base import MemorydTask, dump, get_store
from memoryd.worker import app
from memoryd.working.store import END_TASK, PROMOTE_TASK, WorkingStore, promotion_tag

_WORKING: Slot[WorkingStore] = Slot("working", lambda working, _after_fork: working.close())


def get_working() -> WorkingStore:
    """The process's working-memory store (built on first use, kept in ``memoryd.process``)."""
    from memoryd.config import get_settings

    return _WORKING.get(lambda: WorkingStore.from_settings(get_settings()))


@app.task(name=PROMOTE_TASK, base=MemorydTask, ignore_result=True)
def promote(tag: str) -> None:
    promotion.promote(get_store(), get_working(), promotion_tag(tag))


@app.task(name=END_TASK, base=MemorydTask)
def end(tag: str) -> Any:
    done = promotion.promote(get_store(), get_working(), promotion_tag(tag))
    return None if done is None else dump(done)
