"""Reads on a streaming replica: recall latency on the primary and on the replica, and
read-your-writes under a mixed load.

Starts an embedded primary, a hot standby made from it (``pg_basebackup``) and an
embedded Redis for the read-your-writes marks; fills ``--agents`` x ``--per-agent``
memories; then, in process:

- recall p50/p95 served by the primary (a store without replicas) and by the replica
  (a store with ``MEMORYD_DATABASE_REPLICA_URLS``, recalling agents without recent
  writes), ``--queries`` questions each, the two timed call by call in turn;
- ``--calls`` mixed calls across the agents, 80 % recall and 20 % store; after each
  recall the caller's own latest store is looked up by ``get`` and by ``list`` (newest
  first): a lookup that misses it is a missed own write (the target is 0), and where
  each read was served is counted.

    .venv/bin/python -m bench.replicas [--agents 50] [--per-agent 500] [--calls 10000]
                                       [--queries 200] [--out PATH]

Wrap full runs in ``flock /tmp/memoryd-bench.lock``. See bench/README.md.
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import scale as seeding
from bench.common import (
    OUT_DIR,
    REPO_ROOT,
    format_table,
    let_service_user_in,
    machine_info,
    now_iso,
    progress,
    start_standby,
    write_json,
)
from bench.recall import percentiles

DEFAULT_OUT = OUT_DIR / "replicas.json"
STORE_SHARE = 0.2
SEED_BATCH = 250


def commit() -> str:
    """The checked-out commit (``unknown`` outside a git checkout)."""
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                            capture_output=True, text=True, check=False)
    return result.stdout.strip() or "unknown"


@contextmanager
def replicated(workdir: Path) -> Iterator[tuple[Any, Any, str]]:
    """(primary, standby, Redis URL), all stopped afterwards."""
    from memoryd.embedded.postgres import EmbeddedPostgres
    from memoryd.embedded.redis import EmbeddedRedis

    primary = EmbeddedPostgres(workdir / "primary")
    redis = EmbeddedRedis(workdir / "redis")
    primary.ensure_running()
    standby = None
    try:
        redis.start()
        standby = start_standby(primary, workdir / "standby")
        yield primary, standby, redis.url
    finally:
        for server in (standby, primary, redis):
            if server is not None:
                server.stop()


def seed(store: Any, agents: Sequence[str], per_agent: int) -> None:
    """``per_agent`` distinct memories for each agent, stored in batches."""
    for index, agent in enumerate(progress(agents, desc="seeding")):
        texts = seeding.sentences(per_agent, seed=index)
        for start in range(0, per_agent, SEED_BATCH):
            store.store_many(agent, [{"content": t} for t in texts[start:start + SEED_BATCH]])


def caught_up(primary: Any, standby: Any, timeout: float = 120.0) -> None:
    with primary.connect_owner() as conn:
        target = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    deadline = time.monotonic() + timeout
    with standby.connect_owner() as conn:
        while not conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                               (target,)).fetchone()[0]:
            if time.monotonic() > deadline:
                raise RuntimeError("the standby did not catch up")
            time.sleep(0.05)


def recall_latency(stores: dict[str, Any], agents: Sequence[str],
                   questions: Sequence[str]) -> dict[str, list[float]]:
    """Each question recalled through each store in turn (the order alternating), so
    both targets are timed through the same moments of a machine whose speed drifts."""
    samples: dict[str, list[float]] = {name: [] for name in stores}
    names = list(stores)
    for i, question in enumerate(questions):
        for name in names if i % 2 == 0 else names[::-1]:
            started = time.perf_counter()
            stores[name].recall(agents[i % len(agents)], question)
            samples[name].append((time.perf_counter() - started) * 1000)
    return samples


def mixed(store: Any, agents: Sequence[str], calls: int, seed: int = 11) -> dict[str, Any]:
    """``calls`` recalls and stores; each recall followed by get and list of the agent's
    own latest store. Returns the misses and where the reads were served."""
    from memoryd.errors import NotFound

    rng = random.Random(seed)
    latest: dict[str, Any] = {}
    misses = {"get": 0, "list": 0}
    checked = stores = 0
    before = dict(store.replicas.served)
    questions = seeding.queries(200, seed=seed)
    for step in progress(range(calls), desc="mixed calls"):
        agent = rng.choice(agents)
        if agent not in latest or rng.random() < STORE_SHARE:
            latest[agent] = store.store(agent, f"{agent} noted item {step} at {time.time()}").id
            stores += 1
            continue
        store.recall(agent, rng.choice(questions))
        checked += 1
        try:
            store.get(agent, latest[agent])
        except NotFound:
            misses["get"] += 1
        if store.list(agent, limit=1).items[0].id != latest[agent]:
            misses["list"] += 1
    served = {where: n - before.get(where, 0) for where, n in store.replicas.served.items()}
    return {"calls": calls, "stores": stores, "recalls_checked": checked,
            "missed_own_writes": misses, "served": served}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.replicas", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--per-agent", type=int, default=500)
    parser.add_argument("--calls", type=int, default=10_000, help="mixed calls")
    parser.add_argument("--queries", type=int, default=200, help="recalls timed per target")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    from memoryd.config import Settings
    from memoryd.memory.store import MemoryStore
    from memoryd.process import SLOTS

    args = parse_args(argv)
    agents = [f"agent-{i:04d}" for i in range(args.agents)]
    report: dict[str, Any] = {"benchmark": "replicas", "date": now_iso(), "commit": commit(),
                              "machine": machine_info(), "args": vars(args) | {
                                  "out": str(args.out)}}
    workdir = let_service_user_in(Path(tempfile.mkdtemp(prefix="memoryd-bench-replicas-")))
    try:
        with replicated(workdir) as (primary, standby, redis_url):
            on_primary = MemoryStore(primary.url(), settings=Settings(database_replica_urls=""))
            on_primary.migrate()
            replicas = MemoryStore(primary.url(), settings=Settings(
                database_replica_urls=standby.url(), broker_url=redis_url))
            try:
                seed(replicas, agents, args.per_agent)
                caught_up(primary, standby)
                questions = seeding.queries(args.queries)
                targets = {"primary": on_primary, "replica": replicas}
                recall_latency(targets, agents, questions[:20])  # warm both
                before = dict(replicas.replicas.served)
                report["recall_ms"] = {
                    name: percentiles(samples) for name, samples
                    in recall_latency(targets, agents, questions).items()}
                report["recall_served"] = {k: v - before.get(k, 0)
                                           for k, v in replicas.replicas.served.items()}
                report["mixed"] = mixed(replicas, agents, args.calls)
            finally:
                on_primary.close()
                replicas.close()
                SLOTS["replicas"].clear()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(summary(report))
    write_json(args.out, report)
    print(f"wrote {args.out}")
    return 0 if sum(report["mixed"]["missed_own_writes"].values()) == 0 else 1


def summary(report: dict[str, Any]) -> str:
    args, mixed_run = report["args"], report["mixed"]
    rows = [(target, s["n"], s["p50"], s["p95"]) for target, s in report["recall_ms"].items()]
    lines = [f"replicas benchmark {report['date']} commit {report['commit']} on "
             f"{report['machine']['cpu']} ({report['machine']['cpus']} CPUs): "
             f"{args['agents']} agents x {args['per_agent']} memories",
             format_table(["recall served by", "n", "p50 ms", "p95 ms"], rows),
             f"mixed: {mixed_run['calls']} calls ({mixed_run['stores']} stores, "
             f"{mixed_run['recalls_checked']} recalls checked): missed own writes "
             f"{mixed_run['missed_own_writes']}; reads served {mixed_run['served']}"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
