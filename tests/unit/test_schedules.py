"""The schedule table, its env overrides, and its Celery beat / APScheduler renderings.

No database or broker: beat entries are plain ``crontab`` objects and the
APScheduler jobs are added to a scheduler that is never started.

The central check is that both renderings fire at the same instants. Fire
times are compared over an 8-day window (so every weekday occurs) that contains
no DST change, computed independently for each library: Celery by testing every
minute against the crontab's parsed sets (Celery numbers weekdays from 0 =
Sunday), APScheduler by chaining ``CronTrigger.get_next_fire_time``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.blocking import BlockingScheduler
from apscheduler.triggers.cron import CronTrigger
from celery.schedules import crontab

from memoryd.config import Settings, override_settings
from memoryd.errors import ConfigError
from memoryd.schedules import parse_cron
from memoryd.schedules.aps import add_jobs, build_scheduler
from memoryd.schedules.beat import beat_schedule
from memoryd.schedules.names import JOB_NAMES as JOBS
from memoryd.schedules.table import DEFAULT_SCHEDULE, effective_schedule, expires_for

REQUIRED_CRONS = {
    "consolidate": "0 */6 * * *",
    "evict": "0 3 * * *",
    "expire": "0 * * * *",
    "deduplicate": "30 3 * * *",
    "summarize": "0 4 * * *",
    "cortex": "30 */6 * * *",
    "compact_sessions": "15 * * * *",
    "repair_sessions": "0 5 * * *",
    "index_agents": "45 * * * *",
    "reembed": "50 * * * *",
    "reconcile": "40 3 * * *",
}
HOURLY, SIX_HOURLY, DAILY = 50 * 60, 5 * 3600, 23 * 3600

# Monday 2025-06-02; no DST transition in Europe/Berlin within the next 8 days.
START_WALL = datetime(2025, 6, 2)  # naive; each test attaches its zone
WINDOW = timedelta(days=8)

# Weekday overrides, assigned to otherwise-daily jobs so one settings load covers all.
WEEKDAY_OVERRIDES = {
    "evict": "0 9 * * 1-5",        # Monday..Friday
    "summarize": "0 9 * * 0",      # Sunday
    "deduplicate": "0 9 * * 7",    # Sunday, spelled 7
    "repair_sessions": "0 9 * * 5-7",  # Friday..Sunday
    "cortex": "0 9 * * */2",       # Sunday, Tuesday, Thursday, Saturday
}
# The June 2025 dates (Mon 2 .. Mon 9) each override fires on, at 09:00 local.
EXPECTED_WEEKDAY_DATES = {
    "evict": [2, 3, 4, 5, 6, 9],
    "summarize": [8],
    "deduplicate": [8],
    "repair_sessions": [6, 7, 8],
    "cortex": [3, 5, 7, 8],
}


@contextmanager
def settings_with(**env: str | None) -> Iterator[Settings]:
    """``override_settings`` with every schedule override and the timezone pinned,
    so a developer's own ``MEMORYD_*`` variables cannot leak into these tests."""
    pinned: dict[str, str | None] = {f"schedule_{job}": None for job in JOBS}
    pinned["timezone"] = "UTC"
    with override_settings(**(pinned | env)) as settings:
        yield settings


def celery_fire_times(schedule: crontab, tz: ZoneInfo, start: datetime,
                      end: datetime) -> list[datetime]:
    """Every minute in [start, end) whose wall-clock time in ``tz`` the crontab admits."""
    fires = []
    moment = start.astimezone(UTC)
    while moment < end:
        local = moment.astimezone(tz)
        if (local.minute in schedule.minute and local.hour in schedule.hour
                and local.day in schedule.day_of_month
                and local.month in schedule.month_of_year
                and local.isoweekday() % 7 in schedule.day_of_week):
            fires.append(moment)
        moment += timedelta(minutes=1)
    return fires


def aps_fire_times(trigger: Any, start: datetime, end: datetime) -> list[datetime]:
    """The trigger's fire times in [start, end), as UTC instants."""
    fires = []
    fire = trigger.get_next_fire_time(None, start)
    while fire is not None and fire < end:
        fires.append(fire.astimezone(UTC))
        fire = trigger.get_next_fire_time(fire, fire)
    return fires


def aps_triggers(settings: Settings) -> dict[str, Any]:
    """The triggers ``add_jobs`` really registers, from an unstarted scheduler."""
    scheduler = BackgroundScheduler(timezone=settings.timezone)
    add_jobs(scheduler, settings, lambda job: None)
    return {job.id: job.trigger for job in scheduler.get_jobs()}


def window(settings: Settings) -> tuple[ZoneInfo, datetime, datetime]:
    tz = ZoneInfo(settings.timezone)
    start = START_WALL.replace(tzinfo=tz)
    return tz, start, start + WINDOW


