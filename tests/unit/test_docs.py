"""The README is part of the interface: its tables must match the code."""

from __future__ import annotations

import re
from pathlib import Path

from memoryd.config import Settings
from memoryd.schedules.table import DEFAULT_SCHEDULE

README = (Path(__file__).parents[2] / "README.md").read_text()


def test_every_setting_is_documented() -> None:
    documented = set(re.findall(r"MEMORYD_[A-Z0-9_]+", README))
    expanded = set(documented)
    for name in documented:  # "MEMORYD_WEIGHT_SEMANTIC` / `_KEYWORD`" style rows
        expanded.add(name.rstrip("_"))
    for row in re.findall(r"`(MEMORYD_[A-Z0-9_]+)`((?: / `_[A-Z_]+`)+)", README):
        stem = row[0].rsplit("_", 1)[0]
        expanded.update(stem + suffix for suffix in re.findall(r"`(_[A-Z_]+)`", row[1]))
    missing = [
        f"MEMORYD_{field.upper()}" for field in Settings.model_fields
        if f"MEMORYD_{field.upper()}" not in expanded and not field.startswith("schedule_")
    ]
    assert not missing, f"README configuration table lacks {missing}"
    assert "MEMORYD_SCHEDULE_<JOB>" in README


def test_schedule_table_matches_code() -> None:
    for entry in DEFAULT_SCHEDULE:
        assert re.search(rf"\| `{entry.job}` \| `{re.escape(entry.cron)}` \|", README), entry.job


def test_readme_states_the_two_commands() -> None:
    assert "./dev up" in README and "./dev test" in README
    ci = (Path(__file__).parents[2] / ".ci" / "run").read_text()
    assert "./dev test" in ci
