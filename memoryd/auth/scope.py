"""A key's secret and scope, without the database: how secrets look and are hashed,
and which agents and operations a key covers. Shared by the CLI, the gateway and MCP."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal
from uuid import UUID

from memoryd import validation as check
from memoryd.errors import Forbidden, ValidationError

KEY_PREFIX = "mdk_"
SECRET_BYTES = 32  # random bytes behind each key
HINT_CHARS = 8  # of the key, kept to tell keys apart in listings (not enough to guess)
Permission = Literal["read", "write", "admin"]
PERMISSIONS: tuple[Permission, ...] = ("read", "write", "admin")
_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def new_secret() -> str:
    """A fresh key: ``mdk_`` and 32 random bytes, URL-safe."""
    return KEY_PREFIX + secrets.token_urlsafe(SECRET_BYTES)


def secret_hash(key: str) -> str:
    """The SHA-256 of a key (hex): all that is ever stored of it."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def same_hash(a: str, b: str) -> bool:
    """Constant-time comparison of two hashes."""
    return hmac.compare_digest(a.encode("ascii"), b.encode("ascii"))


def hint(key: str) -> str:
    """The first characters of a key, shown by listings so an operator can tell which
    key is which."""
    return key[:HINT_CHARS]


def looks_like_key(value: object) -> bool:
    return isinstance(value, str) and value.startswith(KEY_PREFIX) and len(value) < 512


def duration(value: str, field: str = "expires") -> timedelta:
    """``30d``, ``12h``, ``90m``, ``2w`` or ``45s`` as a positive timedelta."""
    found = _DURATION.match(value)
    if found is None or int(found.group(1)) == 0:
        raise ValidationError(field, f"must be a positive duration such as 30d or 12h, "
                                     f"got {value!r}")
    return timedelta(seconds=int(found.group(1)) * _UNIT_S[found.group(2)])


def permissions(*, read_only: bool, admin: bool) -> tuple[Permission, ...]:
    granted: tuple[Permission, ...] = ("read",) if read_only else ("read", "write")
    return (*granted, "admin") if admin else granted


def what_it_may_do(granted: tuple[str, ...]) -> str:
    """One line telling an operator what a key of these permissions may do."""
    memories = ("reads and writes memories" if "write" in granted
                else "reads memories, never writes")
    if "admin" not in granted:
        return f"this key {memories} of the agents it covers"
    if "write" in granted:
        return f"this key {memories}, runs maintenance jobs and restores evicted memories"
    return (f"this key {memories}; as an operator it may dry-run maintenance jobs and "
            f"read reports, not run a job for real or restore")


@dataclass(frozen=True)
class KeyScope:
    """What a key may do: on which agents (exact ids, id prefixes) and which operations."""

    id: UUID
    name: str
    agents: tuple[str, ...]
    agent_prefixes: tuple[str, ...]
    permissions: tuple[str, ...]
    expires_at: datetime | None = None
    revoked_at: datetime | None = None

    def covers(self, agent_id: str) -> bool:
        return agent_id in self.agents or any(agent_id.startswith(p)
                                              for p in self.agent_prefixes)

    def allows(self, permission: Permission) -> bool:
        return permission in self.permissions

    def usable(self, now: datetime) -> bool:
        """Neither revoked nor expired at ``now``."""
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)

    def require(self, agent_id: str, permission: Permission) -> None:
        """Raise ``Forbidden`` unless this key may do ``permission`` on ``agent_id``."""
        if not self.allows(permission):
            raise Forbidden(f"this key lacks the {permission!r} permission")
        if not self.covers(agent_id):
            raise Forbidden(f"this key does not cover agent {agent_id!r}")

    def require_admin(self, *, changes: bool = False) -> None:
        """Operator endpoints act fleet-wide: they need ``admin`` and every agent; those
        that change memories (a job run for real, a restore) need ``write`` as well, so
        a read-only admin key only dry-runs and reads reports."""
        if not self.allows("admin"):
            raise Forbidden("this key lacks the 'admin' permission")
        if "" not in self.agent_prefixes:
            raise Forbidden("operator endpoints need a key for all agents (--all-agents)")
        if changes and not self.allows("write"):
            raise Forbidden("this key is read-only: it may dry-run jobs and read reports, "
                            "not run a job for real or restore")

    def single_agent(self) -> str | None:
        """The one agent this key is for, if it names exactly one and no prefix."""
        return self.agents[0] if len(self.agents) == 1 and not self.agent_prefixes else None


def check_scope(agents: list[str], prefixes: list[str], *, all_agents: bool) -> tuple[
        tuple[str, ...], tuple[str, ...]]:
    """Validated agents and prefixes; at least one of them (or ``all_agents``)."""
    exact = tuple(dict.fromkeys(check.agent_id(a) for a in agents))
    starts = tuple(dict.fromkeys(check.required_text("agent_prefix", p, check.MAX_AGENT_ID,
                                                     check.MAX_AGENT_ID_BYTES)
                                 for p in prefixes))
    if all_agents:
        starts = ("",)  # every agent id starts with the empty prefix
    if not exact and not starts:
        raise ValidationError("agent", "a key needs at least one --agent or --agent-prefix "
                                       "(or --all-agents)")
    return exact, starts
