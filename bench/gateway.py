"""Recall through the gateway (HTTP) against recall through ``MemoryClient``, same store.

Seeds (or reuses, with ``--keep``) the store of ``bench/recall.py`` (``--scale``
memories; 1M by default), starts an embedded Redis, one memory worker (concurrency 2)
and one ``memoryd gateway`` process, then sends the same generated questions both ways
at 1, 8 and 32 concurrent callers:

- HTTP: each caller thread has its own keep-alive ``httpx.Client`` and an API key for
  the agent, ``POST /v1/agents/{agent}/recall``;
- client: the caller threads share one ``MemoryClient``, as an application would.

The two paths alternate block by block (and which goes first alternates too), so drift
of a shared VM hits both alike. Reported per path and concurrency: p50/p95/p99 latency,
recalls per second and errors (any exception or non-200 answer).

    .venv/bin/python -m bench.gateway [--scale N] [--queries N] [--concurrency 1,8,32]
                                      [--out PATH] [--keep [DIR]]

Wrap heavy runs in ``flock /tmp/memoryd-bench.lock``. See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

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

DEFAULT_OUT = OUT_DIR / "gateway.json"
DEFAULT_CONCURRENCY = (1, 8, 32)
BLOCKS = 5  # alternations of the two paths per concurrency level
WARMUP = 20
TARGET_EXTRA_P95_MS = 5.0  # HTTP p95 over the client's, one caller
PATHS = ("client", "http")


@dataclass
class Samples:
    """Latencies (ms) of the successful calls, errors, and the wall time of the blocks."""

    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    wall_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, ms: float | None) -> None:
        with self.lock:
            if ms is None:
                self.errors += 1
            else:
                self.latencies_ms.append(ms)

    def summary(self) -> dict[str, Any]:
        calls = len(self.latencies_ms) + self.errors
        return {**bench_recall.percentiles(self.latencies_ms), "errors": self.errors,
                "recalls_per_s": round(calls / self.wall_s, 1) if self.wall_s else 0.0}


# --- the gateway process -------------------------------------------------------------
@contextmanager
def gateway(url: str, broker: str, workdir: Path) -> Iterator[str]:
    """One ``memoryd gateway`` process on the worker's broker; its base URL."""
    from memoryd.embedded._proc import free_port

    port = free_port()
    env = {**os.environ, "MEMORYD_DATABASE_URL": url, "MEMORYD_BROKER_URL": broker,
           "MEMORYD_DATA_DIR": str(workdir / "data")}
    log = (workdir / "gateway.log").open("ab")
    proc = subprocess.Popen([sys.executable, "-m", "memoryd", "gateway", "--no-migrate",
                             "--port", str(port)], env=env, stdin=subprocess.DEVNULL,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not _healthy(base):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"gateway did not start; see {workdir / 'gateway.log'}")
            time.sleep(0.2)
        yield base
    finally:
        bench_recall.stop_process_group(proc)
        log.close()


def _healthy(base: str) -> bool:
    with suppress(httpx.HTTPError):
        return httpx.get(f"{base}/healthz", timeout=1.0).status_code == 200
    return False


def agent_key(url: str, agents: Sequence[str]) -> str:
    """A read-only key for ``agents``, made as ``memoryd keys create`` makes it."""
    from memoryd.auth import keys, scope
    from memoryd.memory.store import MemoryStore

    store = MemoryStore(url)
    try:
        with store.session() as session:
            made = keys.create(session, name="bench", agents=tuple(agents), prefixes=(),
                               permissions=scope.permissions(read_only=True, admin=False),
                               expires_at=None)
    finally:
        store.close()
    return made.key


# --- measuring -----------------------------------------------------------------------
def timed_call(call: Callable[[], object]) -> float | None:
    start = time.perf_counter()
    try:
        call()
    except Exception:  # every failure counts as an error, whatever it is
        return None
    return (time.perf_counter() - start) * 1000


def http_caller(base: str, key: str, agent: str) -> Callable[[str], None]:
    """A recall over one keep-alive connection of this thread."""
    local = threading.local()

    def call(query: str) -> None:
        if not hasattr(local, "http"):
            local.http = httpx.Client(base_url=base, timeout=120.0,
                                      headers={"Authorization": f"Bearer {key}"})
        response = local.http.post(f"/v1/agents/{agent}/recall",
                                   json={"query": query, "limit": 10})
        if response.status_code != 200:
            raise RuntimeError(f"{response.status_code}: {response.text[:200]}")

    return call