def assert_renderings_agree(settings: Settings) -> dict[str, list[datetime]]:
    """Both renderings, and the pure-Python cron expansion, give identical fire times."""
    tz, start, end = window(settings)
    beat = beat_schedule(settings)
    triggers = aps_triggers(settings)
    entries = effective_schedule(settings)
    assert set(beat) == set(triggers) == {entry.job for entry in entries}
    fires = {}
    for entry in entries:
        celery = celery_fire_times(beat[entry.job]["schedule"], tz, start, end)
        aps = aps_fire_times(triggers[entry.job], start, end)
        assert celery, f"{entry.job} ({entry.cron}) never fires in the window"
        assert aps == celery, f"{entry.job} ({entry.cron}): APScheduler != Celery"
        sets = entry.parsed().expand()
        assert [t for t in celery if sets.matches(t.astimezone(tz))] == celery
        fires[entry.job] = celery
    return fires


# --- the table ------------------------------------------------------------------------


def test_default_table_has_every_job_with_the_required_cron() -> None:
    assert tuple(entry.job for entry in DEFAULT_SCHEDULE) == JOBS
    assert {entry.job: entry.cron for entry in DEFAULT_SCHEDULE} == REQUIRED_CRONS
    for entry in DEFAULT_SCHEDULE:
        assert entry.task_name == f"memoryd.maintenance.{entry.job}"
        assert entry.description


def test_expiry_follows_the_cadence_and_its_derivation() -> None:
    expected = {"consolidate": SIX_HOURLY, "cortex": SIX_HOURLY, "expire": HOURLY,
                "compact_sessions": HOURLY, "index_agents": HOURLY, "reembed": HOURLY,
                "evict": DAILY,
                "deduplicate": DAILY, "summarize": DAILY, "repair_sessions": DAILY,
                "reconcile": DAILY}
    for entry in DEFAULT_SCHEDULE:
        assert entry.expires_s == expected[entry.job]
        assert entry.expires_s == expires_for(parse_cron(entry.cron))


def test_daily_jobs_do_not_pile_up() -> None:
    daily = [entry for entry in DEFAULT_SCHEDULE if entry.expires_s == DAILY]
    times = [tuple(entry.cron.split()[:2]) for entry in daily]
    assert len(set(times)) == len(times) == 5


def test_without_overrides_the_effective_schedule_is_the_table() -> None:
    with settings_with() as settings:
        assert effective_schedule(settings) == list(DEFAULT_SCHEDULE)


# --- overrides --------------------------------------------------------------------------


def test_env_override_replaces_the_cron() -> None:
    with settings_with(schedule_evict="0 2 * * *") as settings:
        entries = {entry.job: entry for entry in effective_schedule(settings)}
        beat = beat_schedule(settings)
        triggers = aps_triggers(settings)
    assert entries["evict"].cron == "0 2 * * *"
    assert entries["evict"].expires_s == DAILY
    assert [e.cron for j, e in entries.items() if j != "evict"] == [
        c for j, c in REQUIRED_CRONS.items() if j != "evict"]
    assert beat["evict"]["schedule"].hour == {2}
    assert beat["evict"]["schedule"].minute == {0}
    assert "hour='2'" in str(triggers["evict"])


def test_override_rederives_the_expiry() -> None:
    with settings_with(schedule_evict="*/15 * * * *") as settings:
        entries = {entry.job: entry for entry in effective_schedule(settings)}
        beat = beat_schedule(settings)
    assert entries["evict"].expires_s == 750  # 15 min minus a sixth
    assert beat["evict"]["options"]["expires"] == 750


@pytest.mark.parametrize("off", ["off", "OFF", " Off "])
def test_off_disables_the_job_everywhere(off: str) -> None:
    with settings_with(schedule_cortex=off) as settings:
        jobs = [entry.job for entry in effective_schedule(settings)]
        beat = beat_schedule(settings)
        ids = add_jobs(BackgroundScheduler(timezone="UTC"), settings, lambda job: None)
    assert "cortex" not in jobs
    assert jobs == [job for job in JOBS if job != "cortex"]
    assert "cortex" not in beat
    assert ids == jobs


@pytest.mark.parametrize("bad", [
    "61 * * * *",      # minute out of range
    "0 * * *",         # four fields
    "0 24 * * *",      # hour out of range
    "0 9 1 * 1",       # cron would OR the day fields; Celery/APScheduler AND them
    "0 0 31 2 *",      # February never has a 31st
    "*/0 * * * *",     # zero step
])
def test_bad_cron_fails_at_settings_load(bad: str) -> None:
    with pytest.raises(ConfigError, match="MEMORYD_SCHEDULE_EXPIRE"), \
            settings_with(schedule_expire=bad):
        pass  # pragma: no cover


def test_overrides_are_read_into_one_mapping() -> None:
    with settings_with(schedule_evict=" 0 2 * * * ", schedule_cortex="OFF",
                       schedule_expire="") as settings:
        assert settings.schedule == {"evict": "0 2 * * *", "cortex": "OFF"}


def test_an_empty_override_is_unset() -> None:
    with settings_with(schedule_expire="  ") as settings:
        assert effective_schedule(settings) == list(DEFAULT_SCHEDULE)


