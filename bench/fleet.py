"""memoryd under a fleet: recall throughput and latency from 1 to 64 caller processes.

Each caller is a process of its own with its own ``MemoryClient``, as agents of a fleet
are; they call through the broker to the default worker setup (``memoryd worker
--queues memory`` with its default concurrency), for ``--seconds`` per step. Two stores:

- ``--store small``: ``--agents`` agents of ``--per-agent`` memories (8 x 500), stored
  through ``MemoryStore`` with the real embedder;
- ``--store scale``: the 1M store of bench/recall.py (``--scale``, reused with
  ``--keep``), the callers spread over its background agents and the two measured ones.

Per step (callers 1, 2, 4, ... ``--callers``): recalls per second, p50/p95/p99, errors;
with ``--mix``, the same with 80 % recall and 20 % store. ``--profile`` also reports
where the CPU went per recall: the callers, the worker's main process, its pool
processes, PostgreSQL and Redis (``/proc`` times over the step), which is how a
ceiling shows whose it is, and Redis's commands per call (how many consumers a message
woke, how many takes ran). A PNG plots throughput and p95 against callers; the JSON
and the printout name the machine.

    .venv/bin/python -m bench.fleet [--store small|scale] [--callers 64] [--seconds 10]
                                    [--mix] [--profile] [--concurrency N | --processes N]
                                    [--out PATH]

Run it alone on the machine (``flock /tmp/memoryd-bench.lock``). See bench/README.md.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import recall as bench_recall
from bench import scale as seeding
from bench.common import (
    OUT_DIR,
    Stopwatch,
    format_table,
    let_service_user_in,
    machine_info,
    now_iso,
    write_json,
)

DEFAULT_OUT = OUT_DIR / "fleet.json"
DEFAULT_CHART = OUT_DIR / "fleet.png"
STEPS = (1, 2, 4, 8, 16, 32, 64)
WARMUP_CALLS = 5


# --- the callers -----------------------------------------------------------------------
def caller(broker: str, agents: Sequence[str], queries: Sequence[str], recall_share: float,
           seed: str, seconds: float, ready: Any, go: Any, results: Any) -> None:
    """One caller process: its own client, warmed up, then (once every caller is ready
    and ``go`` is set) calls for ``seconds``; puts (op, ms or None) samples on
    ``results``."""
    from memoryd.client import MemoryClient

    rng = random.Random(seed)
    samples: list[tuple[str, float | None]] = []
    with MemoryClient(broker_url=broker, timeout=120.0) as client:
        for _ in range(WARMUP_CALLS):
            client.recall(rng.choice(agents), rng.choice(queries), limit=10)
        ready.put(os.getpid())
        go.wait()
        end = time.time() + seconds
        while time.time() < end:
            agent = rng.choice(agents)
            recall = rng.random() < recall_share
            began = time.perf_counter()
            try:
                if recall:
                    client.recall(agent, rng.choice(queries), limit=10)
                else:
                    client.store(agent, f"{rng.choice(queries).rstrip('?')} - fleet note "
                                        f"{uuid.uuid4()}")
                samples.append(("recall" if recall else "store",
                                (time.perf_counter() - began) * 1000))
            except Exception:
                samples.append(("recall" if recall else "store", None))
    results.put(samples)


def run_step(broker: str, agents: Sequence[str], queries: Sequence[str], callers: int,
             seconds: float, recall_share: float, watch: CpuWatch | None) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    results, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=caller, args=(broker, agents, queries, recall_share,
                                             f"{callers}-{n}", seconds, ready, go, results))
             for n in range(callers)]
    for proc in procs:
        proc.start()
    for _ in procs:  # every caller started, connected and warm: the step starts together
        ready.get(timeout=600)
    before = watch.sample([p.pid for p in procs]) if watch else None
    commands = redis_commands(broker) if watch else None
    go.set()
    samples: list[tuple[str, float | None]] = []
    for _ in procs:
        samples.extend(results.get(timeout=seconds + 300))
    after = watch.sample([p.pid for p in procs]) if watch else None
    commands_after = redis_commands(broker) if watch else None
    for proc in procs:
        proc.join(30)
    report = step_report(samples, seconds, callers)
    if watch and before and after:
        report["cpu_ms_per_call"] = watch.per_call(before, after,
                                                   max(1, report["calls"]))
    if commands is not None and commands_after is not None:
        report["redis_commands_per_call"] = {
            name: round((commands_after[name] - commands[name]) / max(1, report["calls"]), 2)
            for name in commands}
    return report


def redis_commands(broker: str) -> dict[str, int]:
    """Redis's command counts so far: all of them, the consumers' idle waits that
    returned (``BLMOVE``: each a consumer woken) and the takes (``EVAL``)."""
    import redis

    client = redis.Redis.from_url(broker)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    return {"all": sum(calls.values()), "blmove (wake-ups)": calls.get("blmove", 0),
            "eval (takes)": calls.get("eval", 0)}


def step_report(samples: list[tuple[str, float | None]], seconds: float,
                callers: int) -> dict[str, Any]:
    report: dict[str, Any] = {"callers": callers,
                              "calls": sum(1 for _, ms in samples if ms is not None)}
    report["per_s"] = round(report["calls"] / seconds, 1)
    for op in ("recall", "store"):
        ok = [ms for o, ms in samples if o == op and ms is not None]
        if ok or any(o == op for o, _ in samples):
            report[op] = {**(bench_recall.percentiles(ok) if ok else {"n": 0}),
                          "per_s": round(len(ok) / seconds, 1),
                          "errors": sum(1 for o, ms in samples if o == op and ms is None)}
    return report


# --- where the CPU goes -------------------------------------------------------------------
class CpuWatch:
    """CPU seconds of the processes on the path of a call, by part, read from /proc."""

    def __init__(self, worker_pid: int, redis_pid: int | None, postgres_pid: int | None
                 ) -> None:
        self.worker_pid = worker_pid
        self.redis_pid = redis_pid
        self.postgres_pid = postgres_pid

    def sample(self, caller_pids: Sequence[int]) -> dict[str, float]:
        import psutil

        def cpu(pids: Sequence[int]) -> float:
            total = 0.0
            for pid in pids:
                try:
                    t = psutil.Process(pid).cpu_times()
                    total += t.user + t.system
                except psutil.Error:
                    pass
            return total

        def children(pid: int | None) -> list[int]:
            if pid is None:
                return []
            try:
                return [c.pid for c in psutil.Process(pid).children(recursive=True)]
            except psutil.Error:
                return []

        return {"callers": cpu(caller_pids), "worker main": cpu([self.worker_pid]),
                "worker pool": cpu(children(self.worker_pid)),
                "postgresql": cpu([p for p in [self.postgres_pid] if p]
                                  + children(self.postgres_pid)),
                "redis": cpu([p for p in [self.redis_pid] if p]),
                "machine busy": sum(psutil.cpu_times()[:3])}

    @staticmethod
    def per_call(before: dict[str, float], after: dict[str, float], calls: int
                 ) -> dict[str, float]:
        return {part: round((after[part] - before[part]) * 1000 / calls, 2)
                for part in before}


# --- the services --------------------------------------------------------------------------
@contextmanager
def worker(url: str, workdir: Path, concurrency: int | None,
           processes: int | None = None) -> Iterator[tuple[str, Any]]:
    """An embedded Redis and ``memoryd worker --queues memory`` on it, at its default
    concurrency (or number of consumers) unless told; (broker URL, worker process)."""
    from celery import Celery

    from memoryd.embedded.redis import EmbeddedRedis

    redis = EmbeddedRedis(workdir / "redis")
    broker = redis.start()
    env = dict(os.environ)
    env.update({"MEMORYD_DATABASE_URL": url, "MEMORYD_BROKER_URL": broker,
                "MEMORYD_DATA_DIR": str(workdir / "data")})
    argv = [sys.executable, "-m", "memoryd", "worker", "--no-migrate", "--queues", "memory"]
    if concurrency:
        argv += ["--concurrency", str(concurrency)]
    if processes:
        argv += ["--processes", str(processes)]
    log = (workdir / "worker.log").open("ab")
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        app = Celery("bench-ping", broker=broker, set_as_current=False)
        app.conf.update(broker_connection_retry_on_startup=True, accept_content=["json"])
        began = time.monotonic()
        try:
            while not app.control.ping(timeout=0.5):
                if proc.poll() is not None or time.monotonic() - began > 120:
                    raise RuntimeError(f"worker did not start; see {workdir / 'worker.log'}")
        finally:
            app.close()
        yield broker, (proc, redis)
    finally:
        bench_recall.stop_process_group(proc)
        log.close()
        redis.stop()


def redis_pid(redis: Any) -> int | None:
    pid = getattr(redis, "pid", None)
    if isinstance(pid, int):
        return pid
    proc = getattr(redis, "_proc", None) or getattr(redis, "process", None)
    return getattr(proc, "pid", None)


def postmaster_pid(url: str) -> int | None:
    import psutil
    from sqlalchemy import create_engine, text

    from memoryd.db.engine import normalize_url

    engine = create_engine(normalize_url(url))
    try:
        with engine.connect() as conn:  # asked while the backend lives: it exits after
            backend = int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
            try:
                return int(psutil.Process(backend).ppid())
            except psutil.Error:
                return None
    finally:
        engine.dispose()


@contextmanager
def small_store(workdir: Path, agents: int, per_agent: int
                ) -> Iterator[tuple[str, list[str], list[str]]]:
    """A fresh embedded PostgreSQL with ``agents`` agents of ``per_agent`` memories."""
    from bench.common import embedded_postgres
    from memoryd.memory.store import MemoryStore

    with embedded_postgres("memoryd-bench-fleet-") as url:
        store = MemoryStore(url)
        try:
            store.migrate()
            names = [f"fleet-agent-{i:02d}" for i in range(agents)]
            texts = seeding.sentences(agents * per_agent, seed=11)
            for i, agent in enumerate(names):
                chunk = texts[i * per_agent:(i + 1) * per_agent]
                for start in range(0, len(chunk), 250):
                    store.store_many(agent, [{"content": t} for t in chunk[start:start + 250]])
        finally:
            store.close()
        yield url, names, seeding.queries(500)


@contextmanager
def scale_store(workdir: Path, scale: int, agents: int, keep: Path | None
                ) -> Iterator[tuple[str, list[str], list[str]]]:
    sizes = bench_recall.layout(scale)
    options = bench_recall.SMALL_SERVER if scale < 100_000 else None
    with seeding.seeded_cluster(keep if keep is not None else workdir / "cluster", **sizes,
                                load_options=options, serve_options=options) as (url, info):
        bench_recall.index_large_agents(url)
        seeding.prewarm(url)
        background = [f"{seeding.BACKGROUND_PREFIX}{i:04d}"
                      for i in range(min(info.background_agents, max(0, agents - 2)))]
        yield url, [info.big_agent, info.typical_agent, *background][:agents], \
            seeding.queries(500)


# --- reporting ---------------------------------------------------------------------------
def summary(result: dict[str, Any]) -> str:
    lines = []
    for mode in ("recall", "mix"):
        steps = result.get(mode)
        if not steps:
            continue
        rows = [[s["callers"], s["per_s"], s["recall"].get("p50"), s["recall"].get("p95"),
                 s["recall"].get("p99"), s["recall"]["errors"] + s.get("store", {}).get(
                     "errors", 0)] for s in steps]
        lines.append(f"{mode}:\n" + format_table(
            ["callers", "calls/s", "recall p50 ms", "p95 ms", "p99 ms", "errors"], rows,
            digits=1))
        cpu = [s for s in steps if "cpu_ms_per_call" in s]
        if cpu:
            parts = list(cpu[0]["cpu_ms_per_call"])
            lines.append("CPU ms per call:\n" + format_table(
                ["callers", *parts], [[s["callers"], *(s["cpu_ms_per_call"][p] for p in parts)]
                                      for s in cpu], digits=2))
        counted = [s for s in steps if "redis_commands_per_call" in s]
        if counted:
            names = list(counted[0]["redis_commands_per_call"])
            lines.append("Redis commands per call:\n" + format_table(
                ["callers", *names],
                [[s["callers"], *(s["redis_commands_per_call"][n] for n in names)]
                 for s in counted], digits=2))
    machine = result["machine"]
    lines.append(f"machine: {machine['cpus']} cores, {machine['cpu']}; {result['date']}")
    return "\n\n".join(lines)


def write_chart(path: Path, result: dict[str, Any]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for mode in ("recall", "mix"):
        steps = result.get(mode) or []
        if not steps:
            continue
        xs = [s["callers"] for s in steps]
        left.plot(xs, [s["per_s"] for s in steps], marker="o", label=mode)
        right.plot(xs, [s["recall"].get("p95", 0) for s in steps], marker="o", label=mode)
    for ax, title, ylabel in ((left, "throughput", "calls / s"),
                              (right, "recall p95", "ms")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("caller processes")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    machine = result["machine"]
    fig.suptitle(f"memoryd fleet: {machine['cpus']} cores, {machine['cpu']}, "
                 f"{result['date'][:10]}", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", choices=("small", "scale"), default="scale")
    parser.add_argument("--scale", type=int, default=1_000_000)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--per-agent", type=int, default=500)
    parser.add_argument("--callers", type=int, default=64, help="the last step")
    parser.add_argument("--steps", default=None,
                        help="comma-separated caller counts (default 1, 2, 4 ... --callers)")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--mix", action="store_true", help="also the 80/20 recall/store mix")
    parser.add_argument("--profile", action="store_true", help="CPU per call by process")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="the worker's pool processes (default: the worker's default)")
    parser.add_argument("--processes", type=int, default=None,
                        help="the worker's memory consumers (default: one per core)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--chart", type=Path, default=DEFAULT_CHART)
    parser.add_argument("--keep", nargs="?", type=Path, const=Path(), default=None)
    return parser.parse_args(argv)


def steps_of(args: argparse.Namespace) -> list[int]:
    if args.steps:
        return [int(s) for s in args.steps.split(",") if s.strip()]
    return [n for n in STEPS if n <= args.callers]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    watch = Stopwatch()
    result: dict[str, Any] = {"benchmark": "fleet", "date": now_iso(), "machine": machine_info(),
                              "commit": bench_commit(),
                              "args": {k: str(v) for k, v in vars(args).items()}}
    keep = OUT_DIR / f"scale-{args.scale}" if args.keep == Path() else args.keep
    with tempfile.TemporaryDirectory(prefix="memoryd-bench-fleet-") as tmp:
        workdir = let_service_user_in(Path(tmp))
        store = (small_store(workdir, args.agents, args.per_agent) if args.store == "small"
                 else scale_store(workdir, args.scale, max(args.agents, 8), keep))
        with watch("seed_or_open"), store as (url, agents, queries), \
                worker(url, workdir, args.concurrency, args.processes) as (broker, (proc, redis)):
            cpu = (CpuWatch(proc.pid, redis_pid(redis), postmaster_pid(url))
                   if args.profile else None)
            for mode, share in (("recall", 1.0), ("mix", 0.8)):
                if mode == "mix" and not args.mix:
                    continue
                result[mode] = []
                for callers in steps_of(args):
                    step = run_step(broker, agents, queries, callers, args.seconds, share, cpu)
                    result[mode].append(step)
                    print(f"{mode} {callers:>3} callers: {step['per_s']:>7} calls/s, "
                          f"recall p50 {step['recall'].get('p50')} ms, "
                          f"p95 {step['recall'].get('p95')} ms", flush=True)
    result["timings_s"] = watch.rounded()
    print(summary(result))
    write_json(args.out, result)
    write_chart(args.chart, result)
    print(f"wrote {args.out} and {args.chart}")
    return 0


def bench_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


if __name__ == "__main__":
    raise SystemExit(main())
