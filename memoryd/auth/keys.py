"""API keys in PostgreSQL (``api_keys``, migration 0009): create, list, revoke, verify.

Only a key's SHA-256 is stored; a key is found by that hash (one index lookup) and the
hashes are compared in constant time. ``KeyVerifier`` caches what it read for at most
``CACHE_SECONDS``, so a revoked key stops working everywhere within that time, while a
busy gateway reads each key from the database once per interval; expiry is checked at
every call against the cached expiry time.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from memoryd import clock
from memoryd.auth import scope
from memoryd.auth.scope import KeyScope
from memoryd.db.engine import session_scope

CACHE_SECONDS = 5.0


@dataclass(frozen=True)
class NewKey:
    """A key just created: the only time its secret exists outside the caller."""

    key: str
    scope: KeyScope
    hint: str
    created_at: datetime


@dataclass(frozen=True)
class KeyListing:
    """A key as ``keys list`` shows it: never the secret."""

    scope: KeyScope
    hint: str
    created_at: datetime
    last_used_at: datetime | None


_COLUMNS = ("id, name, agents, agent_prefixes, permissions, expires_at, revoked_at, hint, "
            "created_at, last_used_at, secret_hash")


def _scope(row: Any) -> KeyScope:
    return KeyScope(id=row.id, name=str(row.name), agents=tuple(row.agents),
                    agent_prefixes=tuple(row.agent_prefixes),
                    permissions=tuple(row.permissions), expires_at=row.expires_at,
                    revoked_at=row.revoked_at)


def create(session: Session, *, name: str, agents: Sequence[str], prefixes: Sequence[str],
           permissions: Sequence[str], expires_at: datetime | None = None) -> NewKey:
    """Store a new key (validated scope expected) and return it with its secret."""
    secret = scope.new_secret()
    row = session.execute(text(f"""
        INSERT INTO api_keys (name, secret_hash, hint, agents, agent_prefixes, permissions,
                              expires_at)
        VALUES (:name, :hash, :hint, :agents, :prefixes, :permissions, :expires_at)
        RETURNING {_COLUMNS}"""), {
        "name": name, "hash": scope.secret_hash(secret), "hint": scope.hint(secret),
        "agents": list(agents), "prefixes": list(prefixes), "permissions": list(permissions),
        "expires_at": expires_at}).one()
    return NewKey(key=secret, scope=_scope(row), hint=str(row.hint), created_at=row.created_at)


def listing(session: Session) -> list[KeyListing]:
    rows = session.execute(text(f"SELECT {_COLUMNS} FROM api_keys ORDER BY created_at, id"))
    return [KeyListing(scope=_scope(r), hint=str(r.hint), created_at=r.created_at,
                       last_used_at=r.last_used_at) for r in rows]


def revoke(session: Session, key_id: uuid.UUID) -> bool:
    """Revoke a key (idempotent); False if there is no such key."""
    found = session.execute(text("""
        UPDATE api_keys SET revoked_at = coalesce(revoked_at, :now) WHERE id = :id
        RETURNING id"""), {"id": key_id, "now": clock.now()}).first()
    return found is not None


def lookup(session: Session, key: str) -> KeyScope | None:
    """The scope of ``key`` if it exists (revoked or expired included), and notes its use."""
    if not scope.looks_like_key(key):
        return None
    digest = scope.secret_hash(key)
    row = session.execute(text(f"""
        UPDATE api_keys SET last_used_at = :now WHERE secret_hash = :hash
        RETURNING {_COLUMNS}"""), {"hash": digest, "now": clock.now()}).first()
    if row is None or not scope.same_hash(str(row.secret_hash), digest):
        return None
    return _scope(row)


class KeyVerifier:
    """Verifies keys against the database, remembering each answer for ``ttl`` seconds."""

    def __init__(self, engine: Engine, ttl: float = CACHE_SECONDS) -> None:
        self.engine = engine
        self.ttl = ttl
        self._seen: dict[str, tuple[float, KeyScope | None]] = {}
        self._lock = threading.Lock()

    def verify(self, key: str) -> KeyScope | None:
        """The key's scope if it is known, not revoked and not expired; else None."""
        known, found = self.cached(key)
        if known:
            return found
        with session_scope(self.engine) as session:
            found = lookup(session, key)
        with self._lock:
            if len(self._seen) > 10_000:
                self._seen.clear()
            self._seen[scope.secret_hash(key) if isinstance(key, str) else ""] = (
                time.monotonic(), found)
        return self._usable(found)

    def cached(self, key: str) -> tuple[bool, KeyScope | None]:
        """(True, what ``verify`` would answer) if that answer is cached and fresh;
        (False, None) if answering needs the database."""
        digest = scope.secret_hash(key) if isinstance(key, str) else ""
        with self._lock:
            hit = self._seen.get(digest)
        if hit is None or time.monotonic() - hit[0] >= self.ttl:
            return False, None
        return True, self._usable(hit[1])

    @staticmethod
    def _usable(found: KeyScope | None) -> KeyScope | None:
        return found if found is not None and found.usable(clock.now()) else None

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()
