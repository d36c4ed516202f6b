"""The documents are part of the interface: their tables must match the code, the generated
references must be what the code renders, and they speak of the product only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from memoryd.config import Settings
from memoryd.schedules.table import DEFAULT_SCHEDULE
from tests.support.docs import DOCS, RENDERERS

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()
CONFIGURATION = (DOCS / "configuration.md").read_text()
OPERATIONS = (DOCS / "operations.md").read_text()
# What the product's documents must not hold: the story of their writing.
WORK_HISTORY = re.compile(
    r"session'?s (VM|machine|code|run)|\b(fifth|sixth|seventh|eighth|ninth|tenth|eleventh|"
    r"twelfth|[0-9]+th) session\b|\bthis session\b|\bissue #?[0-9]+\b|tonight|sitting", re.I)


def _product_documents() -> list[Path]:
    return [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted(DOCS.glob("*.md"))]


def test_every_setting_is_documented() -> None:
    documented = set(re.findall(r"`(MEMORYD_[A-Z0-9_]+)`", CONFIGURATION))
    missing = [
        f"MEMORYD_{field.upper()}" for field in Settings.model_fields
        if f"MEMORYD_{field.upper()}" not in documented and field != "schedule"
    ]
    assert not missing, f"docs/configuration.md lacks {missing}"
    assert "MEMORYD_SCHEDULE_<JOB>" in CONFIGURATION


def test_schedule_table_matches_code() -> None:
    for entry in DEFAULT_SCHEDULE:
        row = rf"\| `{entry.job}` \| `{re.escape(entry.cron)}` \|"
        assert re.search(row, OPERATIONS), entry.job


def test_readme_states_the_two_commands() -> None:
    assert "./dev up" in README and "./dev test" in README
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./dev test" in ci


@pytest.mark.parametrize("name", sorted(RENDERERS))
def test_a_generated_reference_is_what_the_code_renders(name: str) -> None:
    rendered = RENDERERS[name]()
    assert (DOCS / name).read_text() == rendered, (
        f"docs/{name} differs from the code: run `.venv/bin/python -m tests.support.docs`")


def test_the_configuration_reference_describes_every_setting() -> None:
    undescribed = [name for name, field in Settings.model_fields.items() if not field.description]
    assert not undescribed, f"Settings fields without a description: {undescribed}"


def test_the_readme_is_read_in_the_first_hour() -> None:
    assert len(README.splitlines()) < 250


def test_every_document_link_leads_to_a_file() -> None:
    for document in _product_documents():
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", document.read_text()):
            if not target.startswith(("http://", "https://")):
                assert (document.parent / target).exists(), f"{document.name}: {target}"


def test_the_documents_speak_of_the_product_not_of_their_writing() -> None:
    for document in [*_product_documents(), ROOT / "bench" / "HISTORY.md"]:
        for number, line in enumerate(document.read_text().splitlines(), 1):
            found = WORK_HISTORY.search(line)
            assert found is None, f"{document.relative_to(ROOT)}:{number}: {found.group(0)!r}"
