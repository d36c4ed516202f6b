"""The Celery configuration workers run with: JSON only, late acks, redelivery sweeps."""

from __future__ import annotations


def test_worker_app_accepts_json_only() -> None:
    from memoryd.worker import app

    assert list(app.conf.accept_content) == ["json"]
    assert list(app.conf.result_accept_content) == ["json"]
    assert app.conf.task_serializer == "json"
    assert app.conf.result_serializer == "json"


def test_only_maintenance_tasks_report_a_started_state() -> None:
    from memoryd.tasks import maintenance, memory  # noqa: F401 - registers the tasks
    from memoryd.worker import app

    started = {name for name, task in app.tasks.items()
               if name.startswith("memoryd.") and task.track_started}
    assert started == {f"memoryd.maintenance.{job}" for job in maintenance.TASKS}
    assert app.tasks["memoryd.recall"].track_started is False


def test_worker_config_sweeps_for_lost_messages() -> None:
    from memoryd.config import override_settings
    from memoryd.worker.app import worker_config

    broker = "redis://127.0.0.1:1/0"  # never reached: only the configuration is read
    with override_settings(broker_url=broker, visibility_timeout_s="5", task_time_limit_s="4",
                           task_soft_time_limit_s="3") as settings:
        options = worker_config(settings)["broker_transport_options"]
    assert options["visibility_timeout"] == 5
    assert options["unacked_restore_throttle"] == 1
    assert options["unacked_restore_interval"] == 1
    assert options["unacked_mutex_expire"] <= 5
    with override_settings(broker_url=broker, visibility_timeout_s="600") as settings:
        options = worker_config(settings)["broker_transport_options"]
    assert options["unacked_restore_interval"] == 10


def test_a_rabbitmq_broker_without_a_result_backend_is_refused_at_start_up() -> None:
    import pytest

    from memoryd.config import override_settings
    from memoryd.errors import ConfigError

    with pytest.raises(ConfigError, match="MEMORYD_RESULT_BACKEND"), \
            override_settings(broker_url="amqp://guest:guest@127.0.0.1:5672//"):
        pass
    with override_settings(broker_url="amqp://guest:guest@127.0.0.1:5672//",
                           result_backend="redis://127.0.0.1:6379/1") as settings:
        assert settings.result_backend == "redis://127.0.0.1:6379/1"


def test_rabbitmq_queues_are_quorum_queues_with_a_delivery_limit_on_topic_exchanges() -> None:
    from memoryd.broker import BROKER_DEAD_QUEUE, broker_for
    from memoryd.config import override_settings

    with override_settings(dead_letter_after="4") as settings:
        queue = broker_for("amqp://h//").queue("memory", settings)
        assert broker_for("redis://h/0").queue("memory", settings).queue_arguments is None
    assert queue.exchange.type == "topic" and queue.routing_key == "memory"
    assert queue.queue_arguments == {
        "x-queue-type": "quorum", "x-delivery-limit": 7, "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": BROKER_DEAD_QUEUE}


def test_a_redis_older_than_6_2_is_refused_by_name() -> None:
    import pytest

    from memoryd.broker.redis_leases import check_redis_version
    from memoryd.errors import ConfigError

    for old in ("6.0.16", "5.0.7", ""):
        with pytest.raises(ConfigError, match=r"MEMORYD_BROKER_URL.*6\.2 or later"):
            check_redis_version(old)
    for fine in ("6.2.0", "6.2.14", "7.0.15", "10.0.0"):
        check_redis_version(fine)
