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

Selected with the worker app's ``broker_transport`` for ``redis://`` URLs; publishers
(the client, beat) use kombu's transport unchanged."""

from __future__ import annotations

import threading
import time
from typing import Any

import structlog
from kombu.transport import redis as kombu_redis

log = structlog.get_logger(__name__)

# A renewal happens every visibility_timeout / RENEWALS_PER_TIMEOUT seconds.
RENEWALS_PER_TIMEOUT = 3


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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.leases = LeaseRenewer(self)

    def append(self, message: Any, delivery_tag: str) -> None:
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


class Channel(kombu_redis.Channel):
    QoS = LeasedQoS

    def close(self) -> None:
        qos = self.__dict__.get("qos")  # kombu creates it on first use
        if qos is not None:
            qos.leases.stop()
        super().close()


class Transport(kombu_redis.Transport):
    Channel = Channel
