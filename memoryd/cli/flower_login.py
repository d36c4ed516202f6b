"""The login ``memoryd up`` puts in front of Flower: made on the first start, kept in the
data directory (mode 0600, like the admin key) and handed to Flower through its
environment (``FLOWER_BASIC_AUTH``), never on a command line that ``ps`` shows."""

from __future__ import annotations

import secrets
from pathlib import Path

from memoryd.private_files import write_private

FILE_NAME = "flower.login"
USER = "memoryd"
ENV_NAME = "FLOWER_BASIC_AUTH"


def login_file(data_dir: Path) -> Path:
    return data_dir / FILE_NAME


def ensure(data_dir: Path) -> tuple[str, bool]:
    """The login as ``user:password``, and whether it was just made. A kept one is used
    as it is (an operator may write their own), unless Flower could not read it: it
    takes ``user:password`` and separates several logins with commas."""
    path = login_file(data_dir)
    try:
        kept = path.read_text().strip()
    except OSError:
        kept = ""
    user, _, password = kept.partition(":")
    if user and password and "," not in kept:
        return kept, False
    made = f"{USER}:{secrets.token_urlsafe(24)}"
    write_private(path, made + "\n")
    return made, True
