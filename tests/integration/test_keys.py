"""API keys in PostgreSQL and through ``memoryd keys``: created once, listed without their
secret, revoked and expired keys refused, and the verifier's cache bounded in time."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy import text

from memoryd import clock
from memoryd.auth import keys, scope
from memoryd.auth.keys import KeyVerifier
from memoryd.memory.store import MemoryStore


def _create(store: MemoryStore, **changes: object) -> keys.NewKey:
    fields: dict[str, object] = {"name": "test", "agents": ["agent-a"], "prefixes": [],
                                 "permissions": ["read", "write"]}
    fields.update(changes)
    with store.session() as session:
        return keys.create(session, **fields)  # type: ignore[arg-type]


def test_only_the_hash_of_a_key_is_stored(store: MemoryStore) -> None:
    new = _create(store)
    with store.session() as session:
        row = session.execute(text("SELECT * FROM api_keys")).mappings().one()
    assert new.key not in json.dumps({k: str(v) for k, v in row.items()})
    assert row["secret_hash"] == scope.secret_hash(new.key)


def test_a_key_verifies_to_its_scope_and_a_wrong_one_to_nothing(store: MemoryStore) -> None:
    new = _create(store, prefixes=["team-a/"])
    verifier = KeyVerifier(store.engine)
    found = verifier.verify(new.key)
    assert found is not None and found.id == new.scope.id
    assert found.covers("agent-a") and found.covers("team-a/x") and not found.covers("agent-b")
    assert verifier.verify(new.key[:-1] + ("A" if new.key[-1] != "A" else "B")) is None
    assert verifier.verify("not a key") is None
    with store.session() as session:
        used = session.execute(text("SELECT last_used_at FROM api_keys")).scalar_one()
    assert used is not None


def test_a_revoked_key_stops_working_within_the_cache_time(store: MemoryStore) -> None:
    new = _create(store)
    verifier = KeyVerifier(store.engine, ttl=0.5)
    assert verifier.verify(new.key) is not None
    with store.session() as session:
        assert keys.revoke(session, new.scope.id)
        assert keys.revoke(session, new.scope.id)  # idempotent
    deadline = time.monotonic() + 5
    while verifier.verify(new.key) is not None:
        assert time.monotonic() < deadline, "revocation not seen within 5 s"
        time.sleep(0.1)


def test_an_expired_key_is_refused_even_from_the_cache(store: MemoryStore) -> None:
    now = clock.now()
    new = _create(store, expires_at=now + timedelta(hours=1))
    verifier = KeyVerifier(store.engine, ttl=3600)
    assert verifier.verify(new.key) is not None
    clock.set_clock(lambda: now + timedelta(hours=1, seconds=1))
    try:
        assert verifier.verify(new.key) is None
    finally:
        clock.set_clock(None)


def _memoryd(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memoryd", *args], env=env, text=True,
                          capture_output=True, timeout=120, check=False)


def test_the_cli_prints_a_key_once_and_never_lists_its_secret(
        store: MemoryStore, service_env: dict[str, str]) -> None:
    made = _memoryd(service_env, "keys", "create", "--agent", "agent-a", "--agent-prefix",
                    "team-a/", "--read-only", "--expires", "30d", "--name", "ci", "--json")
    assert made.returncode == 0, made.stderr
    created = json.loads(made.stdout)
    secret = created["key"]
    assert secret.startswith("mdk_") and created["permissions"] == ["read"]
    assert created["agents"] == ["agent-a"] and created["agent_prefixes"] == ["team-a/"]
    listed = _memoryd(service_env, "keys", "list", "--json")
    plain = _memoryd(service_env, "keys", "list")
    assert listed.returncode == 0 and plain.returncode == 0
    for output in (listed.stdout, listed.stderr, plain.stdout, plain.stderr, made.stderr):
        assert secret not in output
    [entry] = json.loads(listed.stdout)
    assert entry["id"] == created["id"] and entry["revoked_at"] is None
    revoked = _memoryd(service_env, "keys", "revoke", created["id"])
    assert revoked.returncode == 0 and "revoked" in revoked.stdout
    assert json.loads(_memoryd(service_env, "keys", "list", "--json").stdout)[0]["revoked_at"]
    assert KeyVerifier(store.engine).verify(secret) is None


def test_the_cli_refuses_a_key_without_agents(service_env: dict[str, str]) -> None:
    done = _memoryd(service_env, "keys", "create", "--json")
    assert done.returncode == 2 and "agent" in done.stderr


def test_the_up_admin_key_is_kept_private_reused_and_replaced_once_revoked(
        store: MemoryStore, tmp_path: Path) -> None:
    from memoryd.auth import admin_key

    key, created = admin_key.ensure(store.engine, tmp_path)
    assert created and key.startswith("mdk_")
    path = admin_key.key_file(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().strip() == key
    found = KeyVerifier(store.engine).verify(key)
    assert found is not None and found.allows("admin") and found.covers("any-agent")

    assert admin_key.ensure(store.engine, tmp_path) == (key, False)
    with store.session() as session:
        assert keys.revoke(session, found.id)
    replaced, created = admin_key.ensure(store.engine, tmp_path)
    assert created and replaced != key
    assert path.read_text().strip() == replaced


def test_the_cli_says_what_a_read_only_admin_key_may_do(
        store: MemoryStore, service_env: dict[str, str]) -> None:
    plain = _memoryd(service_env, "keys", "create", "--all-agents", "--read-only", "--admin")
    assert plain.returncode == 0, plain.stderr
    assert "may dry-run maintenance jobs and read reports, not run a job for real or " \
           "restore" in plain.stdout
    made = _memoryd(service_env, "keys", "create", "--all-agents", "--read-only", "--admin",
                    "--json")
    created = json.loads(made.stdout)
    assert created["permissions"] == ["read", "admin"]
    assert "not run a job for real or restore" in created["may"]
