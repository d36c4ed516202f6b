"""The period a question names (memoryd/memory/timewords.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memoryd.memory.timewords import DAY_SLACK, named_period


def _day(y: int, m: int, d: int) -> tuple[datetime, datetime]:
    day = datetime(y, m, d, tzinfo=UTC)
    return day - DAY_SLACK, day + timedelta(days=1) + DAY_SLACK


@pytest.mark.parametrize(("question", "period"), [
    ("What setback did Mel face in October 2023?",
     (datetime(2023, 10, 1, tzinfo=UTC), datetime(2023, 11, 1, tzinfo=UTC))),
    ("What happened in Dec 2022?",
     (datetime(2022, 12, 1, tzinfo=UTC), datetime(2023, 1, 1, tzinfo=UTC))),
    ("What did she show him on October 13, 2023?", _day(2023, 10, 13)),
    ("What did Gina find on 1 February, 2023?", _day(2023, 2, 1)),
    ("What did they cook on the 3rd March 2021?", _day(2021, 3, 3)),
    ("How often did she go to the beach in 2023?",
     (datetime(2023, 1, 1, tzinfo=UTC), datetime(2024, 1, 1, tzinfo=UTC))),
    ("What may happen next?", None),
    ("When did she move to Oslo?", None),
    ("What did they do last week?", None),  # relative periods are not read
    ("What was planned for February 30, 2023?", None),  # no such day
])
def test_the_named_period(question: str, period: tuple[datetime, datetime] | None) -> None:
    assert named_period(question) == period
