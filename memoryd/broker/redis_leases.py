"""Redis transport with renewed leases: a short visibility timeout that a live worker
keeps extending for every message it holds.

kombu's Redis transport emulates acknowledgements: a delivered message waits in the
``unacked`` hash, scored by its delivery time in ``unacked_index``, and any worker's
periodic sweep puts it back on its queue once that score is older than the visibility
timeout. With one long timeout for every message, a killed worker's messages wait that
long (600 s); with a short one, a task running longer than it, or a retry waiting for its
countdown, would be delivered twice. Here each worker re-scores the messages it holds
every third of the timeout, from a thread of its own, like an SQS consumer extending a
message's visibility: held messages never expire while their worker lives, and a dead
worker's are back on their queue within the timeout plus one sweep interval.

Taking a message and recording it as held are one step. kombu pops with BRPOP and
writes ``unacked`` afterwards, from the worker, so a worker killed between the two lost
the message for good. Here a Lua script, which Redis runs atomically, pops the message
and writes it into ``unacked`` and ``unacked_index`` in one go (``TAKE``): a message is
always on its queue, claimed, or held under a lease, whenever the worker dies.

Scripts cannot block, so an idle consumer waits with a blocking move of the first
queue's oldest message onto the queue's claimed list (``BLMOVE q claimed RIGHT LEFT``)
and takes once it returns; ``TAKE`` looks at the claimed lists first. The move takes the
message off its queue, so Redis wakes one waiting consumer per message: a move that
left it on the queue woke every idle consumer of every node for each message, and each
of them ran a take that found nothing, on the one Redis the whole fleet shares
(measured in bench/README.md, Fleet). A consumer killed between its move and its
take leaves the message claimed, and the next take of any consumer of that queue
delivers it: each idle consumer takes at least once per ``brpop_timeout`` (1 s).
Messages on its other queues (and priority levels) are found within a second of
arriving, at its next take.

Selected with the worker app's ``broker_transport`` for ``redis://`` URLs; publishers
(the client, beat) use kombu's transport unchanged."""

from __future__ import annotations

import threading
import time
from queue import Empty
from typing import Any

import structlog
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import loads

from memoryd.errors import ConfigError

log = structlog.get_logger(__name__)

# BLMOVE, the idle consumer's wait, came with Redis 6.2.
MIN_REDIS_VERSION = (6, 2)

# A renewal happens every visibility_timeout / RENEWALS_PER_TIMEOUT seconds.
RENEWALS_PER_TIMEOUT = 3

# Where an idle consumer's wait moves a message it woke for: after kombu's separator, a
# name no priority level has (kombu's levels are numbers).
CLAIMED = "claimed"

# KEYS: the claimed lists, then the queue keys, in the order to take from, then
# ``unacked``, ``unacked_index``.
# ARGV[1]: the time of the take (the lease's start, on the workers' clock like every
# renewal and sweep); ARGV[2..]: per queue key, 1 to record the message as held, 0 for a
# consumer that acknowledges nothing. Returns {key, message, recorded} or nil. The hash
# value is kombu's ``[message, exchange, routing_key]``, the message kept byte for byte.
# A message that is not kombu's JSON is popped unrecorded, as kombu would (it fails to
# decode it too).
TAKE = """
local queues = #KEYS - 2
for i = 1, queues do
  local item = redis.call('LINDEX', KEYS[i], -1)
  if item then
    redis.call('RPOP', KEYS[i])
    local ok, message = pcall(cjson.decode, item)
    local props = ok and type(message) == 'table' and message['properties']
    local tag = type(props) == 'table' and props['delivery_tag']
    if ARGV[i + 1] == '1' and type(tag) == 'string' then
      local info = type(props['delivery_info']) == 'table' and props['delivery_info'] or {}
      redis.call('HSET', KEYS[queues + 1], tag, '[' .. item .. ',' ..
                 cjson.encode(info['exchange'] or '') .. ',' ..
                 cjson.encode(info['routing_key'] or '') .. ']')
      redis.call('ZADD', KEYS[queues + 2], ARGV[1], tag)
      return {KEYS[i], item, 1}
    end
    return {KEYS[i], item, 0}
  end
end
return false
"""


def check_redis_version(version: str) -> None:
    """Refuse a Redis older than ``MIN_REDIS_VERSION`` by name, before a consumer's first
    wait fails on an unknown command."""
    found = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
    if found < MIN_REDIS_VERSION:
        raise ConfigError(f"MEMORYD_BROKER_URL: Redis {version or '(unknown)'} is too old; "
                          "memoryd's workers need Redis 6.2 or later")


