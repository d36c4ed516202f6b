"""``memoryd threads list AGENT|show AGENT THREAD|end AGENT THREAD``: each thread's
working memory, read in Redis by the thin client as an agent's does, and a thread ended by
hand (a worker promotes its messages into long-term memory)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from memoryd.cli.output import as_json, table


def register(commands: Any) -> None:
    threads = commands.add_parser("threads", help="an agent's working memory, thread by "
                                                  "thread (read in Redis, no worker needed "
                                                  "but to end one)")
    sub = threads.add_subparsers(dest="threads_command", required=True, metavar="ACTION")
    listing = _add(sub, "list", "the agent's live threads, soonest to expire first", _list)
    listing.add_argument("--limit", type=int, default=100, help="at most this many (1-1000)")
    listing.add_argument("--offset", type=int, default=0, help="threads to skip")
    show = _add(sub, "show", "one thread's working memory: its state, then its messages "
                             "(exit 1: it holds none); reading it slides its deadline", _show)
    show.add_argument("thread_id", help=THREAD_HELP)
    end = _add(sub, "end", "end a thread now: its messages become session THREAD_ID in "
                           "long-term memory, then its working memory is deleted (exit 1: "
                           "it holds none)", _end,
               wait="seconds to wait for the worker that promotes the messages (it does "
                    "so after the wait all the same)")
    end.add_argument("thread_id", help=THREAD_HELP)


THREAD_HELP = "the thread's id, as the agent names it"


def _add(sub: Any, name: str, help_text: str, handler: Any,
         wait: str = "seconds to wait") -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_text)
    parser.add_argument("agent_id")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--timeout", type=float, default=30.0, help=wait)
    parser.set_defaults(handler=handler)
    return parser


def _client(args: argparse.Namespace) -> Any:
    from memoryd.client import MemoryClient

    return MemoryClient(timeout=args.timeout)


def _list(args: argparse.Namespace) -> int:
    with _client(args) as client:
        found = client.threads(args.agent_id, limit=args.limit, offset=args.offset)
    print(as_json(found) if args.json else table(
        ("thread", "expires"),
        [(t.thread_id, t.expires_at.strftime("%Y-%m-%d %H:%M:%S")) for t in found]))
    return 0


def _show(args: argparse.Namespace) -> int:
    with _client(args) as client:
        state = client.working(args.agent_id, args.thread_id)
    if args.json or state.version == 0:
        print(as_json(state) if args.json else "no working memory for this thread")
        return 0 if state.version else 1
    print(table(("field", "value"), _fields(state), max_width=100))
    print()
    print(table(("seq", "at", "role", "content"),
                [(m.seq, m.at.strftime("%Y-%m-%d %H:%M:%S"), m.role, m.content)
                 for m in state.messages], max_width=100))
    return 0


def _fields(state: Any) -> list[tuple[str, str]]:
    """The thread's state but its messages, one row each (JSON where it is structured)."""
    def shown(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False) if value else ""

    return [("version", str(state.version)), ("topic", state.topic or ""),
            ("entities", ", ".join(state.entities)), ("flags", ", ".join(state.flags)),
            ("counters", shown(state.counters)), ("variables", shown(state.variables)),
            ("tools", shown(state.tools.model_dump(exclude_defaults=True))),
            ("importance", f"{state.importance:.2f}"),
            ("expires", state.expires_at.strftime("%Y-%m-%d %H:%M:%S")
             if state.expires_at else ""),
            ("accesses", str(state.access_count)), ("promoted", str(state.promoted))]


def _end(args: argparse.Namespace) -> int:
    with _client(args) as client:
        done = client.end_thread(args.agent_id, args.thread_id)
    if args.json:
        print(as_json(done))
    elif done.ended:
        print(f"ended: {done.promoted} messages promoted to session {done.thread_id}"
              + (f" ({done.already} were already there)" if done.already else ""))
    else:
        print("no working memory for this thread")
    return 0 if done.ended else 1
