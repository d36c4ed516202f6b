"""What ``pip install memoryd`` pulls in: the thin client only. The server and each
framework adapter come with their own extra, which the dev extra gathers for the tests."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ADAPTER_EXTRAS = ("openai-agents", "adk", "autogen", "agent-framework", "llamaindex")
PYPROJECT = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_base_install_depends_on_no_server_package_and_no_framework() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    base = _names(PYPROJECT["project"]["dependencies"])
    heavier = _names(extras["server"])
    for extra in ADAPTER_EXTRAS:
        heavier |= _names(extras[extra])
    assert "sqlalchemy" in heavier and "google-adk" in heavier
    assert base and base.isdisjoint(heavier)
    # ./dev test installs the dev extra: the adapters' tests need their frameworks.
    in_dev = {name for r in extras["dev"] if r.startswith("memoryd[")
              for name in r[len("memoryd["):-1].split(",")}
    assert {"server", *ADAPTER_EXTRAS} <= in_dev