class LeaseRenewer:
    """The delivery tags one channel holds, and the thread that renews their leases."""

    def __init__(self, qos: LeasedQoS) -> None:
        self._qos = qos
        self._held: set[str] = set()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, tag: str) -> None:
        with self._lock:
            self._held.add(tag)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="memoryd-lease-renewer")
                self._thread.start()

    def release(self, tag: str) -> None:
        with self._lock:
            self._held.discard(tag)

    def release_all(self) -> None:
        with self._lock:
            self._held.clear()

    def held(self) -> list[str]:
        with self._lock:
            return list(self._held)

    def stop(self) -> None:
        self._stopped.set()

    def renew(self) -> int:
        """Re-score every held message still in ``unacked_index`` (``XX``: one restored
        or acknowledged meanwhile is not put back); how many were renewed."""
        tags = self.held()
        if not tags:
            return 0
        now = time.time()
        with self._qos.channel.conn_or_acquire() as client:
            return int(client.zadd(self._qos.unacked_index_key,
                                   dict.fromkeys(tags, now), xx=True, ch=True))

    def _run(self) -> None:
        interval = max(1.0, float(self._qos.visibility_timeout) / RENEWALS_PER_TIMEOUT)
        while not self._stopped.wait(interval):
            try:
                self.renew()
            except Exception as exc:  # the broker is down: the next round tries again
                log.warning("broker.lease_renewal_failed", error=type(exc).__name__)


class LeasedQoS(kombu_redis.QoS):
    """kombu's Redis QoS, also recording which messages this channel holds."""

    channel: Channel

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.leases = LeaseRenewer(self)

    def append(self, message: Any, delivery_tag: str) -> None:
        if delivery_tag in self.channel.taken:  # ``TAKE`` recorded it already
            self.channel.taken.discard(delivery_tag)
            virtual.QoS.append(self, message, delivery_tag)
        else:  # delivered some other way (a fanout message, a basic_get): kombu records it
            super().append(message, delivery_tag)
        self.leases.hold(delivery_tag)

    def ack(self, delivery_tag: str) -> None:
        self.leases.release(delivery_tag)
        super().ack(delivery_tag)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        self.leases.release(delivery_tag)
        super().reject(delivery_tag, requeue=requeue)

    def restore_unacked(self, client: Any = None) -> None:
        self.leases.release_all()
        super().restore_unacked(client)

    def restore_visible(self, start: int = 0, num: int | None = 10, interval: int = 10) -> None:
        """kombu's sweep, restoring each message only if its lease has still run out
        when the restore happens: a renewal just after the scan keeps it held."""
        self._vrestore_count += 1
        if (self._vrestore_count - 1) % (interval or 1):
            return
        with self.channel.conn_or_acquire() as client:
            try:
                with kombu_redis.Mutex(client, self.unacked_mutex_key,
                                       self.unacked_mutex_expire):
                    ceil = time.time() - self.visibility_timeout
                    for tag in client.zrange(self.unacked_index_key, ceil, 0, desc=True,
                                             byscore=True, offset=num and start, num=num):
                        self.restore_expired(tag, ceil, client)
            except kombu_redis.MutexHeld:
                pass

    def restore_expired(self, tag: bytes, ceil: float, client: Any) -> None:
        """Put one message back on its queue if its lease is older than ``ceil``, in one
        transaction that a renewal, an acknowledgement or another sweep meanwhile
        aborts (and redis-py retries): a message is restored at most once."""

        def move(pipe: Any) -> None:
            score = pipe.zscore(self.unacked_index_key, tag)
            raw = pipe.hget(self.unacked_key, tag)
            pipe.multi()
            if score is None or score > ceil:
                return
            self._remove_from_indices(tag, pipe)
            if raw:
                message, exchange, routing_key = loads(bytes_to_str(raw))
                self.channel._do_restore_message(message, exchange, routing_key, pipe)

        client.transaction(move, self.unacked_key, self.unacked_index_key)


