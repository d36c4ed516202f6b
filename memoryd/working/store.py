"""Working memory in Redis: each operation one atomic script (``scripts``), its reply
read back into ``model``'s types.

The client and the gateway use it directly (no worker in the way); workers use it to
sweep expired threads and to read and acknowledge what they promote."""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import redis

from memoryd.config import Settings
from memoryd.errors import Conflict, ValidationError
from memoryd.redaction import agent_digest
from memoryd.working import scripts
from memoryd.working.model import (
    COUNTER_BOUND,
    MAX_THREADS_LISTED,
    Limits,
    ThreadInfo,
    WorkingMemory,
    WorkingMessage,
    WorkingUpdate,
    update_request,
)

PREFIX = "memoryd:wm:"
# The workers' promotion tasks (``memoryd.tasks.working``), which clients and sweeps send.
PROMOTE_TASK = "memoryd.working.promote"
END_TASK = "memoryd.working.end"
MAX_FLAGS = 1024
MAX_COUNTERS = 1024


class PromotionBatch:
    """A thread's messages read for promotion, and how to acknowledge them."""

    def __init__(self, tag: str, meta: Mapping[str, str], spill: Sequence[str],
                 live: Sequence[str]) -> None:
        self.tag = tag
        self.retired = is_retired(tag)
        self.agent_id = meta.get("agent", "")
        self.thread_id = meta.get("thread", "")
        self.generation = meta.get("generation", "")
        # The last entry read: acknowledging trims the spill list up to it.
        self.last_spilled = spill[-1] if spill else ""
        entries = [*spill, *live] if self.retired else list(spill)
        by_seq = {message.seq: message for message in map(_message, entries)}
        self.messages = [by_seq[seq] for seq in sorted(by_seq)]

    @property
    def empty(self) -> bool:
        return not self.agent_id


_TAG = re.compile(r"\{[0-9a-f]{32}:[0-9a-f]{32}\}(:[0-9a-f]{16})?")


def promotion_tag(value: object) -> str:
    """A tag as a promotion message names it: hashes only, never an id."""
    if not isinstance(value, str) or not _TAG.fullmatch(value):
        raise ValidationError("tag", "must name a thread as memoryd's scripts do")
    return value


def is_retired(tag: str) -> bool:
    """A retired thread's tag ends with its generation after the braces."""
    return not tag.endswith("}")


def thread_tag(agent_id: str, thread: str) -> str:
    digest = hashlib.sha256(thread.encode("utf-8")).hexdigest()[:32]
    return "{" + agent_digest(agent_id)[:32] + ":" + digest + "}"


