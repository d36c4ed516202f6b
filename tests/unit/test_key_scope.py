"""API key secrets and scopes, without the database."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from memoryd.auth import scope
from memoryd.auth.scope import KeyScope
from memoryd.errors import Forbidden, ValidationError

NOW = datetime(2026, 11, 23, 12, tzinfo=UTC)


def _key(**changes: object) -> KeyScope:
    fields: dict[str, object] = {"id": uuid.uuid4(), "name": "k", "agents": ("agent-1",),
                                 "agent_prefixes": ("team-a/",), "permissions": ("read",)}
    fields.update(changes)
    return KeyScope(**fields)  # type: ignore[arg-type]


def test_a_new_secret_is_prefixed_long_and_never_repeats() -> None:
    secrets = {scope.new_secret() for _ in range(100)}
    assert len(secrets) == 100
    for secret in secrets:
        assert secret.startswith("mdk_") and len(secret) >= 4 + 43  # 32 bytes, base64


def test_only_a_hash_of_the_secret_is_kept_and_it_compares_in_constant_time() -> None:
    secret = scope.new_secret()
    digest = scope.secret_hash(secret)
    assert len(digest) == 64 and secret not in digest
    assert scope.same_hash(digest, scope.secret_hash(secret))
    assert not scope.same_hash(digest, scope.secret_hash(secret + "x"))
    assert scope.hint(secret) == secret[:8]


def test_a_key_covers_its_agents_and_prefixes_only() -> None:
    key = _key()
    assert key.covers("agent-1") and key.covers("team-a/bot-7")
    assert not key.covers("agent-10") and not key.covers("team-b/bot") and not key.covers("")


def test_permissions_are_read_write_and_admin_apart() -> None:
    assert scope.permissions(read_only=True, admin=False) == ("read",)
    assert scope.permissions(read_only=False, admin=False) == ("read", "write")
    assert scope.permissions(read_only=False, admin=True) == ("read", "write", "admin")
    key = _key(permissions=("read",))
    assert key.allows("read") and not key.allows("write") and not key.allows("admin")


def test_revoked_and_expired_keys_are_not_usable() -> None:
    assert _key().usable(NOW)
    assert not _key(revoked_at=NOW - timedelta(seconds=1)).usable(NOW)
    assert not _key(expires_at=NOW).usable(NOW)
    assert _key(expires_at=NOW + timedelta(seconds=1)).usable(NOW)


@pytest.mark.parametrize(("text", "seconds"), [("30d", 30 * 86400), ("12h", 43200),
                                               ("90m", 5400), ("2w", 14 * 86400), ("45s", 45)])
def test_durations_read_like_an_operator_writes_them(text: str, seconds: int) -> None:
    assert scope.duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "30", "0d", "-1d", "3y", "d"])
def test_a_bad_duration_names_the_field(text: str) -> None:
    with pytest.raises(ValidationError) as caught:
        scope.duration(text)
    assert caught.value.field == "expires"


def test_a_key_must_name_an_agent_a_prefix_or_all_agents() -> None:
    with pytest.raises(ValidationError) as caught:
        scope.check_scope([], [], all_agents=False)
    assert caught.value.field == "agent"
    assert scope.check_scope(["a", "a"], ["p/"], all_agents=False) == (("a",), ("p/",))
    assert scope.check_scope([], [], all_agents=True) == ((), ("",))
    with pytest.raises(ValidationError):
        scope.check_scope(["bad\x00id"], [], all_agents=False)


def test_a_key_for_exactly_one_agent_names_it() -> None:
    assert _key(agent_prefixes=()).single_agent() == "agent-1"
    assert _key().single_agent() is None


def test_a_read_only_admin_key_may_read_reports_but_not_change_memories() -> None:
    read_only = _key(agents=(), agent_prefixes=("",),
                     permissions=scope.permissions(read_only=True, admin=True))
    read_only.require_admin()
    with pytest.raises(Forbidden, match="read-only"):
        read_only.require_admin(changes=True)
    writer = _key(agents=(), agent_prefixes=("",),
                  permissions=scope.permissions(read_only=False, admin=True))
    writer.require_admin(changes=True)


@pytest.mark.parametrize(("read_only", "admin", "said"), [
    (True, True, "dry-run maintenance jobs and read reports, not run a job for real"),
    (False, True, "runs maintenance jobs and restores"),
    (True, False, "reads memories, never writes"),
    (False, False, "reads and writes memories"),
])
def test_a_key_is_described_by_what_it_may_do(read_only: bool, admin: bool,
                                              said: str) -> None:
    granted = scope.permissions(read_only=read_only, admin=admin)
    assert said in scope.what_it_may_do(granted)


def test_an_agent_prefix_is_limited_like_an_agent_id_in_bytes() -> None:
    with pytest.raises(ValidationError) as caught:
        scope.check_scope([], ["\U0001F600" * 200], all_agents=False)
    assert caught.value.field == "agent_prefix"
