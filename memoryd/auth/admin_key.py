"""The admin key ``memoryd up`` makes on its first start: for every agent, with the admin
permission, printed once and kept in the data directory (mode 0600) so the operator of
a single node can find it again. A kept key that no longer verifies (revoked, or a new
database) is replaced."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine

from memoryd.auth import keys, scope
from memoryd.auth.keys import KeyVerifier
from memoryd.db.engine import session_scope
from memoryd.private_files import write_private

FILE_NAME = "admin.key"
KEY_NAME = "memoryd up admin"


def key_file(data_dir: Path) -> Path:
    return data_dir / FILE_NAME


def ensure(engine: Engine, data_dir: Path) -> tuple[str, bool]:
    """The admin key, and whether it was just created."""
    path = key_file(data_dir)
    try:
        kept = path.read_text().strip()
    except OSError:
        kept = ""
    if kept and KeyVerifier(engine, ttl=0).verify(kept) is not None:
        return kept, False
    with session_scope(engine) as session:
        made = keys.create(session, name=KEY_NAME, agents=(), prefixes=("",),
                           permissions=scope.permissions(read_only=False, admin=True))
    write_private(path, made.key + "\n")
    return made.key, True
