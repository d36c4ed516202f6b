"""The ``memoryd`` command: start the stack, run workers, talk to memory, operate jobs.

The top layer (``memoryd.layers``): it may import every other; nothing imports it."""

from __future__ import annotations

import argparse
import os
import re
import select
import signal
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from memoryd.errors import MemorydError, NoBrokerConfigured
from memoryd.redaction import describe_error, format_error, scrub

_TYPES = {"int": "an integer", "float": "a number"}
# argparse's refusals that quote what was typed (as Python 3.11 to 3.13 word them), and
# what is said instead: the argument and what it expects.
_QUOTING: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (re.compile(r"(argument [^:]*: )?invalid choice: .*\(choose from (.*)\)", re.S),
     lambda m: f"{m[1] or ''}invalid choice; choose from {m[2]}"),
    (re.compile(r"(argument [^:]*: )?invalid (\S+) value: .*", re.S),
     lambda m: f"{m[1] or ''}must be {_TYPES.get(m[2], 'a valid ' + m[2])}"),
    (re.compile(r"(argument [^:]*: )?ignored explicit argument .*", re.S),
     lambda m: f"{m[1] or ''}takes no value"),
    (re.compile(r"ambiguous option: .* could match (.*)", re.S),
     lambda m: f"ambiguous option: could be {m[1]}"),
    (re.compile(r"unrecognized arguments: .*", re.S),
     lambda m: "unrecognized arguments (not shown): see --help"),
)


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose refusals name the argument and what it expects but never
    what was typed: a secret or a memory typed in the wrong place would otherwise be
    echoed to the terminal and to whatever keeps stderr. Subcommands get this class too
    (argparse makes them of their parent's); the exit status (2) and usage line stay."""

    def error(self, message: str) -> NoReturn:
        super().error(without_values(message))


def without_values(message: str) -> str:
    """``message``, one of argparse's, with whatever was typed left out."""
    for pattern, reword in _QUOTING:
        found = pattern.fullmatch(message)
        if found:
            return reword(found)
    return message


def build_parser() -> argparse.ArgumentParser:
    from memoryd.cli import (
        client_cmds,
        dlq,
        evicted,
        front,
        keys,
        ops,
        portable,
        rename,
        reviews,
        services,
        threads,
    )

    parser = Parser(prog="memoryd", description="Long-term memory for fleets of LLM agents.")
    parser.add_argument("--log-level", default=None,
                        help="DEBUG, INFO, WARNING (default INFO for the services: up, worker, "
                             "beat, run, gateway, mcp; WARNING for one-off commands)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    services.register(commands)
    client_cmds.register(commands)
    ops.register(commands)
    evicted.register(commands)
    reviews.register(commands)
    threads.register(commands)
    keys.register(commands)
    dlq.register(commands)
    portable.register(commands)
    rename.register(commands)
    front.register(commands)
    return parser


# Commands that keep running and report as they go; the others print their result and,
# unless something is wrong, nothing else.
SERVICES = frozenset({"up", "worker", "beat", "run", "gateway", "mcp"})
# The exit status of a command whose reader went away (``memoryd jobs list | head -2``):
# the shell's for a process ended by SIGPIPE, as ``yes | head`` gives.
CLOSED_PIPE = 128 + signal.SIGPIPE


def _unreachable() -> tuple[type[BaseException], ...]:
    """The errors of a database or broker that cannot be reached right now (SQLAlchemy's
    only where it is installed: the thin client does without)."""
    from memoryd.client import CONNECTION_ERRORS

    try:
        from sqlalchemy.exc import InterfaceError, OperationalError
    except ImportError:
        return CONNECTION_ERRORS
    return (*CONNECTION_ERRORS, OperationalError, InterfaceError)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. A reader that stops reading early ends it quietly, as SIGPIPE
    ends a Unix tool (Python's recipe: SIGPIPE itself stays ignored, or a closed socket
    would kill the process)."""
    try:
        code = _run(argv)
        sys.stdout.flush()  # a pipe closed early shows here, and not at exit
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        # Nothing more reaches the reader: the interpreter's flush at exit must not try.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return CLOSED_PIPE
    return code


def _stdout_closed() -> bool:
    """Whether standard output is a pipe nobody reads any more (Linux reports POLLERR
    on its writing end)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):  # no file descriptor: not a pipe of ours
        return False


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.log_level is None:
        args.log_level = "INFO" if args.command in SERVICES else "WARNING"
    from memoryd import logging as mlog
    from memoryd.config import get_settings
    from memoryd.private_files import UMASK

    # What memoryd writes holds secrets or memory contents (keys, logs, the broker's
    # files, exports, backups): private to its user, in every process it starts.
    os.umask(UMASK)
    mlog.configure(level=args.log_level)
    try:
        get_settings()  # fail loudly on a bad configuration, before anything starts
        result: int = args.handler(args)
    except BrokenPipeError:
        if _stdout_closed():  # the reader left: not the broker's or database's connection
            raise
        print("memoryd: error: Unavailable: Broken pipe", file=sys.stderr)
        return 3
    except NoBrokerConfigured as exc:  # nothing to reach, like a broker that is down
        print(f"memoryd: error: {describe_error(exc)}", file=sys.stderr)
        return 3
    except MemorydError as exc:
        print(f"memoryd: error: {describe_error(exc)}", file=sys.stderr)
        return 2
    except _unreachable() as exc:
        # The database or broker is down: say so in one line, not with a traceback.
        first = scrub(str(getattr(exc, "orig", None) or exc)).strip().splitlines()[0]
        print(f"memoryd: error: Unavailable: {first}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        # Python would print the traceback with the error's text, which may quote a row.
        print(format_error(exc), file=sys.stderr)
        return 1
    finally:
        _release_embedded()
    return result


def _release_embedded() -> None:
    """Stop using the embedded PostgreSQL, if this command used it: the last user stops
    it, so no command leaves a server behind that nothing uses."""
    postgres = sys.modules.get("memoryd.embedded.postgres")
    if postgres is not None:  # never imported: never used
        postgres.release_used()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

