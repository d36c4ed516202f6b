"""Promotion: a thread's working-memory messages become the messages of session
``thread_id`` in long-term memory, exactly once.

Once: each message's (agent, thread, generation, seq) enters ``working_promotions`` in
the transaction that writes it, and a message already there is skipped; only after the
commit does Redis hear of it (``WorkingStore.ack``). A promoter killed in between leaves
the thread claimed in Redis; when its claim lapses another promoter reads the same
messages, finds them in the ledger and acknowledges them. In order, and whole: a message
whose content the agent already holds (a second "yes") becomes a second reference to
that memory in the session's list, with its own role and time, rather than vanishing."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.orm import Session

from memoryd.memory import detection, sessions, writes
from memoryd.memory.store import MemoryStore
from memoryd.types import StoreItem, StoreResult
from memoryd.working.model import Promotion, WorkingMessage
from memoryd.working.store import PromotionBatch, WorkingStore

ACTOR = "working-memory"

_DONE = text("""
SELECT seq FROM working_promotions
WHERE agent_id = :a AND thread_id = :t AND generation = :g AND seq = ANY(:seqs)
""")
_CLAIM = text("""
INSERT INTO working_promotions (agent_id, thread_id, generation, seq)
SELECT :a, :t, :g, unnest(CAST(:seqs AS bigint[]))
ON CONFLICT DO NOTHING
RETURNING seq
""")


def promote(store: MemoryStore, working: WorkingStore, tag: str) -> Promotion | None:
    """Promote what waits under ``tag`` (a retired thread, or a live thread's trimmed
    messages) and acknowledge it in Redis; None if nothing waits there any more."""
    batch = working.read(tag)
    if batch.empty:
        return None
    written = write(store, batch) if batch.messages else 0
    working.ack(batch)
    return Promotion(agent_id=batch.agent_id, thread_id=batch.thread_id, promoted=written,
                     already=len(batch.messages) - written, ended=batch.retired)


def write(store: MemoryStore, batch: PromotionBatch) -> int:
    """Write the batch's messages not promoted before, in order; how many."""
    ids = _ids(batch)
    with store.session() as session:
        done = {int(seq) for seq in session.execute(_DONE, {**ids, "seqs": _seqs(batch)})
                .scalars()}
    fresh = [message for message in batch.messages if message.seq not in done]
    if not fresh:
        return 0
    pairs = [(batch.agent_id, _item(batch.thread_id, message)) for message in fresh]
    rows = writes.prepare(store.embedder, pairs, actor=ACTOR)  # outside the transaction
    judges = detection.Judges() if store.judges is not None else None
    with store.write_session(batch.agent_id) as session:
        claimed = {int(seq) for seq in session.execute(
            _CLAIM, {**ids, "seqs": [m.seq for m in fresh]}).scalars()}
        chosen = [i for i, message in enumerate(fresh) if message.seq in claimed]
        results = [_write_one(session, batch, fresh[i], rows[i]) for i in chosen]
        # The offline judge only: an LLM is never called inside a transaction, and the
        # reconcile job judges these memories with it later.
        detection.after_write(session, [pairs[i] for i in chosen], results, judges,
                              actor=ACTOR, judging=judges is not None)
    return len(chosen)


def _write_one(session: Session, batch: PromotionBatch, message: WorkingMessage,
               row: writes.PreparedRow) -> StoreResult:
    """One message, so that the session's list keeps the thread's order even where a
    message repeats a memory already held (which ``writes`` does not list again)."""
    result = writes.write(session, [row])[0]
    if not result.stored:
        sessions.append(session, batch.agent_id, batch.thread_id, [
            sessions.message_ref(str(result.id), message.role, message.at.isoformat())])
    return result


def _item(thread_id: str, message: WorkingMessage) -> StoreItem:
    return StoreItem(content=message.content, role=message.role, session_id=thread_id,
                     created_at=message.at, metadata=message.metadata)


def _ids(batch: PromotionBatch) -> dict[str, str]:
    return {"a": batch.agent_id, "t": batch.thread_id, "g": batch.generation}


def _seqs(batch: PromotionBatch) -> Sequence[int]:
    return [message.seq for message in batch.messages]
