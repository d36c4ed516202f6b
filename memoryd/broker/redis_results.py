"""Celery's Redis result backend, its write of a task's result made one atomic step.

Celery's backend reads a task's result key before writing it, so that a redelivered
duplicate (a worker lost after it ran the task) never overwrites a success with a later
state, then writes the result and publishes it to the waiting caller: two Redis round
trips for every task, and a window between them in which another run of the task can
write. Here one Lua script, which Redis runs atomically, does the same check and the
write and the publish (``STORE``): one round trip, no window (what the read cost a
worker under a fleet of callers: bench/README.md, Fleet).

Selected by the worker app for ``redis://`` and ``rediss://`` result backends
(``worker_backend``); callers read results with Celery's backend unchanged."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from celery import states
from celery.backends.redis import RedisBackend
from celery.exceptions import BackendStoreError
from kombu.utils.encoding import bytes_to_str

# KEYS[1] the task's result key; ARGV[1] the encoded result (JSON: ``result_serializer``),
# ARGV[2] its time to live in seconds (0: none). Nothing is written over a success.
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
redis.call('PUBLISH', KEYS[1], ARGV[1])
return 1
"""


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
        self.ensure(self._store, (self.get_key_for_task(task_id), value, expires))
        return result

    @cached_property
    def _store_script(self) -> Any:
        """``STORE``, registered once per backend: EVALSHA from then on."""
        return self.client.register_script(STORE)

    def _store(self, key: bytes | str, value: Any, expires: Any) -> Any:
        return self._store_script(keys=[key], args=[value, int(expires or 0)])


def worker_backend(url: str) -> str:
    """The ``result_backend`` setting that makes a worker write results with
    ``ResultBackend``: Celery reads ``<class>+<url>`` as that class on that URL. Other
    backends are left as they are."""
    if url.startswith(("redis://", "rediss://")):
        return f"{__name__}:ResultBackend+{url}"
    return url
