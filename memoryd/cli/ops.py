"""Operator commands: run and inspect maintenance jobs, fleet status, statistics, restore."""

from __future__ import annotations

import argparse
import json
from typing import Any

from memoryd.cli import database
from memoryd.cli.output import as_json, key_values, table
from memoryd.errors import NoBrokerConfigured
from memoryd.schedules.names import JOB_NAMES


def register(commands: Any) -> None:
    jobs = commands.add_parser("jobs", help="run or inspect maintenance jobs")
    sub = jobs.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")
    run = sub.add_parser("run", help="run a maintenance job now, in this process")
    run.add_argument("job", choices=JOB_NAMES)
    run.add_argument("--agent", dest="agent_id")
    run.add_argument("--dry-run", action="store_true")
    run.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                     help="job parameter (VALUE: JSON, else a string), e.g. --param "
                          "max_age_days=60; repeatable; `memoryd jobs list` shows them")
    run.add_argument("--json", action="store_true")
    run.set_defaults(handler=_jobs_run)
    listing = sub.add_parser("list", help="every job: its queue, schedule and parameters")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=_jobs_list)
    history = sub.add_parser("history", help="recent maintenance runs")
    history.add_argument("--job", choices=JOB_NAMES)
    history.add_argument("--limit", type=int, default=20)
    history.add_argument("--json", action="store_true")
    history.set_defaults(handler=_jobs_history)

    status = commands.add_parser("status", help="workers, queue lengths, last run of each job")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=_status)

    stats = commands.add_parser("stats", help="memories per agent and category")
    stats.add_argument("--limit", type=int, default=50, help="agents to show")
    stats.add_argument("--json", action="store_true")
    stats.set_defaults(handler=_stats)

    restore = commands.add_parser("restore", help="restore an evicted memory")
    restore.add_argument("id", help="eviction id (number) or memory id (UUID)")
    restore.set_defaults(handler=_restore)




def _jobs_run(args: argparse.Namespace) -> int:
    from memoryd.memory.maintenance import run_to_completion

    record = run_to_completion(database.store(), args.job, agent_id=args.agent_id,
                               dry_run=args.dry_run, params=key_values(args.param, "param"))
    print(as_json(record.as_dict()) if args.json else
          f"{record.job}: {record.status} (run {record.run_id}) {json.dumps(record.stats)}")
    return 0 if record.status != "failed" else 1


def _jobs_list(args: argparse.Namespace) -> int:
    from memoryd.config import get_settings
    from memoryd.schedules.table import DEFAULT_SCHEDULE, effective_schedule

    settings = get_settings()
    crons = {entry.job: entry.cron for entry in effective_schedule(settings)}
    jobs = [_job_view(entry, crons.get(entry.job), settings) for entry in DEFAULT_SCHEDULE]
    if args.json:
        print(as_json(jobs))
        return 0
    for job in jobs:
        when = job["schedule"] + (f" ({settings.timezone})" if crons.get(job["job"]) else "")
        params = table(("parameter", "type", "default"),
                       [(p["name"], p["type"], json.dumps(p["default"]))
                        for p in job["parameters"]])
        print(f"{job['job']}: queue {job['queue']}, schedule {when}\n  {job['description']}\n"
              + "\n".join(f"    {line}" for line in params.splitlines()) + "\n")
    return 0


def _job_view(entry: Any, cron: str | None, settings: Any) -> dict[str, Any]:
    """One job as ``jobs list`` shows it: all of it read from the schedule table, the
    job's signature and the task routes, so the listing cannot drift from them."""
    from dataclasses import asdict

    from memoryd.memory.maintenance.runner import job_parameters
    from memoryd.schedules.table import OFF

    params = job_parameters(entry.job, settings.maintenance_batch_size)
    return {"job": entry.job, "description": entry.description,
            "queue": _queue_of(entry.task_name), "schedule": cron or OFF,
            "parameters": [asdict(p) for p in params]}


