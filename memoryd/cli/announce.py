"""What ``memoryd up`` tells once the stack runs: runtime.json for the other commands,
and the banner for the person who started it.

Both say where the services answer; they differ in who reads them. runtime.json is
private (0600) and keeps the services' URLs with their passwords, so that the commands
run on the same data directory find the broker; the banner shows them scrubbed, and a
secret created at this start (the admin key, Flower's login) only on a terminal.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass

from memoryd.cli import flower_login, stack_dir
from memoryd.config import get_settings
from memoryd.private_files import write_private
from memoryd.redaction import scrub


@dataclass(frozen=True)
class Endpoints:
    """Where the stack's services answer (a port of None: that child is not run)."""

    database_url: str
    broker_url: str
    gateway_port: int | None
    flower_port: int | None

    def gateway_url(self) -> str | None:
        host = get_settings().gateway_host
        return f"http://{host}:{self.gateway_port}" if self.gateway_port else None

    def flower_url(self) -> str | None:
        return f"http://127.0.0.1:{self.flower_port}" if self.flower_port else None


def write_runtime(at: Endpoints, children: dict[str, subprocess.Popen[bytes]],
                  servers: dict[str, int | None]) -> None:
    """runtime.json, rewritten whenever a child starts again (its pid changes; its
    URLs do not). Private: the URLs carry the services' passwords."""
    write_private(get_settings().runtime_file(), json.dumps({
        "pid": os.getpid(), "database_url": at.database_url, "broker_url": at.broker_url,
        "flower_url": at.flower_url(),
        "gateway_url": at.gateway_url(),
        "children": {name: proc.pid for name, proc in children.items()},
        "servers": servers,
    }, indent=2))


def announce(at: Endpoints, children: dict[str, subprocess.Popen[bytes]],
             admin_key: tuple[str, bool] | None, login: tuple[str, bool] | None) -> None:
    """Print that memoryd is up, where, and how to try it."""
    # Shown without their passwords (runtime.json, 0600, keeps them).
    lines = ["", "memoryd is up:", f"  {'database':<18} {scrub(at.database_url)}",
             f"  {'broker':<18} {scrub(at.broker_url)}"]
    if at.gateway_port:
        url = at.gateway_url()
        lines.append(f"  {'gateway':<18} {url}  (API docs {url}/docs, MCP {url}/mcp)")
    if login is not None:
        lines.append(f"  {'flower':<18} http://127.0.0.1:{at.flower_port}  "
                     f"({_login_words(*login)})")
    lines += [f"  {name:<18} pid {proc.pid}" for name, proc in children.items()]
    memoryd = stack_dir.command_hint()
    lines += ["", f"Try:  {memoryd} store agent-1 'User prefers dark mode'",
              f"      {memoryd} recall agent-1 'what theme does the user like?'",
              "Press Ctrl-C to stop.", ""]
    if admin_key is not None:
        lines[-2:-2] = _admin_lines(at, *admin_key)
    print("\n".join(lines), flush=True)


def _admin_lines(at: Endpoints, key: str, created: bool) -> list[str]:
    from memoryd.auth.admin_key import key_file

    where = key_file(get_settings().data_dir)
    told = ([f"Admin key (all agents; shown this once, kept in {where}):", f"  {key}"]
            if created and _on_terminal() else [f"Admin key: in {where}"])
    return [*told, f"      curl -H \"Authorization: Bearer $(cat {shlex.quote(str(where))})\" "
                   f"{at.gateway_url()}/v1/agents/agent-1/memories"]


def _login_words(login: str, created: bool) -> str:
    where = flower_login.login_file(get_settings().data_dir)
    if created and _on_terminal():
        return f"login {login}, shown this once, kept in {where}"
    return f"login in {where}"


def _on_terminal() -> bool:
    """Secrets are shown on a terminal only: a redirected banner (``memoryd up > up.log``)
    says where they are kept instead of writing them into the file."""
    return sys.stdout.isatty()
