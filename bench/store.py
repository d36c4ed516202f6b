"""Store throughput: memories per second through the thin client into ONE memory
worker (``python -m memoryd worker --queues memory --concurrency 2``), against the
raw in-process embedding throughput on the same texts.

    .venv/bin/python -m bench.store [--n N] [--out PATH.json] [--chart PATH.png]
                                    [--batch 100] [--agents 8]

It starts its own embedded PostgreSQL and Redis and its own worker subprocess, so
it needs nothing running. Timing runs should not overlap: wrap them in
``flock /tmp/memoryd-bench.lock``. See bench/README.md ("Store throughput").
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    OUT_DIR,
    Timer,
    embedded_postgres,
    format_table,
    let_service_user_in,
    machine_info,
    now_iso,
    progress,
    progress_bar,
    timer,
    write_json,
)

DEFAULT_OUT = OUT_DIR / "store.json"
DEFAULT_CHART = OUT_DIR / "store.png"
CONCURRENCY = 2
DEFAULT_STORE_BATCH = 64  # the worker's MEMORYD_STORE_BATCH_SIZE
TARGET_RATE = 250.0  # memories/s
TARGET_RATIO = 0.75  # of the raw embedding throughput
RAW_BATCH_SIZES = (16, 32, 64, 128)
RAW_SWEEP_TEXTS = 512
WORKER_START_TIMEOUT_S = 120.0
RESULT_TIMEOUT_S = 300.0

# --- a deterministic corpus of distinct, realistic sentences ---------------------------
_SUBJECTS = ("The user", "My manager", "Our client", "The team lead", "Alice", "Bob",
             "The customer", "My sister", "The new intern", "Our landlord", "Dr. Patel",
             "The support engineer")
_VERBS = ("prefers", "asked about", "complained about", "wants to try", "recommended",
          "is worried about", "mentioned", "scheduled a call about", "keeps forgetting",
          "is excited about", "decided against", "needs help with")
_OBJECTS = ("dark mode in the editor", "the quarterly budget review",
            "a vegetarian restaurant near the office", "the flight to Lisbon",
            "renewing the car insurance", "the database migration plan",
            "learning Spanish with a tutor", "the broken dishwasher", "a standing desk",
            "the marathon training schedule", "moving the backup to another region",
            "the birthday party for their daughter", "switching to a cheaper phone plan",
            "the slow login page", "a weekend hiking trip", "the new pricing page")
_WHENS = ("this morning", "last Tuesday", "before the holidays", "during the standup",
          "on the phone yesterday", "in last week's retro", "over lunch", "at the offsite",
          "late on Friday", "in an email on Monday")
_TAILS = ("and said it matters a lot", "because the deadline moved to next month",
          "but only if it stays within budget", "and wants a reminder in two weeks",
          "since the old setup kept failing", "after reading a long article about it",
          "and asked me to keep it private", "so we should follow up soon", "", "",
          "and mentioned it twice")


def make_texts(n: int, seed: int = 7) -> list[str]:
    """``n`` distinct sentences of about 10 to 25 words, the same for the same seed."""
    rng = random.Random(seed)
    seen: set[str] = set()
    texts: list[str] = []
    while len(texts) < n:
        tail = rng.choice(_TAILS)
        parts = [rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS),
                 rng.choice(_WHENS)] + ([tail] if tail else [])
        text = " ".join(parts)
        if text in seen:
            text = f"{text}, note {len(texts) + 1}"
        seen.add(text)
        texts.append(text + ".")
    return texts


# --- services -----------------------------------------------------------------------
class Worker:
    """One ``python -m memoryd worker`` subprocess in its own process group."""

    def __init__(self, env: dict[str, str], log_path: Path, concurrency: int) -> None:
        self.broker_url = env["MEMORYD_BROKER_URL"]
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "--log-level", "WARNING", "worker",
             "--queues", "memory", "--concurrency", str(concurrency)],
            env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)

    def wait_ready(self, timeout: float = WORKER_START_TIMEOUT_S) -> None:
        from celery import Celery

        app = Celery("memoryd-bench-ping", broker=self.broker_url, set_as_current=False)
        app.conf.update(broker_connection_retry_on_startup=True, accept_content=["json"])
        waited = Timer()
        try:
            while not app.control.ping(timeout=0.5):
                if self.proc.poll() is not None or waited.seconds > timeout:
                    raise RuntimeError(f"worker did not start:\n{self.log_tail()}")
        finally:
            app.close()

    def log_tail(self, chars: int = 4000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:]
        return ""

    def stop(self, grace: float = 20.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._log.close()


@contextlib.contextmanager
def services(tmp: Path, concurrency: int, store_batch: int) -> Iterator[str]:
    """PostgreSQL, Redis and one memory worker; yields the broker URL."""
    from memoryd.embedded.redis import EmbeddedRedis
    from memoryd.memory.store import MemoryStore

    with embedded_postgres("memoryd-bench-store-") as pg_url:
        store = MemoryStore(pg_url)
        try:
            store.migrate()
        finally:
            store.engine.dispose()
        redis = EmbeddedRedis(tmp / "redis")
        broker = redis.start()
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
        env.update({"MEMORYD_DATABASE_URL": pg_url, "MEMORYD_BROKER_URL": broker,
                    "MEMORYD_DATA_DIR": str(tmp / "data"),
                    "MEMORYD_STORE_BATCH_SIZE": str(store_batch)})
        worker = Worker(env, tmp / "worker.log", concurrency)
        try:
            worker.wait_ready()
            yield broker
        finally:
            try:
                worker.stop()
            finally:
                redis.stop()


# --- measurements -------------------------------------------------------------------
def raw_sweep(texts: Sequence[str]) -> dict[str, float]:
    """Texts per second of the embedder alone (this process, all cores) per batch size,
    on a sample of ``texts``."""
    from memoryd.memory.embeddings import MiniLMEmbedder

    sample = list(texts[:RAW_SWEEP_TEXTS])
    sweep: dict[str, float] = {}
    for size in progress(RAW_BATCH_SIZES, desc="raw embedding sweep", unit="setting"):
        embedder = MiniLMEmbedder(threads=0, batch_size=size)
        embedder.embed(sample[:size])  # warm-up
        with timer() as clock:
            embedder.embed(sample)
        sweep[str(size)] = round(len(sample) / clock.seconds, 1)
    return sweep


def raw_pass(texts: Sequence[str], batch_size: int, desc: str) -> float:
    """Seconds to embed all ``texts`` in this process on all cores."""
    from memoryd.memory.embeddings import MiniLMEmbedder

    embedder = MiniLMEmbedder(threads=0, batch_size=batch_size)
    embedder.embed(list(texts[:batch_size]))
    seconds = 0.0
    step = max(batch_size, 256)
    for start_at in progress(range(0, len(texts), step), desc=desc, unit="batch"):
        chunk = list(texts[start_at:start_at + step])
        with timer() as clock:
            embedder.embed(chunk)
        seconds += clock.seconds
    return seconds


def raw_embedding(sweep: dict[str, float], seconds: Sequence[float], n: int) -> dict[str, Any]:
    """The raw embedding result: the best batch size, and the faster of the passes
    (one before and one after the worker ran, so the ratios are not flattered by a
    slow moment of the machine)."""
    best = min(seconds)
    return {"threads": "all", "cores": os.cpu_count(),
            "batch_size": max(RAW_BATCH_SIZES, key=lambda s: sweep[str(s)]),
            "sweep_per_s": sweep, "passes_per_s": [round(n / s, 1) for s in seconds],
            "seconds": round(best, 3), "per_s": round(n / best, 1)}


def warm_up(client: Any, concurrency: int) -> None:
    """Load the embedder and reach the database in every pool child."""
    agent = f"warmup-{uuid.uuid4()}"
    handles = [client.store(agent, f"warm-up memory number {i} for the store benchmark",
                            wait=False) for i in range(8 * concurrency)]
    for handle in handles:
        handle.get(timeout=WORKER_START_TIMEOUT_S)
    client.store_many(agent, [{"content": f"warm-up batch item {i}"} for i in range(32)],
                      timeout=WORKER_START_TIMEOUT_S)


def run_single(client: Any, texts: Sequence[str], agents: Sequence[str]) -> dict[str, Any]:
    """Every text as its own ``client.store(..., wait=False)``, then wait for all."""
    with timer() as clock:
        handles = [client.store(agents[i % len(agents)], text, wait=False)
                   for i, text in enumerate(texts)]
        sent = clock.seconds
        stored = 0
        with progress_bar(len(handles), desc="store (single)", unit="mem") as bar:
            for handle in handles:
                stored += bool(handle.get(timeout=RESULT_TIMEOUT_S).stored)
                bar.update(1)
    seconds = clock.seconds
    return {"calls": len(texts), "stored": stored, "enqueue_seconds": round(sent, 3),
            "seconds": round(seconds, 3), "per_s": round(len(texts) / seconds, 1)}


def run_many(client: Any, texts: Sequence[str], agents: Sequence[str],
             batch: int) -> dict[str, Any]:
    """The texts in ``store_many`` calls of ``batch`` items (all enqueued, then awaited)."""
    with timer() as clock:
        handles = [client.store_many(agents[(i // batch) % len(agents)],
                                     [{"content": t} for t in texts[i:i + batch]], wait=False)
                   for i in range(0, len(texts), batch)]
        stored = 0
        with progress_bar(len(texts), desc=f"store_many ({batch})", unit="mem") as bar:
            for handle in handles:
                results = handle.get(timeout=RESULT_TIMEOUT_S)
                stored += sum(r.stored for r in results)
                bar.update(len(results))
    seconds = clock.seconds
    return {"calls": len(handles), "batch": batch, "stored": stored,
            "seconds": round(seconds, 3), "per_s": round(len(texts) / seconds, 1)}


def worker_settings(store_batch: int) -> dict[str, Any]:
    """What the worker runs with (for the record)."""
    cores = os.cpu_count() or 1
    return {"concurrency": CONCURRENCY, "queues": "memory", "store_batch_size": store_batch,
            "embed_threads_per_process": os.environ.get(
                "MEMORYD_EMBED_THREADS", str(max(1, cores // CONCURRENCY)))}


# --- reporting ----------------------------------------------------------------------
def write_chart(path: Path, report: dict[str, Any]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ["raw embedding", "client.store", f"store_many({report['store_many']['batch']})"]
    rates = [report["raw_embedding"]["per_s"], report["single"]["per_s"],
             report["store_many"]["per_s"]]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    try:
        bars = ax.bar(names, rates, color=["#888888", "#1f77b4", "#2ca02c"])
        ax.bar_label(bars, fmt="%.0f", padding=2)
        ax.axhline(TARGET_RATE, color="red", linestyle="--", linewidth=1,
                   label=f"target {TARGET_RATE:.0f}/s")
        ax.axhline(TARGET_RATIO * rates[0], color="orange", linestyle=":", linewidth=1,
                   label=f"{TARGET_RATIO:.0%} of raw")
        ax.set_ylabel("memories / s")
        ax.set_title(f"Store throughput, N={report['n']}, 1 worker x {CONCURRENCY} processes, "
                     f"{report['machine']['cpus']} cores", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
    return path


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.store", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=3000, help="memories per phase")
    parser.add_argument("--batch", type=int, default=100, help="items per store_many call")
    parser.add_argument("--agents", type=int, default=8, help="distinct agents")
    parser.add_argument("--store-batch", type=int, default=DEFAULT_STORE_BATCH,
                        help="the worker's MEMORYD_STORE_BATCH_SIZE (1 = no batching)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--chart", type=Path, default=DEFAULT_CHART)
    args = parser.parse_args(argv)
    if min(args.n, args.batch, args.agents, args.store_batch) < 1:
        parser.error("--n, --batch, --agents and --store-batch must be positive")
    return args


def against_targets(block: dict[str, Any], raw_rate: float) -> dict[str, Any]:
    """``block`` (a path's result) with its ratio to the raw embedding rate and whether it
    meets both targets."""
    ratio = round(block["per_s"] / raw_rate, 3)
    return {**block, "ratio_to_raw": ratio,
            "meets_target": bool(block["per_s"] >= TARGET_RATE and ratio >= TARGET_RATIO)}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The raw embedding passes around the two worker phases; their results."""
    from memoryd.client import MemoryClient

    texts = make_texts(2 * args.n)
    single_texts, many_texts = texts[:args.n], texts[args.n:]
    run_id = uuid.uuid4().hex[:8]
    single_agents = [f"bench-single-{run_id}-{i}" for i in range(args.agents)]
    many_agents = [f"bench-many-{run_id}-{i}" for i in range(args.agents)]

    sweep = raw_sweep(single_texts)
    raw_batch = max(RAW_BATCH_SIZES, key=lambda s: sweep[str(s)])
    raw_seconds = [raw_pass(single_texts, raw_batch, "raw embedding (before)")]
    with tempfile.TemporaryDirectory(prefix="memoryd-bench-store-") as tmp_dir, \
            services(let_service_user_in(Path(tmp_dir)), CONCURRENCY, args.store_batch) as broker, \
            MemoryClient(broker_url=broker, timeout=RESULT_TIMEOUT_S) as client:
        warm_up(client, CONCURRENCY)
        single = run_single(client, single_texts, single_agents)
        many = run_many(client, many_texts, many_agents, args.batch)
    raw_seconds.append(raw_pass(single_texts, raw_batch, "raw embedding (after)"))
    raw = raw_embedding(sweep, raw_seconds, args.n)
    return {"raw_embedding": raw, "single": against_targets(single, raw["per_s"]),
            "store_many": against_targets(many, raw["per_s"])}


def summary_rows(report: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The printed table's rows: path, memories, seconds, per s, of raw, target met."""
    n, raw, single, many = (report["n"], report["raw_embedding"], report["single"],
                            report["store_many"])
    return [("raw embedding (in-process, all cores)", n, raw["seconds"], raw["per_s"], 1.0, ""),
            ("client.store, wait=False", n, single["seconds"], single["per_s"],
             single["ratio_to_raw"], "yes" if single["meets_target"] else "no"),
            (f"client.store_many, {many['batch']}/call", n, many["seconds"], many["per_s"],
             many["ratio_to_raw"], "yes" if many["meets_target"] else "no")]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results = measure(args)
    report = {
        "benchmark": "store", "date": now_iso(), "machine": machine_info(), "n": args.n,
        "agents": args.agents, "worker": worker_settings(args.store_batch),
        "target": {"per_s": TARGET_RATE, "ratio_to_raw": TARGET_RATIO}, **results,
    }
    print(format_table(["path", "memories", "seconds", "per s", "of raw", "target"],
                       summary_rows(report), digits=2))
    raw = report["raw_embedding"]
    print(f"raw embedding batch sweep (per s): {raw['sweep_per_s']}; "
          f"passes before/after the worker (per s): {raw['passes_per_s']}")
    write_json(args.out, report)
    write_chart(args.chart, report)
    print(f"wrote {args.out} and {args.chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
