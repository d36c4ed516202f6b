"""``python -m tests.support.lease_consumer URL [--kombu] [--stop-at-take]``: a bare kombu
consumer of the ``memory`` queue on memoryd's Redis transport (or kombu's own, with
``--kombu``), with the worker's redelivery settings and no Celery, models or database,
so it starts in a fraction of a second and can be killed many times over.

Each message body is ``{"id": N}``. Handling one mirrors an idempotent store:
``deliveries`` counts every delivery (``log``: id, pid and time of each), ``processed``
is the effect (a set, like a row found again by its content hash), ``acks`` counts the
acknowledgements that returned, and a delivery of an id already in ``acked`` is pushed
on ``after_ack`` (a message the broker gave out again after it was acknowledged: a real
duplicate). ``ready:<pid>`` is pushed once the consumer consumes.

``--stop-at-take`` stops the process (SIGSTOP) as the first message reaches the
transport's hands, before kombu or Celery see it: after BRPOP popped it on kombu's
transport, after ``TAKE`` recorded it on memoryd's. The test kills it there."""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import time
from typing import Any

import redis
from kombu import Connection, Consumer, Queue
from kombu.transport import redis as kombu_redis

from memoryd.broker import redis_leases
from memoryd.celery_config import broker_transport_options
from memoryd.config import get_settings

QUEUE = "memory"


def transport(kombu: bool, stop_at_take: bool) -> type[kombu_redis.Transport]:
    base = kombu_redis.Transport if kombu else redis_leases.Transport

    class Stopping(base):  # type: ignore[valid-type, misc]
        stopped = False

        def _deliver(self, message: Any, queue: str) -> None:
            if stop_at_take and not Stopping.stopped:
                Stopping.stopped = True
                os.kill(os.getpid(), signal.SIGSTOP)
            super()._deliver(message, queue)

    return Stopping


def handle(marks: redis.Redis, body: dict[str, Any], message: Any) -> None:
    mid = str(body["id"])
    with marks.pipeline() as pipe:
        pipe.hincrby("deliveries", mid, 1).sismember("acked", mid)
        pipe.rpush("log", f"{mid} {os.getpid()} {time.time()}")
        if pipe.execute()[1]:
            marks.rpush("after_ack", mid)
    time.sleep(random.uniform(0, 0.004))  # the work: a kill may land anywhere around it
    marks.sadd("processed", mid)
    time.sleep(random.uniform(0, 0.002))
    message.ack()
    with marks.pipeline() as pipe:
        pipe.hincrby("acks", mid, 1).sadd("acked", mid).execute()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--kombu", action="store_true")
    parser.add_argument("--stop-at-take", action="store_true")
    args = parser.parse_args()
    marks = redis.Redis.from_url(args.url)
    options = broker_transport_options(get_settings())
    with Connection(args.url, transport=transport(args.kombu, args.stop_at_take),
                    transport_options=options) as conn, \
            Consumer(conn, [Queue(QUEUE)], prefetch_count=1,
                     callbacks=[lambda body, message: handle(marks, body, message)]):
        marks.rpush(f"ready:{os.getpid()}", 1)
        interval = options["unacked_restore_interval"]
        swept = float("-inf")  # a worker sweeps as it starts, then on a timer
        while True:
            with contextlib.suppress(TimeoutError):
                conn.drain_events(timeout=0.5)
            if time.monotonic() - swept >= interval:  # what a worker's timer does
                conn.transport.cycle.maybe_restore_messages()
                swept = time.monotonic()


if __name__ == "__main__":
    main()
