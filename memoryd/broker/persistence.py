"""What an erasure asks of the Redis servers memoryd uses (broker, result backend and
working memory's):
that their append-only files keep no command that carried the erased agent's messages
or results.

Redis appends every write to its append-only file and keeps it there after the key is
gone: a message naming the agent that a worker took and acknowledged long ago, a result
its caller fetched and deleted, stay in the file until Redis rewrites it from the data
it holds now (``BGREWRITEAOF``). So after an erasure has deleted the agent's results
(``memoryd.broker.redis_results``), memoryd asks each server for that rewrite, once the
erasure's own message (which names the agent) is no longer held by a worker; a rewrite
already running may have started before the deletions, so it waits for that one first.

A server that refuses the command (a managed Redis may rename it away) is reported,
never an error of the erasure: its operator's own rewrite policy applies there.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery.backends.redis import RedisBackend
from redis.exceptions import ResponseError

# What ``rewrite`` found: it asked for a rewrite; the server keeps no append-only file;
# one is being written already (ask again later); the server refused the command.
STARTED, OFF, BUSY, REFUSED = "started", "off", "busy", "refused"


@contextmanager
def redis_clients(connection: Any, backend: Any,
                  working: Any = None) -> Iterator[dict[str, Any]]:
    """The Redis clients of one kombu ``connection`` (when its transport is Redis's),
    of a Redis result ``backend`` and of working memory's Redis (``working``), by role
    ("broker", "results", "working"), one per server: a server two roles share appears
    once, under the first."""
    clients: dict[str, Any] = {}
    channel = connection.default_channel
    with _broker_client(channel) as broker:
        if broker is not None:
            clients["broker"] = broker
        others = {"results": backend.client if isinstance(backend, RedisBackend) else None,
                  "working": working}
        for role, client in others.items():
            if client is not None and _address(client) not in {
                    _address(c) for c in clients.values()}:
                clients[role] = client
        yield clients


@contextmanager
def _broker_client(channel: Any) -> Iterator[Any]:
    if not hasattr(channel, "unacked_key"):  # not kombu's Redis transport
        yield None
        return
    with channel.conn_or_acquire() as client:
        yield client


def _address(client: Any) -> tuple[Any, ...]:
    kwargs = client.connection_pool.connection_kwargs
    return (kwargs.get("host"), kwargs.get("port"), kwargs.get("path"))


def held(connection: Any, task_id: str) -> bool:
    """Whether a worker still holds the message of task ``task_id`` (it waits in kombu's
    ``unacked`` hash until acknowledged), on a Redis broker."""
    channel = connection.default_channel
    with _broker_client(channel) as client:
        if client is None:
            return False
        return any(_message_id(value) == task_id
                   for _, value in client.hscan_iter(channel.unacked_key))


def _message_id(value: bytes) -> str | None:
    """The task id of an ``unacked`` entry (kombu's ``[message, exchange, routing_key]``);
    other messages name ``task_id`` too (as their parent, in their arguments)."""
    try:
        message = json.loads(value)[0]
        return str(message["headers"]["id"])
    except (ValueError, LookupError, TypeError):
        return None


def rewrite(client: Any) -> str:
    """Ask the server to rewrite its append-only file from the data it holds now; one
    of ``STARTED``, ``OFF``, ``BUSY``, ``REFUSED``."""
    try:
        info = client.info("persistence")
        if not int(info.get("aof_enabled", 0)):
            return OFF
        if int(info.get("aof_rewrite_in_progress", 0)):
            return BUSY
        client.bgrewriteaof()
    except ResponseError as exc:
        return BUSY if "in progress" in str(exc) else REFUSED
    return STARTED
