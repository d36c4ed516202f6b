"""Client commands: store, recall, forget, list, context, and a memory's history,
supersession and its undo, through the workers."""

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
    store.add_argument("--supersedes", action="append", default=[], metavar="MEMORY_ID",
                       help="a memory of the agent this one replaces (kept as history, no "
                            "longer recalled)")
    store.add_argument("--valid-from", help="when it became true: ISO-8601 with a timezone, "
                                            "or an age such as 3d (default: now)")

    recall = _add(commands, "recall", "recall memories relevant to a query", _recall)
    recall.add_argument("agent_id")
    recall.add_argument("query")
    recall.add_argument("--limit", type=_integer, default=10)
    recall.add_argument("--category")
    # (checked by the client: argparse's choices would quote a wrong value back)
    recall.add_argument("--mode", metavar="{fast,deep}", default="fast")
    _add_filters(recall)
    _add_validity(recall)

    forget = _add(commands, "forget", "delete one memory", _forget)
    forget.add_argument("agent_id")
    forget.add_argument("memory_id")

    listing = _add(commands, "list", "list an agent's memories, newest first", _list)
    listing.add_argument("agent_id")
    listing.add_argument("--category")
    listing.add_argument("--limit", type=_integer, default=50)
    listing.add_argument("--offset", type=_integer, default=0)
    _add_filters(listing)
    _add_validity(listing)

    context = _add(commands, "context", "print a prompt-ready memory block", _context)
    context.add_argument("agent_id")
    context.add_argument("query")
    context.add_argument("--limit", type=_integer, default=10)
    context.add_argument("--as-of", help=AS_OF_HELP)

    history = _add(commands, "history", "a memory's earlier versions and what it replaced "
                                        "or was replaced by", _history)
    history.add_argument("agent_id")
    history.add_argument("memory_id")

    supersede = _add(commands, "supersede", "mark memories as replaced by MEMORY_ID (kept "
                                            "as history, no longer recalled)", _supersede)
    supersede.add_argument("agent_id")
    supersede.add_argument("memory_id")
    supersede.add_argument("old_ids", nargs="+", metavar="OLD_ID",
                           help="a memory of the agent that MEMORY_ID replaces")

    unsupersede = _add(commands, "unsupersede", "undo a supersession: the memory is current "
                                                "again", _unsupersede)
    unsupersede.add_argument("agent_id")
    unsupersede.add_argument("memory_id")


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


AS_OF_HELP = ("what was true then: ISO-8601 with a timezone, or an age such as 30d "
              "(replaced memories that held then included)")


def _add_validity(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--include-superseded", action="store_true",
                        help="replaced memories too, marked with what replaced them")
    parser.add_argument("--as-of", help=AS_OF_HELP)


def _validity(args: argparse.Namespace) -> dict[str, Any]:
    return {"include_superseded": args.include_superseded,
            "as_of": _when(args.as_of, "as_of")}


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
              "tags": args.tags, "metadata": key_values(args.metadata, "metadata") or None,
              "supersedes": args.supersedes,
              "valid_from": _when(args.valid_from, "valid_from")}
    result = _client(args).store(args.agent_id, args.content,
                                 **{k: v for k, v in fields.items() if v not in (None, [])})
    status = "duplicate of" if result.duplicate else "stored"
    replaced = "".join(f"\nsuperseded {old}" for old in result.superseded)
    print(as_json(result) if args.json else f"{status} {result.id}{replaced}")
    return 0


def _recall(args: argparse.Namespace) -> int:
    hits = _client(args).recall(args.agent_id, args.query, limit=args.limit,
                                category=args.category, mode=args.mode, **_filters(args),
                                **_validity(args))
    if args.json:
        print(as_json(hits))
    else:
        print(table(("score", "category", "id", "content", *_replaced_header(args)),
                    [(f"{h.score:.3f}", h.memory.category, h.memory.id, h.memory.content,
                      *_replaced(h.memory, args)) for h in hits]))
    return 0


def _replaced_header(args: argparse.Namespace) -> tuple[str, ...]:
    """A last column, "replaced by", where replaced memories may be listed (asked for
    with --include-superseded or --as-of); otherwise every memory is current."""
    return ("replaced by",) if args.include_superseded or args.as_of else ()


def _replaced(memory: Any, args: argparse.Namespace) -> tuple[str, ...]:
    if not _replaced_header(args):
        return ()
    return ("" if memory.current else str(memory.superseded_by or "(replaced)"),)


def _forget(args: argparse.Namespace) -> int:
    removed = _client(args).forget(args.agent_id, args.memory_id)
    print(as_json({"forgotten": removed}) if args.json
          else ("forgotten" if removed else "no such memory"))
    return 0 if removed else 1


def _list(args: argparse.Namespace) -> int:
    page = _client(args).list(args.agent_id, category=args.category, limit=args.limit,
                              offset=args.offset, **_filters(args), **_validity(args))
    if args.json:
        print(as_json(page))
    else:
        print(table(("created", "category", "imp", "id", "content", *_replaced_header(args)),
                    [(m.created_at.strftime("%Y-%m-%d %H:%M"), m.category,
                      f"{m.importance:.2f}", m.id, m.content, *_replaced(m, args))
                     for m in page.items]))
        print(f"{len(page.items)} of {page.total}")
    return 0


def _context(args: argparse.Namespace) -> int:
    block = _client(args).context(args.agent_id, args.query, limit=args.limit,
                                  as_of=_when(args.as_of, "as_of"))
    print(as_json({"context": block}) if args.json else block)
    return 0


def _history(args: argparse.Namespace) -> int:
    found = _client(args).history(args.agent_id, args.memory_id)
    if args.json:
        print(as_json(found))
        return 0
    memory = found.memory
    state = "current" if memory.current else f"replaced by {memory.superseded_by}"
    print(f"{memory.id} ({state}, valid from {_stamp(memory.valid_from)}"
          + (f" to {_stamp(memory.valid_to)}" if memory.valid_to else "") + ")")
    print(table(("changed", "cause", "by", "content then"),
                [(_stamp(v.changed_at), v.cause, v.actor or "", v.data.get("content", ""))
                 for v in found.versions]))
    print(table(("decided", "replaced", "by", "cause", "confidence", "status"),
                [(_stamp(s.decided_at), s.old_id, s.new_id, s.cause, f"{s.confidence:.2f}",
                  s.status) for s in found.supersessions]))
    return 0


def _stamp(moment: Any) -> str:
    return "" if moment is None else str(moment.strftime("%Y-%m-%d %H:%M:%S"))


def _supersede(args: argparse.Namespace) -> int:
    done = _client(args).supersede(args.agent_id, args.memory_id, args.old_ids)
    print(as_json({"id": args.memory_id, "superseded": done}) if args.json
          else "\n".join(f"superseded {old}" for old in done))
    return 0


def _unsupersede(args: argparse.Namespace) -> int:
    restored = _client(args).unsupersede(args.agent_id, args.memory_id)
    print(as_json({"id": args.memory_id, "restored": restored}) if args.json
          else ("current again" if restored else "already current"))
    return 0 if restored else 1
