"""Run as root, memoryd runs its servers as the ``memoryd`` service user and never changes
a directory above the one it is given (``memoryd.embedded._proc.server_dir``): a test that
puts a server under a private temporary directory of its own lets that user through it
itself, as an operator would."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def opened_for_service_user(path: Path) -> Path:
    """``path``, a temporary directory this test process made, with it and every directory
    above it up to the system's temporary directory let through (o+x: enter, not list)
    when run as root. Only the test's own directories: anything else is refused."""
    if os.geteuid() != 0:
        return path
    top = Path(tempfile.gettempdir()).resolve()
    path = path.resolve()
    if not path.is_relative_to(top) or path == top:
        raise ValueError(f"{path} is not a temporary directory below {top}")
    for folder in (path, *path.parents):
        if folder == top:
            break
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            folder.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
    return path
