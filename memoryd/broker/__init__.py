"""What differs between the two brokers memoryd supports, behind one protocol.

Redis (the default, and the embedded broker) emulates acknowledgements with a
visibility timeout: workers take each message and record it as held in one atomic step
and renew the leases of the messages they hold (``redis_leases``), so a dead worker's
messages come back within the timeout, and deliveries are counted beside the queues.
RabbitMQ (``amqp://``) gives a dead consumer's messages back as soon as its connection
drops; memoryd declares its queues as quorum queues, which count deliveries themselves
and stop redelivering at a limit.

The broker layer, just above the base modules (``memoryd.layers``), of which it imports
only the settings: the thin client builds its queues from this module too, so client
and worker always declare the same queues."""

from __future__ import annotations

from typing import Any, Protocol

from kombu.entity import Exchange, Queue

from memoryd.config import Settings, is_rabbitmq

# The task queues (also in ``celery_config``, which imports this module).
QUEUES = ("memory", "maintenance")
# Quorum queues dead-letter a message on their own this many deliveries after memoryd's
# guard should have: a backstop for a guard that could not record it (database down).
BROKER_LIMIT_MARGIN = 3
BROKER_DEAD_QUEUE = "memoryd.dead"


class Broker(Protocol):
    name: str

    def queue(self, name: str, settings: Settings) -> Queue:
        """How memoryd declares one of its task queues."""

    def worker_options(self, settings: Settings) -> dict[str, Any]:
        """Celery settings only workers need on this broker."""

    def queue_lengths(self, channel: Any) -> dict[str, int]:
        """Messages waiting in each of memoryd's queues (for ``memoryd status``)."""

    def prepare(self, app: Any) -> None:
        """What a worker declares on the broker as it starts, beyond its task queues."""


class RedisBroker:
    name = "redis"

    def queue(self, name: str, settings: Settings) -> Queue:
        return Queue(name)

    def worker_options(self, settings: Settings) -> dict[str, Any]:
        return {"broker_transport": "memoryd.broker.redis_leases:Transport"}

    def queue_lengths(self, channel: Any) -> dict[str, int]:
        return {name: int(channel.client.llen(name)) for name in QUEUES}

    def prepare(self, app: Any) -> None:
        return None


class RabbitBroker:
    name = "rabbitmq"

    def queue(self, name: str, settings: Settings) -> Queue:
        # A topic exchange: Celery's native delayed delivery (countdown retries parked in
        # RabbitMQ, not in the worker) routes through topic exchanges only.
        return Queue(name, Exchange(name, type="topic"), routing_key=name, queue_arguments={
            "x-queue-type": "quorum",
            "x-delivery-limit": settings.dead_letter_after + BROKER_LIMIT_MARGIN,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": BROKER_DEAD_QUEUE})

    def worker_options(self, settings: Settings) -> dict[str, Any]:
        # Quorum queues have no global QoS; Celery then delays countdown retries with
        # RabbitMQ's native delayed delivery instead of holding them in the worker.
        return {"worker_detect_quorum_queues": True}

    def prepare(self, app: Any) -> None:
        with app.connection_for_write() as conn:
            channel = conn.default_channel
            for queue in app.conf.task_queues:
                queue.bind(channel).declare()
            Queue(BROKER_DEAD_QUEUE, queue_arguments={"x-queue-type": "quorum"}).bind(
                channel).declare()

    def queue_lengths(self, channel: Any) -> dict[str, int]:
        lengths = {}
        for name in (*QUEUES, BROKER_DEAD_QUEUE):
            try:
                lengths[name] = int(channel.queue_declare(queue=name, passive=True).message_count)
            except Exception:  # not declared yet: no worker started; the channel is closed
                channel = channel.connection.channel()
        return lengths


def broker_for(url: str) -> Broker:
    return RabbitBroker() if is_rabbitmq(url) else RedisBroker()