class Channel(kombu_redis.Channel):
    """kombu's Redis channel, taking messages with ``TAKE`` instead of BRPOP.

    The consuming connection alternates between two commands: ``TAKE`` (answered at
    once) while messages may be waiting, and, after a take found nothing, a blocking
    wait on the first queue that claims its next message for this consumer as soon as
    there is one, or returns after kombu's ``brpop_timeout`` (1 s). kombu's poller,
    health checks and prefetch pauses see them as they saw BRPOP. The queue's size and
    its purge count its claimed messages too."""

    QoS = LeasedQoS
    qos: LeasedQoS
    _waiting = False  # the last take found nothing: wait before the next one
    _in_take = False  # the command in flight on the consuming connection is a take

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.taken: set[str] = set()  # recorded by ``TAKE``, not yet appended to the QoS
        self._unheld_queues: set[str] = set()  # consumed without acknowledgements
        super().__init__(*args, **kwargs)
        self._check_version()

    def _check_version(self) -> None:
        try:
            version = str(self.client.info("server").get("redis_version", ""))
        except self.ResponseError:  # INFO refused (an ACL): BLMOVE will say it instead
            return
        check_redis_version(version)

    def basic_consume(self, queue: str, no_ack: bool, *args: Any, **kwargs: Any) -> Any:
        (self._unheld_queues.add if no_ack else self._unheld_queues.discard)(queue)
        return super().basic_consume(queue, no_ack, *args, **kwargs)

    def _brpop_start(self, timeout: float | None = None) -> None:
        queues = self._queue_cycle.consume(len(self.active_queues))
        if not queues:
            return
        connection = self.client.connection
        self._in_poll = connection
        self._brpop_sent_at = time.monotonic()  # type: ignore[assignment]
        self._in_take = not self._waiting
        if self._in_take:
            pairs = [(self.claimed_key(queue), queue) for queue in queues]
            pairs += [(self._q_for_pri(queue, pri), queue) for pri in self.priority_steps
                      for queue in queues]
            connection.send_command(
                "EVAL", TAKE, len(pairs) + 2, *(key for key, _ in pairs), self.unacked_key,
                self.unacked_index_key, time.time(),
                *(0 if queue in self._unheld_queues else 1 for _, queue in pairs))
        else:
            queue = self.active_queues[0]
            wait = self.brpop_timeout if timeout is None else timeout
            connection.send_command("BLMOVE", self._q_for_pri(queue, 0),
                                    self.claimed_key(queue), "RIGHT", "LEFT", wait or 0)

    def claimed_key(self, queue: str) -> str:
        """The list of the queue's messages an idle consumer's wait moved off it, not
        taken yet."""
        return f"{queue}{self.sep}{CLAIMED}"

    def _size(self, queue: str) -> int:
        with self.conn_or_acquire() as client:
            claimed = int(client.llen(self.claimed_key(queue)))
        return int(super()._size(queue)) + claimed

    def _purge(self, queue: str) -> int:
        with self.conn_or_acquire() as client, client.pipeline() as pipe:
            claimed = int(pipe.llen(self.claimed_key(queue))
                          .delete(self.claimed_key(queue)).execute()[0])
        return int(super()._purge(queue)) + claimed

    def _delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        super()._delete(queue, *args, **kwargs)
        with self.conn_or_acquire(client=kwargs.get("client")) as client:
            client.delete(self.claimed_key(queue))

    def _brpop_read(self, **options: Any) -> bool:
        took, self._in_take = self._in_take, False
        try:
            try:
                reply = self.client.parse_response(self.client.connection,
                                                   "EVAL" if took else "BLMOVE", **options)
            except self.connection_errors:
                self._waiting = False
                self.client.connection.disconnect()
                raise
            self._waiting = took and not reply
            if not took or not reply:
                raise Empty()
            key, item, recorded = reply
            queue = bytes_to_str(key).rsplit(self.sep, 1)[0]
            self._queue_cycle.rotate(queue)
            payload = loads(bytes_to_str(item))
            if recorded:
                self.taken.add(payload["properties"]["delivery_tag"])
            self.connection._deliver(payload, queue)
            return True
        finally:
            self._in_poll = None  # type: ignore[assignment]
            self._flush_brpop_reauth()

    def close(self) -> None:
        qos = self.__dict__.get("qos")  # kombu creates it on first use
        if qos is not None:
            qos.leases.stop()
        super().close()


class Poller(kombu_redis.MultiChannelPoller):
    """kombu's poller, except that a take's reply is read at once even when the channel
    has no credit left: the message in it is held already, and its lease would run out
    unrenewed while the reply waited for credit."""

    def _pause_brpop(self, channel: Any, fileno: int) -> None:
        if not getattr(channel, "_in_take", False):
            super()._pause_brpop(channel, fileno)

    def on_readable(self, fileno: int) -> Any:
        found = self._fd_to_chan.get(fileno)
        if (found is not None and found[1] == "BRPOP" and fileno not in self._paused_brpop
                and getattr(found[0], "_in_take", False)):
            return found[0].handlers["BRPOP"]()
        return super().on_readable(fileno)


class Transport(kombu_redis.Transport):
    Channel = Channel

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cycle = Poller()  # type: ignore[assignment]
