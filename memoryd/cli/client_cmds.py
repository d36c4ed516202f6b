"""Client commands: store, recall, forget, list, context, through the workers."""

from __future__ import annotations

import argparse
from typing import Any

from memoryd.cli.output import as_json, key_values, table


def register(commands: Any) -> None:
    store = _add(commands, "store", "store a memory", _store)
    store.add_argument("agent_id")
    store.add_argument("content")
    for flag in ("--role", "--session-id", "--key", "--category", "--source"):
        store.add_argument(flag)
    store.add_argument("--importance", type=_number)
    store.add_argument("--tag", action="append", dest="tags", default=[])
    store.add_argument("--metadata", action="append", default=[], metavar="KEY=VALUE",
                       help="metadata KEY is VALUE (JSON, else a string); repeatable")

    recall = _add(commands, "recall", "recall memories relevant to a query", _recall)
    recall.add_argument("agent_id")
    recall.add_argument("query")
    recall.add_argument("--limit", type=_integer, default=10)
    recall.add_argument("--category")
    # (checked by the client: argparse's choices would quote a wrong value back)
    recall.add_argument("--mode", metavar="{fast,deep}", default="fast")
    _add_filters(recall)

    forget = _add(commands, "forget", "delete one memory", _forget)
    forget.add_argument("agent_id")
    forget.add_argument("memory_id")

    listing = _add(commands, "list", "list an agent's memories, newest first", _list)
    listing.add_argument("agent_id")
    listing.add_argument("--category")
    listing.add_argument("--limit", type=_integer, default=50)
    listing.add_argument("--offset", type=_integer, default=0)
    _add_filters(listing)

    context = _add(commands, "context", "print a prompt-ready memory block", _context)
    context.add_argument("agent_id")
    context.add_argument("query")
    context.add_argument("--limit", type=_integer, default=10)


# argparse's own refusal of a value quotes it back ("invalid int value: '...'"); these
# say what is expected instead, as memoryd's other refusals do.
def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be an integer") from None


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a number") from None


def _add_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--since", help="created at or after: ISO-8601 with a timezone, or "
                                        "an age such as 7d or 12h")
    parser.add_argument("--until", help="created before: ISO-8601 or an age")
    parser.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                        help="metadata KEY equals VALUE (JSON, else a string); repeatable")


def _filters(args: argparse.Namespace) -> dict[str, Any]:
    metadata = key_values(args.where, "where")
    return {"since": _when(args.since, "since"), "until": _when(args.until, "until"),
            "metadata": metadata or None}


def _when(value: str | None, field: str) -> str | None:
    """An ISO-8601 time as given, or an age (``7d``) as the time that long ago."""
    from datetime import UTC, datetime

    from memoryd.auth.scope import duration
    from memoryd.errors import ValidationError

    if value is None:
        return None
    try:
        return (datetime.now(UTC) - duration(value, field)).isoformat()
    except ValidationError:
        return value  # the client checks it as a timestamp, naming the field


def _add(commands: Any, name: str, help_text: str, handler: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(name, help=help_text)
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--timeout", type=_number, default=30.0, help="seconds to wait")
    parser.set_defaults(handler=handler)
    return parser


def _client(args: argparse.Namespace) -> Any:
    from memoryd.client import MemoryClient

    return MemoryClient(timeout=args.timeout)


def _store(args: argparse.Namespace) -> int:
    fields = {"role": args.role, "session_id": args.session_id, "key": args.key,
              "category": args.category, "source": args.source, "importance": args.importance,
              "tags": args.tags, "metadata": key_values(args.metadata, "metadata") or None}
    result = _client(args).store(args.agent_id, args.content,
                                 **{k: v for k, v in fields.items() if v not in (None, [])})
    status = "duplicate of" if result.duplicate else "stored"
    print(as_json(result) if args.json else f"{status} {result.id}")
    return 0


def _recall(args: argparse.Namespace) -> int:
    hits = _client(args).recall(args.agent_id, args.query, limit=args.limit,
                                category=args.category, mode=args.mode, **_filters(args))
    if args.json:
        print(as_json(hits))
    else:
        print(table(("score", "category", "id", "content"),
                    [(f"{h.score:.3f}", h.memory.category, h.memory.id, h.memory.content)
                     for h in hits]))
    return 0


def _forget(args: argparse.Namespace) -> int:
    removed = _client(args).forget(args.agent_id, args.memory_id)
    print(as_json({"forgotten": removed}) if args.json
          else ("forgotten" if removed else "no such memory"))
    return 0 if removed else 1


def _list(args: argparse.Namespace) -> int:
    page = _client(args).list(args.agent_id, category=args.category, limit=args.limit,
                              offset=args.offset, **_filters(args))
    if args.json:
        print(as_json(page))
    else:
        print(table(("created", "category", "imp", "id", "content"),
                    [(m.created_at.strftime("%Y-%m-%d %H:%M"), m.category,
                      f"{m.importance:.2f}", m.id, m.content) for m in page.items]))
        print(f"{len(page.items)} of {page.total}")
    return 0


def _context(args: argparse.Namespace) -> int:
    block = _client(args).context(args.agent_id, args.query, limit=args.limit)
    print(as_json({"context": block}) if args.json else block)
    return 0
