"""memoryd under load: many agents, many callers, with and without maintenance running.

On the store of bench/recall.py (``--scale`` memories, 1M by default; reused with
``--keep``), with an embedded Redis, one memory worker (its default consumers, one per
core) and one maintenance worker (concurrency 1), ``--callers`` threads share one
``MemoryClient`` and drive ``--agents`` agents (the big one, the typical one and
background agents) for two phases:

- idle: ``--seconds`` of 80 % recall / 20 % store (``--recall-share``);
- maintenance: the same mix while ``consolidate`` and then ``deduplicate`` run over the
  whole store (the phase lasts until both finished, at least ``--seconds``).

Reported per phase: operations per second, p50/p95/p99 of recall and store, errors; the
recall latency inside the maintenance runs' own time windows (from the audit) against
idle; and an exact count of every store: each unique content sent must be in
``memories`` (or, if consolidation merged it into a near-duplicate, restorable in
``evicted_memories``) exactly once. A PNG shows recall latency over time.

    .venv/bin/python -m bench.load [--scale N] [--agents N] [--callers N] [--seconds S]
                                   [--out PATH] [--chart PATH] [--keep [DIR]]

Wrap runs in ``flock /tmp/memoryd-bench.lock``. See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import text

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

DEFAULT_OUT = OUT_DIR / "load.json"
DEFAULT_CHART = OUT_DIR / "load.png"
MAINTENANCE_JOBS = ("consolidate", "deduplicate")
TARGET_RATIO = 2.0  # recall p95 while maintenance runs, over idle


@dataclass
class Sample:
    at: float  # seconds since the benchmark's start
    op: str  # "recall" or "store"
    ms: float | None  # None: the call failed


@dataclass
class Recorder:
    start: float = field(default_factory=time.monotonic)
    samples: list[Sample] = field(default_factory=list)
    stored: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, op: str, began: float, ok: bool, content: str | None = None) -> None:
        ms = (time.monotonic() - began) * 1000 if ok else None
        with self.lock:
            self.samples.append(Sample(began - self.start, op, ms))
            if content is not None:
                self.stored.append(content)


def drive(client: Any, agents: Sequence[str], queries: Sequence[str], callers: int,
          recall_share: float, until: Any, recorder: Recorder, phase: str) -> None:
    """``callers`` threads calling until ``until()`` is true."""
    def caller(number: int) -> None:
        rng = random.Random(f"{phase}-{number}")
        n = 0
        while not until():
            agent = rng.choice(agents)
            began = time.monotonic()
            if rng.random() < recall_share:
                try:
                    client.recall(agent, rng.choice(queries), limit=10)
                    recorder.add("recall", began, True)
                except Exception:
                    recorder.add("recall", began, False)
            else:
                content = (f"{rng.choice(queries).rstrip('?')} - load note {phase} "
                           f"{number}-{n} {uuid.uuid4()}")
                n += 1
                try:
                    client.store(agent, content)
                    recorder.add("store", began, True, content)
                except Exception:
                    recorder.add("store", began, False, content)

    threads = [threading.Thread(target=caller, args=(i,), daemon=True) for i in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@contextmanager
def maintenance_worker(url: str, broker: str, workdir: Path) -> Iterator[None]:
    env = {**os.environ, "MEMORYD_DATABASE_URL": url, "MEMORYD_BROKER_URL": broker,
           "MEMORYD_DATA_DIR": str(workdir / "data")}
    log = (workdir / "maintenance.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "memoryd", "worker", "--no-migrate", "--queues", "maintenance",
         "--concurrency", "1"], env=env, stdin=subprocess.DEVNULL, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield
    finally:
        bench_recall.stop_process_group(proc)
        log.close()


def stats(values: list[float], seconds: float) -> dict[str, Any]:
    found = bench_recall.percentiles(values) if values else {"n": 0}
    return {**found, "per_s": round(len(values) / seconds, 1) if seconds else 0.0}


def phase_report(recorder: Recorder, since: float, until: float) -> dict[str, Any]:
    chosen = [s for s in recorder.samples if since <= s.at < until]
    seconds = until - since
    report: dict[str, Any] = {"seconds": round(seconds, 1)}
    for op in ("recall", "store"):
        ok = [s.ms for s in chosen if s.op == op and s.ms is not None]
        report[op] = {**stats(ok, seconds),
                      "errors": sum(1 for s in chosen if s.op == op and s.ms is None)}
    report["ops_per_s"] = round(sum(1 for s in chosen if s.ms is not None) / seconds, 1)
    return report


def maintenance_windows(url: str, since: datetime) -> list[dict[str, Any]]:
    from memoryd.memory.store import MemoryStore

    store = MemoryStore(url)
    try:
        with store.session() as session:
            rows = session.execute(text(
                "SELECT job, status, started_at, finished_at, stats FROM maintenance_runs "
                "WHERE started_at >= :s AND job = ANY(:jobs) ORDER BY id"),
                {"s": since, "jobs": list(MAINTENANCE_JOBS)}).all()
    finally:
        store.close()
    return [{"job": r.job, "status": r.status, "started_at": r.started_at,
             "finished_at": r.finished_at, "stats": r.stats} for r in rows]


def count_stores(url: str, contents: list[str]) -> dict[str, int]:
    """Each content sent once: found once in memories, or merged away into evicted."""
    from memoryd.memory.store import MemoryStore

    store = MemoryStore(url)
    found: dict[str, int] = {}
    try:
        with store.session() as session:
            for start in range(0, len(contents), 5000):
                chunk = contents[start:start + 5000]
                for sql in ("SELECT content, count(*) FROM memories WHERE content = ANY(:c) "
                            "GROUP BY content",
                            "SELECT data->>'content', count(*) FROM evicted_memories "
                            "WHERE data->>'content' = ANY(:c) GROUP BY 1"):
                    for content, n in session.execute(text(sql), {"c": chunk}):
                        found[content] = found.get(content, 0) + int(n)
    finally:
        store.close()
    return {"sent": len(contents), "unique_sent": len(set(contents)),
            "lost": sum(1 for c in set(contents) if c not in found),
            "doubled": sum(n - 1 for n in found.values() if n > 1)}


def write_chart(path: Path, recorder: Recorder, windows: list[dict[str, Any]],
                phase_starts: dict[str, float], origin: datetime) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buckets: dict[int, list[float]] = {}
    for s in recorder.samples:
        if s.op == "recall" and s.ms is not None:
            buckets.setdefault(int(s.at), []).append(s.ms)
    xs = sorted(buckets)
    p95 = [sorted(buckets[x])[int(0.95 * (len(buckets[x]) - 1))] for x in xs]
    p50 = [sorted(buckets[x])[len(buckets[x]) // 2] for x in xs]
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.plot(xs, p95, label="recall p95 (1 s buckets)")
    ax.plot(xs, p50, label="recall p50", alpha=0.7)
    for w in windows:
        if w["finished_at"] is not None:
            a = (w["started_at"] - origin).total_seconds()
            b = (w["finished_at"] - origin).total_seconds()
            ax.axvspan(a, b, alpha=0.15, label=f"{w['job']} running")
    for name, at in phase_starts.items():
        ax.axvline(at, color="grey", linestyle=":")
        ax.text(at, ax.get_ylim()[1] * 0.95, f" {name}", fontsize=8)
    ax.set_xlabel("seconds")
    ax.set_ylabel("ms")
    ax.set_title("memoryd recall latency under load")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run(url: str, info: seeding.SeedInfo, args: argparse.Namespace, workdir: Path
        ) -> tuple[dict[str, Any], Recorder, list[dict[str, Any]], dict[str, float], datetime]:
    from memoryd.client import MemoryClient

    background = [f"{seeding.BACKGROUND_PREFIX}{i:04d}"
                  for i in range(min(info.background_agents, max(0, args.agents - 2)))]
    agents = [info.big_agent, info.typical_agent, *background][:args.agents]
    queries = seeding.queries(500)
    recorder = Recorder()
    report: dict[str, Any] = {"agents": len(agents)}
    with bench_recall.memory_worker(url, workdir) as broker, \
            maintenance_worker(url, broker, workdir), \
            MemoryClient(broker_url=broker, timeout=120.0) as client:
        for agent in agents[:8]:  # connections and models warm
            client.recall(agent, queries[0])
        origin = datetime.now().astimezone()
        recorder.start = time.monotonic()
        starts: dict[str, float] = {"idle": 0.0}
        idle_end = args.seconds
        drive(client, agents, queries, args.callers, args.recall_share,
              lambda: time.monotonic() - recorder.start >= idle_end, recorder, "idle")
        starts["maintenance"] = time.monotonic() - recorder.start
        jobs = [client.run_job(job, wait=False) for job in MAINTENANCE_JOBS]
        end_at = starts["maintenance"] + args.seconds
        drive(client, agents, queries, args.callers, args.recall_share,
              lambda: (time.monotonic() - recorder.start >= end_at
                       and all(j.ready() for j in jobs)), recorder, "maintenance")
        finished = time.monotonic() - recorder.start
        outcomes = [j.get(timeout=600) for j in jobs]
    windows = maintenance_windows(url, origin)
    report["idle"] = phase_report(recorder, 0.0, starts["maintenance"])
    report["maintenance_phase"] = phase_report(recorder, starts["maintenance"], finished)
    inside = [(max(0.0, (w["started_at"] - origin).total_seconds()),
               (w["finished_at"] - origin).total_seconds())
              for w in windows if w["finished_at"] is not None]
    during = [s.ms for s in recorder.samples if s.op == "recall" and s.ms is not None
              and any(a <= s.at < b for a, b in inside)]
    report["recall_while_maintenance_runs"] = stats(during, sum(b - a for a, b in inside))
    idle_p95 = report["idle"]["recall"].get("p95")
    during_p95 = report["recall_while_maintenance_runs"].get("p95")
    report["p95_ratio"] = (round(during_p95 / idle_p95, 2)
                           if idle_p95 and during_p95 else None)
    report["maintenance_runs"] = [{**w, "started_at": w["started_at"].isoformat(),
                                   "finished_at": w["finished_at"] and
                                   w["finished_at"].isoformat()} for w in windows]
    report["maintenance_results"] = outcomes
    report["stores"] = count_stores(url, recorder.stored)
    return report, recorder, windows, starts, origin


def summary(report: dict[str, Any]) -> str:
    rows = []
    for name, key in (("idle", "idle"), ("maintenance phase", "maintenance_phase")):
        block = report[key]
        for op in ("recall", "store"):
            s = block[op]
            rows.append([name, op, s.get("n", 0), f"{s.get('p50', 0):.1f}",
                         f"{s.get('p95', 0):.1f}", f"{s.get('p99', 0):.1f}",
                         s["per_s"], s["errors"]])
    during = report["recall_while_maintenance_runs"]
    rows.append(["while jobs run", "recall", during.get("n", 0),
                 f"{during.get('p50', 0):.1f}", f"{during.get('p95', 0):.1f}",
                 f"{during.get('p99', 0):.1f}", during["per_s"], ""])
    table = format_table(["phase", "op", "n", "p50 ms", "p95 ms", "p99 ms", "per s",
                          "errors"], rows)
    return (f"{table}\nrecall p95 while maintenance runs / idle: {report['p95_ratio']} "
            f"(target <= {TARGET_RATIO})\nstores: {report['stores']}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=int, default=1_000_000)
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--callers", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--recall-share", type=float, default=0.8)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--chart", type=Path, default=DEFAULT_CHART)
    parser.add_argument("--keep", nargs="?", type=Path, const=Path(), default=None)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = bench_recall.layout(args.scale)
    options = bench_recall.SMALL_SERVER if args.scale < 100_000 else None
    keep = OUT_DIR / f"scale-{args.scale}" if args.keep == Path() else args.keep
    watch = Stopwatch()
    result: dict[str, Any] = {"benchmark": "load", "date": now_iso(), "machine": machine_info(),
                              "args": {k: str(v) for k, v in vars(args).items()}}
    with tempfile.TemporaryDirectory(prefix="memoryd-bench-load-") as tmp:
        workdir = let_service_user_in(Path(tmp))
        with watch("seed_or_open"), seeding.seeded_cluster(
                keep if keep is not None else workdir / "cluster", **sizes,
                load_options=options, serve_options=options) as (url, info):
            bench_recall.index_large_agents(url)
            seeding.prewarm(url)
            report, recorder, windows, starts, origin = run(url, info, args, workdir)
    result.update(report)
    result["timings_s"] = watch.rounded()
    print(summary(result))
    write_json(args.out, result)
    write_chart(args.chart, recorder, windows, starts, origin)
    print(f"wrote {args.out} and {args.chart}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
