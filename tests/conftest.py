"""Every test runs in a process of its own making: no ``MEMORYD_*`` variable from the
developer's shell, and a throw-away data directory instead of ~/.local/share/memoryd.
The real services the integration tests use are in ``tests/integration/conftest.py``."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

TEST_HOME = Path(tempfile.mkdtemp(prefix="memoryd-tests-"))
# Removed when the test process exits (after the servers were stopped by the fixtures).
atexit.register(shutil.rmtree, TEST_HOME, ignore_errors=True)
os.environ["MEMORYD_DATA_DIR"] = str(TEST_HOME / "data")
for _name in list(os.environ):
    if _name.startswith("MEMORYD_") and _name != "MEMORYD_DATA_DIR":
        del os.environ[_name]