class WorkingStore:
    """Every thread of every agent, in one Redis."""

    def __init__(self, client: redis.Redis, settings: Settings) -> None:
        self.redis = client
        self.settings = settings
        self.limits = Limits(max_message_bytes=settings.max_content_bytes,
                             max_value_bytes=settings.working_max_value_bytes)
        self._lua = {name: client.register_script(getattr(scripts, name))
                     for name in ("GET", "UPDATE", "CLEAR", "POP", "RETIRE", "SWEEP", "READ",
                                  "ACK")}

    @classmethod
    def from_settings(cls, settings: Settings, *, broker_url: str | None = None,
                      result_backend: str | None = None) -> WorkingStore:
        url = settings.resolved_working_redis_url(broker_url, result_backend)
        return cls(redis.Redis.from_url(url, decode_responses=True, health_check_interval=30),
                   settings)

    def close(self) -> None:
        self.redis.close()

    # --- what callers do ------------------------------------------------------------
    def get(self, agent_id: str, thread: str, *, pending: bool = False) -> WorkingMemory:
        """The thread's working memory, its deadline slid; version 0 if it has none.
        ``pending``: with the messages trimmed from it that are on their way to
        long-term memory."""
        found = self._lua["GET"](args=[thread_tag(agent_id, thread), int(pending)])
        return self._state(agent_id, thread, found)

    def update(self, agent_id: str, thread: str,
               update: WorkingUpdate | Mapping[str, Any]) -> tuple[WorkingMemory, int]:
        """Apply one update atomically; the new state and how many messages the
        trimming rule moved to the spill list, on their way to long-term memory."""
        checked = update_request(update, self.limits)
        reply = self._lua["UPDATE"](args=[
            thread_tag(agent_id, thread), json.dumps(_payload(checked)),
            json.dumps(self._identity(agent_id, thread)), json.dumps(self._script_limits())])
        if reply[0] == "conflict":
            raise Conflict(f"the thread is at version {reply[1]}, not the expected "
                           f"{checked.expected_version}")
        if reply[0] == "refused":
            raise ValidationError(reply[1], reply[2])
        return self._state(agent_id, thread, reply[2]), int(reply[1])

    def clear(self, agent_id: str, thread: str) -> tuple[WorkingMemory, int]:
        """Empty the thread (its messages go to the spill list, not away)."""
        reply = self._lua["CLEAR"](args=[thread_tag(agent_id, thread), self._lease])
        if reply is None:
            return self._state(agent_id, thread, None), 0
        return self._state(agent_id, thread, reply[1]), int(reply[0])

    def pop(self, agent_id: str, thread: str) -> WorkingMessage | None:
        """Remove and return the thread's newest message (None: it holds none)."""
        found = self._lua["POP"](args=[thread_tag(agent_id, thread)])
        return _message(found) if found else None

    def retire(self, agent_id: str, thread: str) -> str | None:
        """End the thread now: its keys move aside, awaiting promotion (their tag);
        None if it has none."""
        found = self._lua["RETIRE"](args=[thread_tag(agent_id, thread), self._lease])
        return str(found) if found else None

    def threads(self, agent_id: str, *, limit: int = 100, offset: int = 0) -> list[ThreadInfo]:
        """The agent's live threads, soonest to expire first."""
        limit = min(limit, MAX_THREADS_LISTED)
        rows: Any = self.redis.zrange(f"{PREFIX}threads:{agent_digest(agent_id)}", offset,
                                 offset + limit - 1, withscores=True)
        return [ThreadInfo(thread_id=str(name), expires_at=_time(score)) for name, score in rows]

    # --- what promoters do ----------------------------------------------------------
    def sweep(self, batch: int = 100) -> list[str]:
        """Retire the threads past their deadline and renew lapsed claims: the tags to
        promote now."""
        return [str(tag) for tag in self._lua["SWEEP"](args=[self._lease, batch])]

    def read(self, tag: str) -> PromotionBatch:
        reply: list[Any] = self._lua["READ"](args=[tag])
        meta, spill, live = reply
        return PromotionBatch(tag, _pairs(meta), spill, live)

    def ack(self, batch: PromotionBatch) -> None:
        self._lua["ACK"](args=[batch.tag, batch.last_spilled, int(batch.retired),
                               batch.generation])

    def erase(self, agent_id: str) -> int:
        """Delete every thread of the agent, live or awaiting promotion: the keys removed."""
        digest = agent_digest(agent_id)[:32]
        removed = 0
        for key in self.redis.scan_iter(match=f"{PREFIX}{{{digest}:*", count=1000):
            removed += int(self.redis.delete(key))
        for zset in ("due", "work"):
            for member, _ in self.redis.zscan_iter(f"{PREFIX}{zset}", match=f"{{{digest}:*"):
                self.redis.zrem(f"{PREFIX}{zset}", member)
        self.redis.delete(f"{PREFIX}threads:{agent_digest(agent_id)}")
        return removed

    # --- reading replies ------------------------------------------------------------
    @property
    def _lease(self) -> int:
        return self.settings.working_promote_lease_s

    def _identity(self, agent_id: str, thread: str) -> dict[str, Any]:
        return {"agent": agent_id, "agent_digest": agent_digest(agent_id), "thread": thread,
                "generation": secrets.token_hex(8), "ttl": self.settings.working_ttl_seconds,
                "lease": self._lease}

    def _script_limits(self) -> dict[str, int]:
        s = self.settings
        return {"max_messages": s.working_max_messages, "keep_first": s.working_keep_first,
                "keep_last": s.working_keep_last, "max_variables": s.working_max_variables,
                "max_flags": MAX_FLAGS, "max_counters": MAX_COUNTERS,
                "counter_bound": COUNTER_BOUND}

    def _state(self, agent_id: str, thread: str, reply: Any) -> WorkingMemory:
        """The script's reply as a ``WorkingMemory``, parsed in one pass: messages and
        values are stored as JSON text (times in milliseconds, which pydantic reads as
        such), so they are spliced into one document rather than decoded one by one."""
        if not reply:
            return WorkingMemory(agent_id=agent_id, thread_id=thread,
                                 ttl_seconds=self.settings.working_ttl_seconds)
        meta_raw, messages, variables, flags, counters, pending = reply
        meta = _pairs(meta_raw)
        head = json.dumps({
            "agent_id": agent_id, "thread_id": thread, "version": int(meta["version"]),
            "topic": meta.get("topic"), "flags": sorted(flags),
            "counters": {name: int(value) for name, value in _pairs(counters).items()},
            "importance": float(meta.get("importance", 0.5)),
            "created_at": int(meta["created"]), "last_accessed_at": int(meta["accessed"]),
            "access_count": int(meta["access_count"]), "ttl_seconds": int(meta["ttl"]),
            "expires_at": int(meta["deadline"]), "promoted": int(meta.get("promoted", 0))},
            ensure_ascii=False)
        values = ",".join(f"{json.dumps(name, ensure_ascii=False)}:{value}"
                          for name, value in _pairs(variables).items())
        document = (f'{head[:-1]},"messages":[{",".join(messages)}],'
                    f'"pending":[{",".join(pending)}],"variables":{{{values}}},'
                    f'"entities":{meta.get("entities", "[]")},"tools":{meta.get("tools", "{}")}}}')
        return WorkingMemory.model_validate_json(document)


def _payload(update: WorkingUpdate) -> dict[str, Any]:
    """The update as the script reads it: values pre-encoded as JSON text (Lua's cjson
    would round large numbers), absent fields left out (cjson's null is truthy)."""
    found: dict[str, Any] = {
        "messages": [json.dumps(m.model_dump(exclude_none=True), ensure_ascii=False)
                     for m in update.messages],
        # In the caller's order: the last set is the most recently used.
        "set": [[name, json.dumps(value, ensure_ascii=False)]
                for name, value in update.variables.items()],
        "del": update.delete_variables, "flag": update.set_flags,
        "unflag": update.clear_flags, "incr": update.increment, "topic": update.topic,
        "entities": None if update.entities is None else json.dumps(update.entities),
        "tools": None if update.tools is None else update.tools.model_dump_json(),
        "importance": None if update.importance is None else repr(float(update.importance)),
        "ttl": update.ttl_seconds, "expected": update.expected_version}
    return {name: value for name, value in found.items() if value not in (None, [], {})}


def _pairs(flat: Sequence[Any]) -> dict[str, str]:
    return {str(flat[i]): str(flat[i + 1]) for i in range(0, len(flat), 2)}


def _message(entry: str) -> WorkingMessage:
    """A message as the update script stored it (its time in milliseconds)."""
    return WorkingMessage.model_validate_json(entry)


def _time(ms: Any) -> datetime:
    return datetime.fromtimestamp(float(ms) / 1000, UTC)
