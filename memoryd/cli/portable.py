"""Backups of the whole store, one agent's memory in and out, and erasing an agent:
``memoryd backup``, ``memoryd restore-backup``, ``memoryd export``, ``memoryd import``
and ``memoryd forget-agent``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from memoryd.cli import database
from memoryd.cli.output import as_json, table


def register(commands: Any) -> None:
    backup = commands.add_parser("backup", help="a consistent backup of the whole store "
                                                "(pg_dump, custom format)")
    backup.add_argument("path", type=Path)
    backup.set_defaults(handler=_backup)
    restore = commands.add_parser("restore-backup",
                                  help="replace the store's data with a backup (stop "
                                       "workers first)")
    restore.add_argument("path", type=Path)
    restore.add_argument("--yes", action="store_true",
                         help="confirm: what the backup holds replaces what is there")
    restore.set_defaults(handler=_restore)
    export = commands.add_parser("export", help="one agent's memory as JSON Lines")
    export.add_argument("agent")
    export.add_argument("--output", "-o", type=Path, default=None, help="default: stdout")
    export.set_defaults(handler=_export)
    load = commands.add_parser("import", help="read an export into an agent (idempotent)")
    load.add_argument("agent")
    load.add_argument("file", type=Path)
    load.add_argument("--json", action="store_true")
    load.set_defaults(handler=_import)
    erase = commands.add_parser("forget-agent",
                                help="erase everything of one agent (memories, sessions, "
                                     "graph, evicted copies, dead letters, its keys); "
                                     "without --yes, only shows what would go")
    erase.add_argument("agent")
    erase.add_argument("--yes", action="store_true", help="confirm: erase it for good")
    erase.add_argument("--json", action="store_true")
    erase.set_defaults(handler=_forget_agent)




def _backup(args: argparse.Namespace) -> int:
    from memoryd.db import backup

    backup.backup(database.url(), args.path)
    print(f"backed up to {args.path} ({args.path.stat().st_size:,} bytes)")
    return 0


def _restore(args: argparse.Namespace) -> int:
    from memoryd.db import backup
    from memoryd.errors import ValidationError

    if not args.yes:
        raise ValidationError("yes", "restoring replaces the store's data with the backup's: "
                                     "add --yes to confirm")
    backup.restore(database.url(), args.path)
    print(f"restored {args.path}; run `memoryd migrate` if the backup is older than this "
          "memoryd")
    return 0




def _export(args: argparse.Namespace) -> int:
    from memoryd.memory.portability import export_agent

    lines = export_agent(database.store(), args.agent)
    if args.output is None:
        for line in lines:
            sys.stdout.write(line + "\n")
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with args.output.open("w", encoding="utf-8") as out:
        count = sum(out.write(line + "\n") > 0 for line in lines) - 1
    print(f"exported {count} records of {args.agent} to {args.output}", file=sys.stderr)
    return 0


def _import(args: argparse.Namespace) -> int:
    from memoryd.errors import ValidationError
    from memoryd.memory.portability import import_agent

    if not args.file.is_file():
        raise ValidationError("file", f"no file at {args.file}")
    with args.file.open(encoding="utf-8") as lines:
        result = import_agent(database.store(), args.agent, lines)
    print(as_json(result.as_dict()) if args.json else
          f"imported into {args.agent}: {result.memories} memories "
          f"({result.memories_present} already there), {result.sessions} sessions, "
          f"{result.entities} entities, {result.relations} relations, {result.links} links"
          + (" (re-embedded: another model)" if result.reembedded else ""))
    return 0


def _forget_agent(args: argparse.Namespace) -> int:
    """Without ``--yes``, the counts an erasure would remove now, and a refusal."""
    from memoryd.errors import ValidationError
    from memoryd.memory import erasure

    store = database.store()
    found = (erasure.forget_agent(store, args.agent) if args.yes
             else erasure.preview(store, args.agent))
    if args.json:
        print(as_json(found))
    else:
        would = "" if args.yes else "would be "
        rows = [(name, n, f"{would}deleted") for name, n in found.deleted.items()]
        rows += [(name, n, f"{would}kept, the agent taken out")
                 for name, n in found.scrubbed.items()]
        rows.append(("its own HNSW index", int(found.index_dropped), f"{would}dropped"))
        print(table(("table", "rows", ""), rows))
    if not args.yes:
        raise ValidationError("yes", "the erasure deletes the rows above for good: add "
                                     "--yes to confirm")
    print(f"erased (audit: maintenance_runs run {found.run_id})", file=sys.stderr)
    if found.complete:
        print(_erase_broker_copies(args.agent), file=sys.stderr)
    return 0


def _erase_broker_copies(agent: str) -> str:
    """The erasure queued once more for a worker, which finds the tables empty and then
    deletes the agent's stored results and has Redis rewrite its append-only files
    (``memoryd.tasks.admin``): copies this process cannot reach. What became of it."""
    from memoryd.client import MemoryClient, Pending
    from memoryd.errors import MemorydError

    try:
        client = MemoryClient()
        try:
            task = client.forget_agent(agent, wait=False)
        finally:
            client.close()
    except (MemorydError, OSError) as exc:
        return (f"the broker's copies were not reached ({type(exc).__name__}): run "
                "forget-agent again once a worker is up")
    queued = f" (task {task.id})" if isinstance(task, Pending) else ""
    return f"a worker deletes the agent's task results and compacts the broker's files{queued}"
