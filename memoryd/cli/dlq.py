"""``memoryd dlq list|retry ID|drop ID``: the dead letters, poison messages the workers
set aside (``memoryd.worker.poison``). Listings never show a letter's arguments: they
hold memory content and queries."""

from __future__ import annotations

import argparse
from typing import Any

from memoryd.cli import database
from memoryd.cli.output import as_json, table


def register(commands: Any) -> None:
    dlq = commands.add_parser("dlq", help="dead letters: messages that never finished")
    sub = dlq.add_subparsers(dest="dlq_command", required=True, metavar="ACTION")
    listing = sub.add_parser("list", help="the dead letters, newest first")
    listing.add_argument("--limit", type=int, default=100)
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=_list)
    retry = sub.add_parser("retry", help="send a dead letter's task again (a new task id)")
    retry.add_argument("id", type=int)
    retry.set_defaults(handler=_retry)
    drop = sub.add_parser("drop", help="delete a dead letter for good")
    drop.add_argument("id", type=int)
    drop.set_defaults(handler=_drop)




def _list(args: argparse.Namespace) -> int:
    from memoryd.memory import dead_letters

    with database.session() as session:
        letters = [letter.summary() for letter in dead_letters.listing(session, args.limit)]
    if args.json:
        print(as_json(letters))
    else:
        print(table(("id", "task", "agent", "deliveries", "set aside", "task id"),
                    [(d["id"], d["task"], d["agent_id"] or "", d["deliveries"],
                      d["created_at"][:19], d["task_id"]) for d in letters]))
    return 0


def _retry(args: argparse.Namespace) -> int:
    """Taken out of the table and sent in one transaction: if sending fails, the letter
    stays; if the commit fails after sending, a second retry sends it again, which the
    tasks' idempotence makes harmless."""
    from memoryd.memory import dead_letters
    from memoryd.redaction import summarize
    from memoryd.worker import app

    with database.session() as session:
        letter = dead_letters.take(session, args.id)
        sent = app.send_task(letter.task_name, args=letter.args, kwargs=letter.kwargs,
                             queue=letter.queue or None, argsrepr="()",
                             kwargsrepr=summarize(letter.kwargs))
    print(f"sent {letter.task_name} again as task {sent.id}")
    return 0


def _drop(args: argparse.Namespace) -> int:
    from memoryd.memory import dead_letters

    with database.session() as session:
        dead_letters.drop(session, args.id)
    print(f"dropped dead letter {args.id}")
    return 0