def run_block(call: Callable[[str], None], queries: Sequence[str], concurrency: int,
              samples: Samples) -> None:
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        for ms in pool.map(lambda q: timed_call(lambda: call(q)), queries):
            samples.add(ms)
    samples.wall_s += time.perf_counter() - start


def compare(callers: dict[str, Callable[[str], None]], queries: Sequence[str],
            concurrency: int) -> dict[str, dict[str, Any]]:
    """Both paths over ``queries`` at ``concurrency`` callers, block by block."""
    for call in callers.values():  # the first calls open connections and load the model
        run_block(call, queries[:WARMUP], concurrency, Samples())
    samples = {name: Samples() for name in callers}
    size = max(1, len(queries) // BLOCKS)
    for number, start in enumerate(range(0, len(queries), size)):
        block = queries[start:start + size]
        order = list(callers) if number % 2 == 0 else list(reversed(callers))
        for name in order:
            run_block(callers[name], block, concurrency, samples[name])
    return {name: s.summary() for name, s in samples.items()}


def measure(url: str, agents: dict[str, str], queries: Sequence[str],
            concurrency: Sequence[int], workdir: Path, watch: Stopwatch) -> dict[str, Any]:
    from memoryd.client import MemoryClient

    key = agent_key(url, list(agents.values()))
    results: dict[str, Any] = {}
    with bench_recall.memory_worker(url, workdir) as broker, \
            gateway(url, broker, workdir) as base, \
            MemoryClient(broker_url=broker, timeout=120.0) as client:
        for label, agent in agents.items():
            callers: dict[str, Callable[[str], None]] = {
                "client": lambda q, a=agent: client.recall(a, q, limit=10),
                "http": http_caller(base, key, agent)}
            results[label] = {"agent": agent}
            for level in concurrency:
                with watch(f"{label} x{level}"):
                    results[label][str(level)] = compare(callers, queries, level)
                print(f"{label}, {level} callers: {results[label][str(level)]}",
                      file=sys.stderr)
    return results


# --- reporting -----------------------------------------------------------------------
def summary_table(report: dict[str, Any]) -> str:
    rows = []
    for label, block in report["results"].items():
        for level in report["args"]["concurrency"]:
            both = block[str(level)]
            for path in PATHS:
                s = both[path]
                rows.append([label, level, path, f"{s['p50']:.1f}", f"{s['p95']:.1f}",
                             f"{s['p99']:.1f}", f"{s['recalls_per_s']:.0f}", s["errors"]])
            extra = both["http"]["p95"] - both["client"]["p95"]
            rows.append(["", "", "http - client p95", "", f"{extra:+.1f}", "", "", ""])
    return format_table(["agent", "callers", "path", "p50 ms", "p95 ms", "p99 ms",
                         "recalls/s", "errors"], rows)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=int, default=1_000_000, help="memories in total")
    parser.add_argument("--queries", type=int, default=1000,
                        help="queries per path, agent and concurrency level")
    parser.add_argument("--concurrency", default=",".join(map(str, DEFAULT_CONCURRENCY)),
                        type=lambda v: [int(x) for x in v.split(",")],
                        help="caller counts, comma-separated")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--keep", nargs="?", type=Path, const=Path(), default=None,
                        help="keep the seeded cluster in DIR (default bench/out/scale-N), "
                             "reused by bench.recall and the next run")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = bench_recall.layout(args.scale)
    small = args.scale < 100_000
    keep = OUT_DIR / f"scale-{args.scale}" if args.keep == Path() else args.keep
    watch = Stopwatch()
    report: dict[str, Any] = {"benchmark": "gateway", "date": now_iso(),
                              "machine": machine_info(),
                              "args": {"scale": args.scale, "queries": args.queries,
                                       "concurrency": args.concurrency}}
    options = bench_recall.SMALL_SERVER if small else None
    with tempfile.TemporaryDirectory(prefix="memoryd-bench-gateway-") as tmp:
        workdir = let_service_user_in(Path(tmp))
        with watch("seed_or_open"), seeding.seeded_cluster(
                keep if keep is not None else workdir / "cluster", **sizes,
                load_options=options, serve_options=options) as (url, info):
            report["seed"] = info.to_json()
            bench_recall.index_large_agents(url)
            seeding.prewarm(url)
            agents = {f"big ({info.big_agent_size:,})": info.big_agent,
                      f"typical ({info.typical_agent_size:,})": info.typical_agent}
            report["results"] = measure(url, agents, seeding.queries(args.queries),
                                        args.concurrency, workdir, watch)
    report["timings_s"] = watch.rounded()
    print(summary_table(report))
    write_json(args.out, report)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