def test_an_override_of_an_unknown_job_fails_where_the_table_is_rendered() -> None:
    with settings_with(schedule_evicts="0 2 * * *") as settings:
        with pytest.raises(ConfigError, match="MEMORYD_SCHEDULE_EVICTS"):
            effective_schedule(settings)
        with pytest.raises(ConfigError, match="MEMORYD_SCHEDULE_EVICTS"):
            beat_schedule(settings)
        with pytest.raises(ConfigError, match="MEMORYD_SCHEDULE_EVICTS"):
            build_scheduler(settings, lambda job: None)


def test_cron_expansion_uses_cron_semantics() -> None:
    assert parse_cron("0 9 * * 5-7").expand().day_of_week == {5, 6, 0}
    assert parse_cron("0 9 * * */2").expand().day_of_week == {0, 2, 4, 6}
    assert parse_cron("3/20 * * * *").expand().minute == {3, 23, 43}
    assert parse_cron("0 0 */10 */5 *").expand().day_of_month == {1, 11, 21, 31}
    assert parse_cron("0 0 */10 */5 *").expand().month_of_year == {1, 6, 11}


# --- renderings ---------------------------------------------------------------------------


def test_beat_schedule_entries() -> None:
    with settings_with() as settings:
        beat = beat_schedule(settings)
    assert list(beat) == list(JOBS)
    for entry in DEFAULT_SCHEDULE:
        item = beat[entry.job]
        assert item["task"] == entry.task_name
        assert isinstance(item["schedule"], crontab)
        assert item["options"] == {"queue": "maintenance", "expires": entry.expires_s}


def test_add_jobs_registers_one_guarded_job_per_entry() -> None:
    calls: list[str] = []
    scheduler = BackgroundScheduler(timezone="UTC")
    with settings_with(timezone="Europe/Berlin") as settings:
        ids = add_jobs(scheduler, settings, calls.append)
    assert ids == list(JOBS)
    jobs = {job.id: job for job in scheduler.get_jobs()}
    assert list(jobs) == list(JOBS)
    for entry in DEFAULT_SCHEDULE:
        job = jobs[entry.job]
        assert job.args == (entry.job,)
        assert job.max_instances == 1
        assert job.coalesce is True
        assert job.misfire_grace_time == entry.expires_s
        assert str(job.trigger.timezone) == "Europe/Berlin"
        job.func(*job.args)
    assert calls == list(JOBS)


def test_build_scheduler() -> None:
    with settings_with(timezone="Europe/Berlin", schedule_expire="off") as settings:
        background = build_scheduler(settings, lambda job: None)
        blocking = build_scheduler(settings, lambda job: None, blocking=True)
    assert isinstance(background, BackgroundScheduler)
    assert isinstance(blocking, BlockingScheduler)
    for scheduler in (background, blocking):
        assert not scheduler.running
        assert str(scheduler.timezone) == "Europe/Berlin"
        assert [job.id for job in scheduler.get_jobs()] == [j for j in JOBS if j != "expire"]


@pytest.mark.parametrize("tz", ["UTC", "Europe/Berlin"])
def test_renderings_agree_on_the_default_table(tz: str) -> None:
    with settings_with(timezone=tz) as settings:
        fires = assert_renderings_agree(settings)
    days = WINDOW.days
    assert len(fires["expire"]) == 24 * days
    assert len(fires["consolidate"]) == 4 * days
    assert len(fires["evict"]) == days
    local = fires["evict"][0].astimezone(ZoneInfo(tz))
    assert (local.hour, local.minute) == (3, 0)


@pytest.mark.parametrize("tz", ["UTC", "Europe/Berlin"])
def test_renderings_agree_on_weekday_overrides(tz: str) -> None:
    env = {f"schedule_{job}": cron for job, cron in WEEKDAY_OVERRIDES.items()}
    with settings_with(timezone=tz, **env) as settings:
        fires = assert_renderings_agree(settings)
    zone = ZoneInfo(tz)
    for job, dates in EXPECTED_WEEKDAY_DATES.items():
        expected = [datetime(2025, 6, day, 9, tzinfo=zone).astimezone(UTC) for day in dates]
        assert fires[job] == expected, job


def test_comparison_catches_unconverted_weekdays() -> None:
    """Guard for the test itself: feeding cron weekdays to APScheduler unconverted
    (what ``CronTrigger.from_crontab`` does in 3.x) must make the comparison fail."""
    tz = ZoneInfo("Europe/Berlin")
    start = START_WALL.replace(tzinfo=tz)
    for cron in ("0 9 * * 1-5", "0 9 * * 0"):
        minute, hour, dom, month, dow = cron.split()
        schedule = crontab(minute=minute, hour=hour, day_of_month=dom, month_of_year=month,
                           day_of_week=dow)
        celery = celery_fire_times(schedule, tz, start, start + WINDOW)
        assert celery
        naive = CronTrigger.from_crontab(cron, timezone=tz)
        assert aps_fire_times(naive, start, start + WINDOW) != celery
        with settings_with(timezone="Europe/Berlin", schedule_evict=cron) as settings:
            converted = aps_triggers(settings)["evict"]
        assert aps_fire_times(converted, start, start + WINDOW) == celery, cron
