"""Celery's Redis result backend, its write of a task's result made one atomic step.

Celery's backend reads a task's result key before writing it, so that a redelivered
duplicate (a worker lost after it ran the task) never overwrites a success with a later
state, then writes the result and publishes it to the waiting caller: two Redis round
trips for every task, and a window between them in which another run of the task can
write. Here one Lua script, which Redis runs atomically, does the same check and the
write and the publish (``STORE``): one round trip, no window (what the read cost a
worker under a fleet of callers: bench/README.md, Fleet).

The same script keeps, per agent, the set of its tasks' result keys (``index_key``,
named by the agent's hash), so that erasing the agent deletes the results its caller
never fetched (``forget_agent``); and results that may hold memory contents
(``celery_config.holds_contents``) expire within ``CONTENT_RESULT_EXPIRES_S`` whatever
``result_expires`` says. A fetched result is deleted by the client at once.

Selected by the worker app for ``redis://`` and ``rediss://`` result backends
(``worker_backend``); callers read results with Celery's backend unchanged."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from celery import states
from celery.backends.redis import RedisBackend
from celery.exceptions import BackendStoreError
from kombu.utils.encoding import bytes_to_str

from memoryd.celery_config import CONTENT_RESULT_EXPIRES_S, holds_contents
from memoryd.redaction import agent_digest

INDEX_PREFIX = "memoryd-results-of-"

# KEYS[1] the task's result key, KEYS[2] (when the task names an agent) the agent's set
# of result keys; ARGV[1] the encoded result (JSON: ``result_serializer``), ARGV[2] its
# time to live in seconds (0: none), which the set gets too unless it lives longer.
# Nothing is written over a success.
STORE = """
local old = redis.call('GET', KEYS[1])
if old then
  local ok, meta = pcall(cjson.decode, old)
  if ok and type(meta) == 'table' and meta['status'] == 'SUCCESS' then
    return 0
  end
end
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  redis.call('SETEX', KEYS[1], ttl, ARGV[1])
else
  redis.call('SET', KEYS[1], ARGV[1])
end
if KEYS[2] then
  redis.call('SADD', KEYS[2], KEYS[1])
  if ttl > 0 and redis.call('TTL', KEYS[2]) < ttl then
    redis.call('EXPIRE', KEYS[2], ttl)
  end
end
redis.call('PUBLISH', KEYS[1], ARGV[1])
return 1
"""

# KEYS[1] an agent's set of result keys: they and the set are deleted; returns how many
# results were named.
FORGET = """
local keys = redis.call('SMEMBERS', KEYS[1])
for _, key in ipairs(keys) do
  redis.call('DEL', key)
end
redis.call('DEL', KEYS[1])
return #keys
"""


def index_key(agent_id: str) -> str:
    """The key of the set of ``agent_id``'s result keys (by its hash, like every name
    memoryd gives an agent outside the database)."""
    return INDEX_PREFIX + agent_digest(agent_id)


def request_agent(request: Any) -> str | None:
    """The agent a task ran for: its ``agent_id`` keyword, or the first argument every
    agent task takes."""
    kwargs = getattr(request, "kwargs", None) or {}
    args = getattr(request, "args", None) or ()
    agent = kwargs.get("agent_id") if isinstance(kwargs, dict) else None
    if agent is None and isinstance(args, list | tuple) and args:
        agent = args[0]
    return agent if isinstance(agent, str) and agent else None


class ResultBackend(RedisBackend):  # type: ignore[misc]
    """``RedisBackend`` whose result write checks, writes and publishes in one script."""

    def _store_result(self, task_id: Any, result: Any, state: str, traceback: Any = None,
                      request: Any = None, **kwargs: Any) -> Any:
        meta = self._get_result_meta(result=result, state=state, traceback=traceback,
                                     request=request)
        meta["task_id"] = bytes_to_str(task_id)
        value = self.encode(meta)
        if isinstance(value, str) and len(value) > self._MAX_STR_VALUE_SIZE:
            raise BackendStoreError("value too large for Redis backend", state=state,
                                    task_id=task_id)
        expires = self.failure_expires if state == states.FAILURE else self.expires
        name = getattr(request, "task", None)
        if isinstance(name, str) and holds_contents(name):
            expires = min(int(expires or CONTENT_RESULT_EXPIRES_S), CONTENT_RESULT_EXPIRES_S)
        agent = request_agent(request)
        keys = [self.get_key_for_task(task_id), *([index_key(agent)] if agent else [])]
        self.ensure(self._store, (keys, value, expires))
        return result

    def forget_agent(self, agent_id: str) -> int:
        """Delete the stored results of ``agent_id``'s tasks (those no caller fetched:
        a fetched one is deleted already); how many were named."""
        return int(self.ensure(self._forget, (index_key(agent_id),)))

    @cached_property
    def _forget_script(self) -> Any:
        return self.client.register_script(FORGET)

    def _forget(self, key: str) -> Any:
        return self._forget_script(keys=[key])

    @cached_property
    def _store_script(self) -> Any:
        """``STORE``, registered once per backend: EVALSHA from then on."""
        return self.client.register_script(STORE)

    def _store(self, keys: list[bytes | str], value: Any, expires: Any) -> Any:
        return self._store_script(keys=keys, args=[value, int(expires or 0)])


def worker_backend(url: str) -> str:
    """The ``result_backend`` setting that makes a worker write results with
    ``ResultBackend``: Celery reads ``<class>+<url>`` as that class on that URL. Other
    backends are left as they are."""
    if url.startswith(("redis://", "rediss://")):
        return f"{__name__}:ResultBackend+{url}"
    return url
