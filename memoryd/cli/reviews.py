"""``memoryd reviews list|accept ID|reject ID``: the review queue, replacements the
judges were unsure of (``memoryd.memory.supersession``). Read from the database, like
the other operator commands; contents stay out of the listing (each row names the two
memories: ``memoryd history`` shows them)."""

from __future__ import annotations

import argparse
import getpass
from typing import Any

from memoryd.cli import database
from memoryd.cli.output import as_json, table

STATUSES = "review (the queue, default), applied, rejected or undone"


def register(commands: Any) -> None:
    reviews = commands.add_parser("reviews", help="the review queue of unsure replacements")
    sub = reviews.add_subparsers(dest="reviews_command", required=True, metavar="ACTION")
    listing = sub.add_parser("list", help="queued replacements, oldest first")
    listing.add_argument("--agent", dest="agent_id")
    listing.add_argument("--status", default="review", help=STATUSES)
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=_list)
    for action, help_text in (("accept", "accept one: the old memory is superseded"),
                              ("reject", "reject one: both memories stay current")):
        decide = sub.add_parser(action, help=help_text)
        decide.add_argument("id", type=int, help="the review's number, from reviews list")
        decide.add_argument("--json", action="store_true")
        decide.set_defaults(handler=_decide, accept=action == "accept")


def _list(args: argparse.Namespace) -> int:
    found = database.store().reviews(args.agent_id, status=args.status, limit=args.limit)
    if args.json:
        print(as_json(found))
        return 0
    print(table(("review", "agent", "old", "new", "judge", "attribute", "confidence",
                 "decided"),
                [(r.id, r.agent_id, r.old_id, r.new_id, r.judge or r.cause, r.attribute or "",
                  f"{r.confidence:.2f}", r.decided_at.strftime("%Y-%m-%d %H:%M"))
                 for r in found]))
    if found and args.status == "review":
        print(f"decide one: memoryd reviews accept|reject REVIEW (e.g. {found[0].id})")
    return 0


def _decide(args: argparse.Namespace) -> int:
    decided = database.store().decide_review(args.id, accept=args.accept, actor=_operator())
    print(as_json(decided) if args.json else
          f"review {decided.id}: {decided.status} ({decided.old_id} "
          + ("superseded by" if args.accept else "stays beside") + f" {decided.new_id})")
    return 0


def _operator() -> str:
    """Who decided, as the supersession records it: the operator's user on this host."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no name for this uid (a bare container)
        return "cli"
