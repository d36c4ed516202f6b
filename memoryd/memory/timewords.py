"""The period a question names: "in May 2023", "on October 13, 2023", "on 1 February,
2023", "in 2022". Pure functions; recall uses the period to favour memories created in it
(``MEMORYD_RECALL_TIME_BOOST``).

Only absolute dates are read: a relative one ("last week") means something else to an
agent replaying an old conversation than to one living in it, and a wrong period would
push the right memory down."""

from __future__ import annotations

import calendar
import re
from datetime import UTC, datetime, timedelta

_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({_MONTH})\.?,?\s+(\d{{4}})\b",
                             re.IGNORECASE)
_MONTH_DAY_YEAR = re.compile(rf"\b({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b",
                             re.IGNORECASE)
_MONTH_YEAR = re.compile(rf"\b({_MONTH})\.?,?\s+(\d{{4}})\b", re.IGNORECASE)
_YEAR = re.compile(r"\b(?:in|during|of|since)\s+((?:19|20)\d{2})\b", re.IGNORECASE)
# A day named is read as that day give or take this much (conversations mention a day
# in the turns of the next session too).
DAY_SLACK = timedelta(days=3)


def named_period(question: str) -> tuple[datetime, datetime] | None:
    """The [start, end) period the question names, in UTC; None if it names none."""
    for pattern, order in ((_DAY_MONTH_YEAR, "dmy"), (_MONTH_DAY_YEAR, "mdy")):
        found = pattern.search(question)
        if found:
            parts = dict(zip(order, found.groups(), strict=True))
            day = _date(int(parts["y"]), _MONTHS[parts["m"].lower()], int(parts["d"]))
            if day is not None:
                return day - DAY_SLACK, day + timedelta(days=1) + DAY_SLACK
    found = _MONTH_YEAR.search(question)
    if found:
        month, year = _MONTHS[found.group(1).lower()], int(found.group(2))
        start = datetime(year, month, 1, tzinfo=UTC)
        end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
        return start, end
    found = _YEAR.search(question)
    if found:
        year = int(found.group(1))
        return datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)
    return None


def _date(year: int, month: int, day: int) -> datetime | None:
    try:
        return datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return None
