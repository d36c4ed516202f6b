"""Long-running commands: up (the whole stack), worker, beat, run (APScheduler), migrate."""

from __future__ import annotations

import argparse
import functools
import signal
import threading
from typing import Any

import structlog

from memoryd.broker import QUEUES
from memoryd.process import STOP_SIGNALS

log = structlog.get_logger(__name__)


def register(commands: Any) -> None:
    up = commands.add_parser("up", help="start everything: PostgreSQL, Redis, workers, beat, "
                                        "Flower (embedded defaults when nothing is configured)")
    up.add_argument("--flower-port", type=int, default=5555)
    up.add_argument("--no-flower", action="store_true")
    up.add_argument("--gateway-port", type=int, default=None,
                    help="port of the HTTP API and MCP (default MEMORYD_GATEWAY_PORT, 8765)")
    up.add_argument("--no-gateway", action="store_true")
    up.set_defaults(handler=_up)

    worker = commands.add_parser("worker", help="run a Celery worker")
    worker.add_argument("--queues", default=",".join(QUEUES),
                        help="comma-separated: memory, maintenance (default both)")
    worker.add_argument("--concurrency", type=int, default=None,
                        help="one prefork node with this many pool processes for all the "
                             "queues (default: memory consumers, see --processes)")
    worker.add_argument("--processes", type=int, default=None,
                        help="consumer processes for the memory queue, each taking and "
                             "running its own messages (default: one per core)")
    worker.add_argument("--name", default=None,
                        help="node name before the @ (default: memory-1, memory-2, ... "
                             "and maintenance); several workers on one host need names of "
                             "their own")
    worker.add_argument("--no-migrate", action="store_true",
                        help="do not apply migrations at start-up")
    worker.add_argument("--quiet", action="store_true", help="no start-up banner")
    worker.set_defaults(handler=_worker)

    beat = commands.add_parser("beat", help="run Celery beat (the maintenance schedule)")
    beat.add_argument("--quiet", action="store_true", help="no start-up banner")
    beat.set_defaults(handler=_beat)

    run = commands.add_parser("run", help="single node without a broker: run the schedule "
                                          "in-process with APScheduler")
    run.set_defaults(handler=_run)

    migrate = commands.add_parser("migrate", help="apply database migrations (idempotent)")
    migrate.set_defaults(handler=_migrate)


def _migrate(_args: argparse.Namespace) -> int:
    from memoryd.db.engine import get_engine
    from memoryd.db.migrate import current_revision, upgrade

    engine = get_engine()
    upgrade(engine)
    print(f"database at revision {current_revision(engine)}")
    return 0


def _worker(args: argparse.Namespace) -> int:
    from memoryd.config import get_settings

    get_settings().resolved_broker_url()  # none configured: say so before anything starts
    queues = [q.strip() for q in args.queues.split(",") if q.strip()]
    unknown = set(queues) - set(QUEUES)
    if unknown:
        from memoryd.errors import ConfigError

        raise ConfigError(f"unknown queue(s) {sorted(unknown)}; use memory and/or maintenance")
    for option in ("concurrency", "processes"):
        if getattr(args, option) is not None and getattr(args, option) < 1:
            from memoryd.errors import ConfigError

            raise ConfigError(f"--{option} must be at least 1")
    if not args.no_migrate:
        _migrate(args)
    from memoryd.cli import nodes

    planned = nodes.plan_nodes(queues, concurrency=args.concurrency,
                               processes=args.processes, name=args.name)
    if len(planned) == 1:
        return _run_node(planned[0], args)
    commands = [nodes.node_command(n, log_level=args.log_level, quiet=args.quiet)
                for n in planned]
    return nodes.NodeGroup(commands, nodes.node_env(planned)).run()


def _run_node(node: Any, args: argparse.Namespace) -> int:
    """One Celery node in this process (``memoryd.cli.nodes.Node``)."""
    from memoryd.worker import app

    argv = ["worker", f"--queues={','.join(node.queues)}", f"--hostname={node.name}@%h",
            f"--loglevel={args.log_level}", f"--pool={node.pool}"]
    if node.pool == "prefork":
        argv.append(f"--concurrency={node.concurrency}")
    app.start(["--quiet", *argv] if args.quiet else argv)
    return 0


def _beat(args: argparse.Namespace) -> int:
    from memoryd.config import get_settings
    from memoryd.private_files import private_dir
    from memoryd.worker import app

    settings = get_settings()
    settings.resolved_broker_url()  # none configured: say so before anything starts
    private_dir(settings.data_dir)
    argv = ["beat", f"--loglevel={args.log_level}",
            f"--schedule={settings.data_dir / 'celerybeat-schedule'}"]
    app.start(["--quiet", *argv] if args.quiet else argv)
    return 0


def _run(_args: argparse.Namespace) -> int:
    """One process, no broker: the same schedule, run directly against the database.
    It holds the data directory like ``memoryd up``: two schedules on one store would
    run every job twice."""
    from memoryd.cli import stack_dir
    from memoryd.config import get_settings

    with stack_dir.hold(get_settings(), "run"):
        return _run_schedule()


def _run_schedule() -> int:
    from memoryd.config import get_settings
    from memoryd.db.engine import get_engine
    from memoryd.db.migrate import upgrade
    from memoryd.memory.maintenance import run_to_completion
    from memoryd.memory.store import MemoryStore
    from memoryd.schedules.aps import build_scheduler

    settings = get_settings()
    store = MemoryStore(engine=get_engine())
    upgrade(store.engine)

    # Handlers first: a SIGTERM right after start-up must stop the scheduler cleanly too.
    stop = threading.Event()
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda *_: stop.set())
    scheduler = build_scheduler(settings, functools.partial(run_to_completion, store),
                                blocking=False)
    scheduler.start()
    jobs = scheduler.get_jobs()
    log.info("scheduler.started", jobs=len(jobs), timezone=settings.timezone)
    for job in jobs:
        # Flushed: under a supervisor stdout is a pipe, and this process then only waits.
        print(f"{job.id:<18} next run {job.next_run_time}", flush=True)
    stop.wait()
    scheduler.shutdown(wait=True)
    return 0


def _up(args: argparse.Namespace) -> int:
    from memoryd.cli.supervisor import Stack
    from memoryd.config import get_settings

    gateway_port = args.gateway_port or get_settings().gateway_port
    stack = Stack(flower_port=None if args.no_flower else args.flower_port,
                  gateway_port=None if args.no_gateway else gateway_port,
                  log_level=args.log_level)
    return stack.run()
