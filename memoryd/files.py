"""Files memoryd keeps secrets in (the admin key, the Flower login, ``runtime.json`` with
the services' URLs): readable by their owner alone, from the first byte on."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in a file of mode 0600, atomically: a reader sees the
    old content or the new, never a partial file, and nobody else can read it even for a
    moment (the temporary file is created 0600 beside it, then renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
