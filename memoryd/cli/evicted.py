"""``memoryd evicted list``: what maintenance evicted or merged, and how to restore it.

Read from the database, like the other operator commands; contents stay out of the
terminal unless asked for (``--show-content``)."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from memoryd.cli import database
from memoryd.cli.output import as_json, table


def register(commands: Any) -> None:
    evicted = commands.add_parser("evicted", help="memories maintenance evicted or merged")
    sub = evicted.add_subparsers(dest="evicted_command", required=True, metavar="ACTION")
    listing = sub.add_parser("list", help="newest first, with the command that restores each")
    listing.add_argument("--agent", dest="agent_id")
    listing.add_argument("--reason", help="only this reason, as the listing names it "
                                          "(merged, duplicate, age, cap, expired, ...)")
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--show-content", action="store_true",
                         help="add each memory's content (kept out by default)")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=_list)


def _list(args: argparse.Namespace) -> int:
    from memoryd import validation as check
    from memoryd.cli.stack_dir import command_hint
    from memoryd.memory import reports

    if args.agent_id is not None:
        check.agent_id(args.agent_id)
    check.limit(args.limit, "limit")
    with database.store().session() as session:
        rows = reports.evictions(session, agent_id=args.agent_id, reason=args.reason,
                                 limit=args.limit, with_content=args.show_content)
    restore = f"{command_hint()} restore"
    if args.json:
        print(as_json([_fields(row, args.show_content) | {"restore": f"{restore} {row.eviction_id}"}
                       for row in rows]))
        return 0
    headers = ("eviction", "agent", "reason", "evicted", "memory", "survivor")
    print(table(headers + (("content",) if args.show_content else ()),
                [(r.eviction_id, r.agent_id, r.reason, r.evicted_at.strftime("%Y-%m-%d %H:%M"),
                  r.memory_id, r.survivor_id or "")
                 + ((r.content,) if args.show_content else ()) for r in rows]))
    if rows:
        print(f"restore one: {restore} EVICTION (e.g. {restore} {rows[0].eviction_id})")
    return 0


def _fields(row: Any, with_content: bool) -> dict[str, Any]:
    fields = asdict(row)
    if not with_content:
        del fields["content"]
    return fields
