"""``memoryd keys``: create, list and revoke the front door's API keys."""

from __future__ import annotations

import argparse
from typing import Any

from memoryd.cli import database
from memoryd.cli.output import as_json, table


def register(commands: Any) -> None:
    keys = commands.add_parser("keys", help="create, list and revoke API keys")
    sub = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    create = sub.add_parser("create", help="create a key and print it (shown only once)")
    create.add_argument("--agent", action="append", default=[], dest="agents",
                        help="an agent id the key covers (repeatable)")
    create.add_argument("--agent-prefix", action="append", default=[], dest="prefixes",
                        help="covers every agent id starting with this (repeatable)")
    create.add_argument("--all-agents", action="store_true", help="covers every agent")
    create.add_argument("--read-only", action="store_true", help="read, but never write")
    create.add_argument("--admin", action="store_true", help="also the operator endpoints")
    create.add_argument("--expires", help="lifetime such as 30d, 12h, 2w (default: none)")
    create.add_argument("--name", default="", help="what the key is for")
    create.add_argument("--json", action="store_true")
    create.set_defaults(handler=_create)
    listing = sub.add_parser("list", help="every key (never its secret)")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=_list)
    revoke = sub.add_parser("revoke", help="revoke a key (it stops working within seconds)")
    revoke.add_argument("id")
    revoke.add_argument("--json", action="store_true")
    revoke.set_defaults(handler=_revoke)




def _create(args: argparse.Namespace) -> int:
    from memoryd import clock
    from memoryd import validation as check
    from memoryd.auth import keys, scope

    agents, prefixes = scope.check_scope(args.agents, args.prefixes, all_agents=args.all_agents)
    name = check.short_text("name", args.name or None, 255) or ""
    expires_at = clock.now() + scope.duration(args.expires) if args.expires else None
    with database.session() as session:
        new = keys.create(session, name=name, agents=agents, prefixes=prefixes,
                          permissions=scope.permissions(read_only=args.read_only,
                                                        admin=args.admin),
                          expires_at=expires_at)
    may = scope.what_it_may_do(new.scope.permissions)
    if args.json:
        print(as_json({"id": str(new.scope.id), "key": new.key, **_public(new.scope),
                       "created_at": new.created_at.isoformat(), "may": may}))
    else:
        print(f"key {new.scope.id} created; it is shown this once:\n{new.key}\n{may}")
    return 0


def _public(key: Any) -> dict[str, Any]:
    return {"name": key.name, "agents": list(key.agents),
            "agent_prefixes": list(key.agent_prefixes), "permissions": list(key.permissions),
            "expires_at": key.expires_at.isoformat() if key.expires_at else None,
            "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None}


def _list(args: argparse.Namespace) -> int:
    from memoryd.auth import keys

    with database.session() as session:
        found = keys.listing(session)
    if args.json:
        print(as_json([{"id": str(k.scope.id), "hint": k.hint, **_public(k.scope),
                        "created_at": k.created_at.isoformat(),
                        "last_used_at": k.last_used_at.isoformat() if k.last_used_at else None}
                       for k in found]))
        return 0
    print(table(("id", "name", "key", "agents", "permissions", "expires", "state"), [
        (k.scope.id, k.scope.name, f"{k.hint}…",
         ", ".join([*k.scope.agents, *(f"{p}*" for p in k.scope.agent_prefixes)]),
         ",".join(k.scope.permissions),
         k.scope.expires_at.strftime("%Y-%m-%d %H:%M") if k.scope.expires_at else "never",
         "revoked" if k.scope.revoked_at else "active") for k in found]))
    return 0


def _revoke(args: argparse.Namespace) -> int:
    from memoryd import validation as check
    from memoryd.auth import keys

    key_id = check.uuid_of("id", args.id)
    with database.session() as session:
        done = keys.revoke(session, key_id)
    print(as_json({"revoked": done}) if args.json else
          ("revoked" if done else "no such key"))
    return 0 if done else 1
