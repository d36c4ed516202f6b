"""Every test runs in a process of its own making: no ``MEMORYD_*`` variable from the
developer's shell, and a throw-away data directory instead of ~/.local/share/memoryd.
The real services the integration tests use are in ``tests/integration/conftest.py``."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support.service_user import opened_for_service_user

# Run as root, the servers run as the service user, which must get through this directory
# (memoryd never opens one above the directory it is given): enter, not list.
TEST_HOME = opened_for_service_user(Path(tempfile.mkdtemp(prefix="memoryd-tests-")))
# Removed when the test process exits (after the servers were stopped by the fixtures).
atexit.register(shutil.rmtree, TEST_HOME, ignore_errors=True)
os.environ["MEMORYD_DATA_DIR"] = str(TEST_HOME / "data")
for _name in list(os.environ):
    if _name.startswith("MEMORYD_") and _name != "MEMORYD_DATA_DIR":
        del os.environ[_name]


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Run as root, ``tmp_path`` lives in ``TEST_HOME``: a test opens its own temporary
    directories for the service user (``opened_for_service_user``), and every pytest
    session that starts on the machine makes pytest's usual root under /tmp private
    again, which would cut a running server off from its files."""
    if os.geteuid() == 0 and config.option.basetemp is None:
        config.option.basetemp = str(TEST_HOME / "pytest")
