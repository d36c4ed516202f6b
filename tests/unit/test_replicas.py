"""The replica routing's pure parts: WAL positions, the lag bound, names and settings."""

from __future__ import annotations

import pytest

from memoryd.config import Settings
from memoryd.db import replicas
from memoryd.errors import ConfigError


def test_wal_positions_read_and_write_as_postgres_spells_them() -> None:
    assert replicas.parse_lsn("0/0") == 0
    assert replicas.parse_lsn("16/B374D848") == (0x16 << 32) + 0xB374D848
    for value in (0, 1, 0xFFFFFFFF, 1 << 32, (0x16 << 32) + 0xB374D848):
        assert replicas.parse_lsn(replicas.format_lsn(value)) == value
    assert replicas.parse_lsn("1/0") > replicas.parse_lsn("0/FFFFFFFF")


def test_a_caught_up_replica_has_no_lag_even_when_the_primary_was_idle_for_long() -> None:
    meter = replicas.LagMeter()
    meter.add(100.0, 5000)
    # Its last replayed transaction committed an hour ago; it has all the primary wrote.
    assert meter.lag(100.5, 5000, replay_age_s=3600.0) == pytest.approx(0.5)
    meter.add(101.0, 5000)
    assert meter.lag(101.0, 5000, replay_age_s=3600.0) == 0.0


def test_a_replica_behind_is_as_stale_as_the_newest_check_it_has_replayed() -> None:
    meter = replicas.LagMeter()
    for at, position in ((10.0, 100), (11.0, 200), (12.0, 300)):
        meter.add(at, position)
    assert meter.lag(12.5, 250, replay_age_s=None) == pytest.approx(1.5)
    # A recent replayed commit bounds it more tightly.
    assert meter.lag(12.5, 250, replay_age_s=0.2) == pytest.approx(0.2)
    # Behind every check and nothing replayed: unknown, so unbounded.
    assert meter.lag(12.5, 50, replay_age_s=None) == float("inf")


def test_a_replicas_name_never_holds_its_credentials() -> None:
    name = replicas.safe_name("postgresql+psycopg://memoryd:s3cret@db-2:6432/memoryd")
    assert name == "db-2:6432/memoryd" and "s3cret" not in name


def test_replica_urls_are_split_and_checked_by_name() -> None:
    settings = Settings(database_replica_urls=" postgresql://a/m , ,postgres://b/m")
    assert settings.replica_urls() == ["postgresql://a/m", "postgres://b/m"]
    assert Settings().replica_urls() == []
    assert replicas.replica_set(Settings()) is None


def test_a_replica_url_that_is_not_postgres_is_refused_naming_the_setting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from memoryd.config import get_settings, reset_settings

    monkeypatch.setenv("MEMORYD_DATABASE_REPLICA_URLS", "mysql://db/m")
    reset_settings()
    try:
        with pytest.raises(ConfigError, match="MEMORYD_DATABASE_REPLICA_URLS"):
            get_settings()
    finally:
        monkeypatch.delenv("MEMORYD_DATABASE_REPLICA_URLS")
        reset_settings()


def test_marks_live_in_the_redis_result_backend_else_the_redis_broker() -> None:
    assert replicas.marks_url(Settings(broker_url="redis://b:6379/0")) == "redis://b:6379/0"
    assert replicas.marks_url(Settings(broker_url="amqp://r//",
                                       result_backend="redis://r:6379/1")) == "redis://r:6379/1"
    assert replicas.marks_url(Settings(broker_url="redis://b/0",
                                       result_backend="redis://r/1")) == "redis://r/1"


def test_marks_are_kept_far_longer_than_a_replica_may_lag() -> None:
    assert replicas.mark_ttl_s(Settings()) >= replicas.MARK_TTL_FLOOR_S
    assert replicas.mark_ttl_s(Settings(replica_max_lag_s=120)) >= 10 * 120
