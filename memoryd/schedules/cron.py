"""Parsing and validating five-field cron strings (no third-party dependency,
so the settings module can validate without importing Celery or APScheduler).

``Cron.expand`` turns a string into explicit value sets. The Celery and
APScheduler renderings are built from those sets rather than from the raw
fields, because the two libraries disagree with cron and with each other on
details (weekday numbering, ``7`` for Sunday, ``N/step``); with explicit sets
there is exactly one interpretation: this module's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from memoryd.errors import ConfigError

_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day_of_month", 1, 31),
           ("month_of_year", 1, 12), ("day_of_week", 0, 7))
_ATOM = re.compile(r"^(\*|\d+(-\d+)?)(/\d+)?$")
# Longest each month can be (February in a leap year), to reject days that never come.
_MONTH_DAYS = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31,
               11: 30, 12: 31}


@dataclass(frozen=True)
class CronSets:
    """The values each field of a cron string admits, spelled out.

    ``day_of_week`` uses cron's numbering, 0 = Sunday .. 6 = Saturday (``7``
    is folded onto 0). Day of month and day of week must *both* match, as in
    Celery and APScheduler (``parse_cron`` rejects strings where classic cron
    would OR them instead).
    """

    minute: frozenset[int]
    hour: frozenset[int]
    day_of_month: frozenset[int]
    month_of_year: frozenset[int]
    day_of_week: frozenset[int]

    def matches(self, when: datetime) -> bool:
        """Whether the wall-clock minute ``when`` (in the schedule's zone) fires."""
        return (when.minute in self.minute and when.hour in self.hour
                and when.day in self.day_of_month and when.month in self.month_of_year
                and when.isoweekday() % 7 in self.day_of_week)


@dataclass(frozen=True)
class Cron:
    minute: str
    hour: str
    day_of_month: str
    month_of_year: str
    day_of_week: str

    def __str__(self) -> str:
        return " ".join((self.minute, self.hour, self.day_of_month,
                         self.month_of_year, self.day_of_week))

    def expand(self) -> CronSets:
        """The explicit value sets; ``N/step`` means ``N-max/step`` (as in cronie)."""
        minute, hour, dom, month, dow = (
            _expand_field(getattr(self, field), low, high) for field, low, high in _FIELDS)
        return CronSets(minute, hour, dom, month, frozenset(day % 7 for day in dow))

    def spelled_out(self) -> dict[str, str]:
        """Each field (by its name here, which Celery's ``crontab`` shares) as ``*`` or
        the explicit list of its values: the form the schedulers cannot misread."""
        sets = self.expand()
        return {field: "*" if getattr(self, field) == "*"
                else ",".join(str(value) for value in sorted(getattr(sets, field)))
                for field, _, _ in _FIELDS}


def parse_cron(expr: str, name: str = "schedule") -> Cron:
    """Parse ``expr`` or raise ``ConfigError`` naming ``name`` and the bad field."""
    parts = expr.split()
    if len(parts) != 5:
        raise ConfigError(f"{name}: {expr!r} is not a 5-field cron string (or 'off')")
    for part, (field, low, high) in zip(parts, _FIELDS, strict=True):
        for atom in part.split(","):
            if not _ATOM.match(atom) or not _in_range(atom, low, high):
                raise ConfigError(f"{name}: bad {field} {part!r} in cron {expr!r}")
    cron = Cron(*parts)
    _check_days(cron, f"{name}: cron {expr!r}")
    return cron


def validate_cron(expr: str, name: str) -> None:
    try:
        parse_cron(expr, name)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


def _in_range(atom: str, low: int, high: int) -> bool:
    base, _, step = atom.partition("/")
    if step and int(step) == 0:
        return False
    if base == "*":
        return True
    start, _, end = base.partition("-")
    numbers = [int(start)] + ([int(end)] if end else [])
    return all(low <= n <= high for n in numbers) and numbers == sorted(numbers)


def _expand_field(part: str, low: int, high: int) -> frozenset[int]:
    """Expand one (already validated) field: ``*``, ``N``, ``N-M``, each with ``/step``."""
    values: set[int] = set()
    for atom in part.split(","):
        base, _, step = atom.partition("/")
        if base == "*":
            start, end = low, high
        else:
            first, _, last = base.partition("-")
            start = int(first)
            end = int(last) if last else (high if step else start)
        values.update(range(start, end + 1, int(step) if step else 1))
    return frozenset(values)


def _check_days(cron: Cron, what: str) -> None:
    """Reject day fields that Celery/APScheduler would read differently from cron, or never."""
    if not cron.day_of_month.startswith("*") and not cron.day_of_week.startswith("*"):
        # Classic cron fires when EITHER day field matches; Celery and APScheduler
        # require BOTH. Refuse rather than silently run on far fewer days.
        raise ConfigError(f"{what} restricts both day of month and day of week; "
                          "restrict only one (cron would OR them, memoryd cannot)")
    sets = cron.expand()
    if not any(day <= _MONTH_DAYS[month]
               for month in sets.month_of_year for day in sets.day_of_month):
        raise ConfigError(f"{what} names a day that none of its months has; it never fires")