def _queue_of(task_name: str) -> str:
    """The queue memoryd's task routes send ``task_name`` to, as Celery reads them
    (routes do not depend on the broker, so none is needed)."""
    from celery.app.routes import MapRoute

    from memoryd.celery_config import celery_config
    from memoryd.config import get_settings

    routes = celery_config(get_settings(), broker_url="memory://")["task_routes"]
    return str(MapRoute(routes)(task_name)["queue"])


def _jobs_history(args: argparse.Namespace) -> int:
    from memoryd.memory import reports

    with database.store().session() as session:
        runs = reports.job_runs(session, args.job, args.limit)
    if args.json:
        print(as_json([r.model_dump(mode="json") for r in runs]))
    else:
        print(table(("run", "job", "status", "agent", "started", "stats"),
                    [(r.id, r.job, r.status + (" (dry)" if r.dry_run else ""),
                      r.agent_id or "all", r.started_at.strftime("%Y-%m-%d %H:%M:%S"),
                      json.dumps(r.stats) if r.status != "failed" else r.error)
                     for r in runs]))
    return 0


def _broker_view(timeout: float = 1.0) -> dict[str, Any]:
    """Workers that answer a ping, and how many messages wait in each queue."""
    from memoryd.broker import broker_for
    from memoryd.worker import app

    view: dict[str, Any] = {"workers": [], "queues": {}}
    try:
        replies = app.control.ping(timeout=timeout) or []
        view["workers"] = sorted(name for reply in replies for name in reply)
        with app.connection_for_read() as conn:
            view["queues"] = broker_for(app.conf.broker_url).queue_lengths(
                conn.default_channel)
    except NoBrokerConfigured as exc:
        view["error"] = str(exc)
    except Exception as exc:  # an unreachable broker is a status, not a crash
        view["error"] = f"broker unreachable: {type(exc).__name__}"
    return view


def _status(args: argparse.Namespace) -> int:
    from memoryd.memory import dead_letters, reports

    view = _broker_view()
    store = database.store()
    with store.session() as session:
        runs = reports.last_runs(session)
        dead = dead_letters.count(session)
        models = reports.embedding_progress(session, store.model)
    if args.json:
        print(as_json({**view, "dead_letters": dead, "embeddings": models, "jobs": runs}))
        return 0
    print(f"workers: {', '.join(view['workers']) or 'none answering'}")
    if "error" in view:
        print(view["error"])
    for queue, length in view["queues"].items():
        print(f"queue {queue}: {length} waiting")
    print(f"dead letters: {dead}" + (" (memoryd dlq list)" if dead else ""))
    print(f"embedding model: {models.model}, {models.done_percent}% of memories on it "
          f"({', '.join(f'{m}: {n}' for m, n in models.memories_by_model.items()) or 'none'})"
          + ("" if models.done_percent == 100.0 else "; the reembed job moves the rest"))
    print(table(("job", "last status", "started", "stats"),
                [(job, runs[job]["status"] if job in runs else "never",
                  runs[job]["started_at"].strftime("%Y-%m-%d %H:%M:%S") if job in runs else "",
                  json.dumps(runs[job]["stats"]) if job in runs else "") for job in JOB_NAMES]))
    return 0


def _stats(args: argparse.Namespace) -> int:
    from memoryd.memory import reports

    with database.store().session() as session:
        agents = reports.agent_stats(session, args.limit)
    if args.json:
        print(as_json([a.model_dump(mode="json") for a in agents]))
    else:
        print(table(("agent", "category", "memories", "agent total"),
                    [(a.agent_id, category, count, a.total)
                     for a in agents for category, count in sorted(a.categories.items())]))
    return 0


def _restore(args: argparse.Namespace) -> int:
    from memoryd import validation as check
    from memoryd.memory.maintenance import restore

    memory_id = restore(database.store(), check.restore_target(args.id, "id"))
    print(f"restored {memory_id}")
    return 0
