"""Recall latency at scale: p50/p95/p99 of ``recall`` on a store of a million memories.

Seeds (or reuses, with ``--keep``) a store of ``--scale`` memories over ``scale/1000``
agents, one of which holds a tenth of them (see ``bench/scale.py``), then times 1,000
generated questions for the big agent and for a typical 1,000-memory agent:

- in-process ``MemoryStore.recall``;
- through ``MemoryClient`` and one ``memoryd worker --queues memory`` (its default
  consumers, one per core) on an embedded Redis;
- the floor: the bare pgvector HNSW query (iterative scan) and the query embedding,
  timed separately, and their sum.

Two optional measurements, in-process recall only:

- ``--sweep``: agents of 100; 1,000; 3,000; 10,000; 30,000 and 100,000 memories
  (``--sweep-sizes``; sizes above the store's total are skipped with a note), the seeded
  typical and big agents where their sizes match and ``agent-sweep-<size>`` agents
  added once otherwise (kept with the cluster, listed in its ``sweep.json``); after
  ``index_agents``, each one's p50/p95/p99 and its p95 over the 1,000-memory agent's
  (target: <= 1.5 for every size);
- ``--neighbour``: a fresh 1,000-memory agent A measured, then a 100,000-memory agent B
  (``--neighbour-size``) stored and ``index_agents`` run as its hourly schedule would,
  then A again: A's p95 after over before (target: <= 1.2). Both agents are erased
  afterwards, and beforehand should an interrupted run have left them.

The extra agents' memories are drawn as the big agent's are (``bench/scale.py``).

    .venv/bin/python -m bench.recall [--scale N] [--queries N] [--out PATH] [--chart PATH]
                                     [--keep [DIR]] [--no-client]
                                     [--sweep] [--sweep-sizes N,N,...]
                                     [--neighbour] [--neighbour-size N]

Wrap heavy runs in ``flock /tmp/memoryd-bench.lock``. See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import text

from bench import scale as seeding
from bench.common import (
    OUT_DIR,
    Stopwatch,
    Timer,
    format_table,
    let_service_user_in,
    machine_info,
    now_iso,
    progress,
    timer,
    write_json,
)

DEFAULT_OUT = OUT_DIR / "recall.json"
DEFAULT_CHART = OUT_DIR / "recall.png"
TARGET_P95_MS = {"in-process": 15.0, "client": 30.0}
WARMUP = 20
BREAKDOWN_QUERIES = 200
SMALL_SERVER = {"shared_buffers": "256MB", "maintenance_work_mem": "512MB"}
# The size sweep: agents of these sizes, each one's p95 against the 1,000-memory agent's.
SWEEP_SIZES = (100, 1000, 3000, 10_000, 30_000, 100_000)
REFERENCE_SIZE = 1000
SWEEP_TARGET_RATIO = 1.5
# The neighbour case: a 1,000-memory agent before and after a large one arrives.
NEIGHBOUR_A_SIZE = 1000
NEIGHBOUR_B_SIZE = 100_000
NEIGHBOUR_TARGET_RATIO = 1.2
FLOOR_SQL = ("SELECT id FROM memories WHERE agent_id = :a "
             "ORDER BY embedding <=> CAST(:q AS vector) LIMIT 10")


def layout(scale: int) -> dict[str, int]:
    """Agents and sizes for ``scale`` memories: 1M -> 1,000 agents, one with 100,000,
    the queried typical one with 1,000."""
    return {"total": scale, "agents": max(3, scale // 1000),
            "big_agent_size": max(10, scale // 10),
            "typical_agent_size": max(5, min(1000, scale // 20))}


def percentiles(samples_ms: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(samples_ms, dtype=np.float64)
    if arr.size == 0:
        return {"n": 0}
    p50, p95, p99 = np.percentile(arr, [50, 95, 99])
    return {"n": int(arr.size), "p50": round(float(p50), 3), "p95": round(float(p95), 3),
            "p99": round(float(p99), 3), "mean": round(float(arr.mean()), 3),
            "max": round(float(arr.max()), 3)}


def timed(fn: Callable[[str], Any], items: Sequence[str], desc: str) -> list[float]:
    out = []
    for item in progress(items, desc=desc, unit="query"):
        with timer() as clock:
            fn(item)
        out.append(clock.ms)
    return out


# --- the measurements ------------------------------------------------------------
def measure_in_process(store: Any, agent: str, qs: Sequence[str]) -> list[float]:
    for q in qs[:WARMUP]:
        store.recall(agent, q)
    return timed(lambda q: store.recall(agent, q), qs, f"in-process {agent}")


def measure_floor(store: Any, agent: str, qs: Sequence[str]) -> dict[str, list[float]]:
    """The bare HNSW query and the query embedding, each timed alone, and their sum."""
    from memoryd.memory.embeddings import to_pgvector

    embed_ms, sql_ms, vectors = [], [], []
    for q in qs[:WARMUP]:
        store.query_embedder.embed([q])
    for q in progress(qs, desc=f"floor embed {agent}", unit="query"):
        with timer() as clock:
            vector = store.query_embedder.embed([q])[0]
        embed_ms.append(clock.ms)
        vectors.append(to_pgvector(vector))
    with store.engine.connect() as conn:
        conn.execute(text("SET hnsw.iterative_scan = relaxed_order"))
        # Planned with the agent id, as recall plans it: the agent's own index if it has one.
        conn.execute(text("SET plan_cache_mode = force_custom_plan"))
        statement = text(FLOOR_SQL)
        for v in vectors[:WARMUP]:
            conn.execute(statement, {"a": agent, "q": v}).all()
        for v in progress(vectors, desc=f"floor sql {agent}", unit="query"):
            with timer() as clock:
                conn.execute(statement, {"a": agent, "q": v}).all()
            sql_ms.append(clock.ms)
        conn.rollback()
    return {"embed": embed_ms, "sql": sql_ms,
            "sum": [a + b for a, b in zip(embed_ms, sql_ms, strict=True)]}


def measure_breakdown(store: Any, agent: str, qs: Sequence[str]) -> dict[str, Any]:
    """Where in-process recall spends its time, each part run alone (recall itself runs
    the keyword query while the query is embedded): embed, size check (and plan),
    keyword query (which also applies a large agent's settings), vector query (merged
    with the keyword hits, and reading the session context), rank, touch (reading the
    hits' whole rows, and building them), commit."""
    from memoryd.memory import ranking
    from memoryd.memory import recall as rc
    from memoryd.memory.embeddings import to_pgvector

    names = ("embed", "size_check", "keywords", "candidates", "rank", "touch", "commit")
    parts: dict[str, list[float]] = {name: [] for name in names}
    for q in progress(qs[:BREAKDOWN_QUERIES], desc=f"breakdown {agent}", unit="query"):
        clock = Timer()
        marks = [clock.seconds]
        vector = to_pgvector(store.query_embedder.embed([q])[0])
        marks.append(clock.seconds)
        with store.session() as session:
            plan = recall_plan(store, session, agent, q)
            marks.append(clock.seconds)
            hits = rc.keyword_hits(session, plan)
            marks.append(clock.seconds)
            found = rc.candidates(session, plan, vector, hits, store.model)
            marks.append(clock.seconds)
            scored = ranking.order(found, rc.adjacent(found), store.settings)[:10]
            marks.append(clock.seconds)
            ranking.hits(scored, rc.touch(session, agent, [s.id for s in scored]))
            marks.append(clock.seconds)
        marks.append(clock.seconds)
        for name, start, end in zip(names, marks[:-1], marks[1:], strict=True):
            parts[name].append((end - start) * 1000)
    return {name: percentiles(v) for name, v in parts.items()}


def recall_plan(store: Any, session: Any, agent: str, query: str, limit: int = 10) -> Any:
    """The plan ``store.recall`` makes for ``query`` (default filters)."""
    from memoryd.memory import recall as rc

    return rc.plan_for(store.recaller, session, agent, query, rc.Filters(), limit)


def measure_non_hot_touch(store: Any, agent: str, qs: Sequence[str],
                          count: int = 50) -> dict[str, float]:
    """What the access bump cost before migration 0003: the same rows updated through an
    indexed column (``updated_at``), i.e. non-HOT, re-inserted into every index including
    the HNSW graph. Rolled back."""
    out = []
    for q in qs[:count]:
        ids = [h.memory.id for h in store.recall(agent, q)]
        with store.engine.connect() as conn:
            with timer() as clock:
                conn.execute(text("UPDATE memories SET access_count = access_count + 1, "
                                  "updated_at = updated_at + interval '1 microsecond' "
                                  "WHERE agent_id = :a AND id = ANY(:ids)"),
                             {"a": agent, "ids": ids})
            out.append(clock.ms)
            conn.rollback()
    return percentiles(out)


def explain(store: Any, agent: str, query: str) -> dict[str, Any]:
    """EXPLAIN ANALYZE of recall's two queries: the plan texts and the indexes used."""
    from memoryd.memory import recall as rc
    from memoryd.memory.embeddings import to_pgvector

    vector = to_pgvector(store.query_embedder.embed([query])[0])
    with store.session() as session:
        plan = recall_plan(store, session, agent, query)
        lines = []
        if plan.keyword_statement is not None:
            lines = explain_analyze(session, plan.keyword_statement)
        hits = rc.keyword_hits(session, plan)
        lines += explain_analyze(session, plan.candidate_statement(vector, hits))
        session.rollback()
    used = sorted({word.strip('",') for line in lines for word in line.split()
                   if word.startswith(("ix_", "uq_", "memories_pkey"))})
    return {"large_agent": plan.vector_search == "hnsw", "indexes": used, "plan": lines}


def explain_analyze(session: Any, sql: Any) -> list[str]:
    """The lines of EXPLAIN (ANALYZE, BUFFERS) of ``sql`` (a ``recall_sql.Sql``)."""
    return [r[0] for r in sql.run(session, prefix="EXPLAIN (ANALYZE, BUFFERS) ").all()]


COVERAGE_QUERIES = 100


def keyword_coverage(store: Any, agent: str, qs: Sequence[str], k: int = 30) -> dict[str, Any]:
    """How much of the exhaustive keyword ranking the large-agent keyword side finds: for
    each query, the share of the top-``k`` scores over every memory of the agent holding
    a query term (same weights) that its bounded searches return."""
    from collections import Counter

    from memoryd.memory import keywords
    from memoryd.memory import recall as rc

    exhaustive = text(keywords.exhaustive_sql(rc.Filters().sql()))
    shares = []
    for q in progress(qs[:COVERAGE_QUERIES], desc=f"keyword coverage {agent}", unit="query"):
        words = keywords.query_words(q)
        if not words:
            continue
        plan = rc.build_plan(agent, q, rc.Filters(), k, vector_search="exact",
                             keyword_search="index", ef_search=store.settings.hnsw_ef_search)
        with store.session() as session:
            best = Counter(round(float(r), 5) for r in session.execute(
                exhaustive, {"agent_id": agent, "k": k, "words": words}).scalars())
            found = Counter(round(h.rank, 5) for h in rc.keyword_hits(session, plan))
        if best:
            shares.append(sum((best & found).values()) / sum(best.values()))
    return {"queries": len(shares), "k": k,
            "mean_share": round(float(np.mean(shares)), 3) if shares else None,
            "min_share": round(float(np.min(shares)), 3) if shares else None,
            "all_found": round(float(np.mean([x == 1 for x in shares])), 3) if shares else None}


# --- the size sweep and the neighbour case -----------------------------------------
def sweep_sizes(wanted: Sequence[int], total: int) -> tuple[list[int], list[dict[str, Any]]]:
    """The sizes to measure (``wanted`` and the reference size) and those skipped: an
    agent cannot hold more than the store's ``total`` memories."""
    sizes = sorted(set(wanted) | {REFERENCE_SIZE})
    skipped = [{"size": n, "note": f"above the store's {total:,} memories"}
               for n in sizes if n > total]
    return [n for n in sizes if n <= total], skipped


def measure_agents(url: str, agents: Sequence[str], qs: Sequence[str]
                   ) -> dict[str, dict[str, Any]]:
    """In-process recall of each agent: its percentiles, its memories counted, and whether
    it has an index of its own."""
    from memoryd.memory.store import MemoryStore

    store = MemoryStore(url)
    out = {}
    try:
        for agent in agents:
            out[agent] = {"memories": seeding.agent_memories(url, agent),
                          "own_index": seeding.has_own_index(url, agent),
                          "latency_ms": percentiles(measure_in_process(store, agent, qs))}
    finally:
        store.close()
    return out


def ratio(value: float | None, reference: float | None) -> float | None:
    return round(value / reference, 3) if value and reference else None


def run_sweep(url: str, data_dir: Path, info: seeding.SeedInfo, args: argparse.Namespace,
              watch: Stopwatch) -> dict[str, Any]:
    """The size sweep: an agent of each size in the store (added once), ``index_agents``,
    then each one's in-process recall and its p95 over the 1,000-memory agent's."""
    sizes, skipped = sweep_sizes(args.sweep_sizes, info.total)
    for item in skipped:
        print(f"sweep: skipping {item['size']:,} memories: {item['note']}", file=sys.stderr)
    with watch("sweep: add agents"):
        added = seeding.add_sweep_agents(data_dir, url, info, sizes)
    with watch("sweep: index_agents"):
        indexed = index_large_agents(url)
        seeding.settle(url)
    with watch("sweep: measure"):
        measured = measure_agents(url, [added[n]["agent"] for n in sizes],
                                  seeding.queries(args.queries))
    rows = [{"size": n, **added[n], **measured[added[n]["agent"]]} for n in sizes]
    reference = next((r["latency_ms"]["p95"] for r in rows if r["size"] == REFERENCE_SIZE),
                     None)
    for row in rows:
        row["p95_ratio"] = ratio(row["latency_ms"]["p95"], reference)
        row["meets_target"] = (None if row["p95_ratio"] is None
                               else row["p95_ratio"] <= SWEEP_TARGET_RATIO)
    return {"reference_size": REFERENCE_SIZE, "target_ratio": SWEEP_TARGET_RATIO,
            "agents": rows, "skipped": skipped, "index_agents": indexed}


def run_neighbour(url: str, data_dir: Path, info: seeding.SeedInfo,
                  args: argparse.Namespace, watch: Stopwatch) -> dict[str, Any]:
    """The neighbour case: agent A measured, agent B (``--neighbour-size``) stored and
    ``index_agents`` run, A measured again; both erased afterwards (and beforehand,
    should an interrupted run have left them)."""
    a, b = seeding.NEIGHBOUR_A, seeding.NEIGHBOUR_B
    qs = seeding.queries(args.queries)
    pool = seeding.seeded_pool(data_dir, info)
    for agent in (a, b):
        seeding.forget(url, agent)
    try:
        with watch("neighbour: A arrives"):
            seeding.add_neighbour(url, pool, a, NEIGHBOUR_A_SIZE)
            seeding.settle(url)
        with watch("neighbour: measure A before"):
            before = measure_agents(url, [a], qs)[a]
        with watch("neighbour: B arrives"):
            seeding.add_neighbour(url, pool, b, args.neighbour_size)
            indexed = index_large_agents(url)
            seeding.settle(url)
            b_state = {"memories": seeding.agent_memories(url, b),
                       "own_index": seeding.has_own_index(url, b)}
        with watch("neighbour: measure A after"):
            after = measure_agents(url, [a], qs)[a]
    finally:
        with watch("neighbour: erase A and B"):
            for agent in (b, a):
                seeding.forget(url, agent)
    p95_ratio = ratio(after["latency_ms"]["p95"], before["latency_ms"]["p95"])
    return {"agent_a": a, "a_memories": before["memories"], "agent_b": b,
            "b_memories": b_state["memories"], "b_own_index": b_state["own_index"],
            "before": before, "after": after,
            "index_agents": indexed, "p95_ratio": p95_ratio,
            "target_ratio": NEIGHBOUR_TARGET_RATIO,
            "meets_target": None if p95_ratio is None else p95_ratio <= NEIGHBOUR_TARGET_RATIO}


# --- the client path ---------------------------------------------------------------
@contextmanager
def memory_worker(url: str, workdir: Path) -> Iterator[str]:
    """An embedded Redis and one memory worker on it, as ``memoryd worker --queues
    memory`` runs by default (one consumer process per core); the broker URL."""
    from celery import Celery

    from memoryd.embedded.redis import EmbeddedRedis

    redis = EmbeddedRedis(workdir / "redis")
    broker = redis.start()
    env = dict(os.environ)  # MEMORYD_* recall settings apply to the worker too
    env.update({"MEMORYD_DATABASE_URL": url, "MEMORYD_BROKER_URL": broker,
                "MEMORYD_DATA_DIR": str(workdir / "data")})
    log = (workdir / "worker.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "memoryd", "worker", "--queues", "memory"], env=env,
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        app = Celery("bench-ping", broker=broker, set_as_current=False)
        app.conf.update(broker_connection_retry_on_startup=True, accept_content=["json"])
        waited = Timer()
        try:
            while not app.control.ping(timeout=0.5):
                if proc.poll() is not None or waited.seconds > 120:
                    raise RuntimeError(f"worker did not start; see {workdir / 'worker.log'}")
        finally:
            app.close()
        yield broker
    finally:
        stop_process_group(proc)
        log.close()
        redis.stop()


def stop_process_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM a process started with ``start_new_session``, SIGKILL after 20 s."""
    if proc.poll() is not None:
        return
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


@contextmanager
def worker_client(url: str, workdir: Path) -> Iterator[Any]:
    """A ``MemoryClient`` on ``memory_worker``."""
    from memoryd.client import MemoryClient

    with memory_worker(url, workdir) as broker, \
            MemoryClient(broker_url=broker, timeout=120.0) as client:
        yield client


def measure_client(client: Any, agent: str, qs: Sequence[str]) -> list[float]:
    for q in qs[:WARMUP]:
        client.recall(agent, q)
    return timed(lambda q: client.recall(agent, q), qs, f"client {agent}")


# --- reporting ---------------------------------------------------------------------
def write_chart(path: Path, report: dict[str, Any]) -> Path:
    """The latency bars of the measured agents; beside them, when measured, the size
    sweep and the neighbour case."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    extra = [(draw, report[key]) for key, draw in (("sweep", sweep_panel),
                                                    ("neighbour", neighbour_panel))
             if key in report]
    bars = len(latency_rows(report))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 1 + len(extra), squeeze=False,
                             figsize=(max(8, 1.3 * bars) + 6 * len(extra), 5),
                             width_ratios=[max(8, 1.3 * bars)] + [6] * len(extra))
    try:
        latency_panel(axes[0][0], report)
        for ax, (draw, data) in zip(axes[0][1:], extra, strict=True):
            draw(ax, data)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
    return path


def latency_rows(report: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(f"{agent_label}\n{path_name}", stats)
            for agent_label, block in report["results"].items()
            for path_name, stats in block["latency_ms"].items() if stats.get("n")]


def latency_panel(ax: Any, report: dict[str, Any]) -> None:
    rows = latency_rows(report)
    xs = np.arange(len(rows))
    width = 0.27
    for i, name in enumerate(("p50", "p95", "p99")):
        bars = ax.bar(xs + (i - 1) * width, [s[name] for _, s in rows], width, label=name)
        ax.bar_label(bars, fmt="%.1f", fontsize=6, padding=1)
    for label, target in TARGET_P95_MS.items():
        ax.axhline(target, linestyle="--", linewidth=0.8, color="grey")
        ax.text(len(rows) - 0.5, target, f"p95 target {label}", fontsize=7,
                ha="right", va="bottom")
    ax.set_xticks(xs, [label for label, _ in rows], fontsize=7)
    ax.set_ylabel("ms")
    ax.set_title(f"memoryd recall latency, {report['seed']['total']:,} memories "
                 f"({report['date'][:10]})")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)


def sweep_panel(ax: Any, sweep: dict[str, Any]) -> None:
    rows = sweep["agents"]
    sizes = [r["size"] for r in rows]
    for name in ("p50", "p95", "p99"):
        ax.plot(sizes, [r["latency_ms"][name] for r in rows], marker="o", label=name)
    reference = next((r["latency_ms"]["p95"] for r in rows
                      if r["size"] == sweep["reference_size"]), None)
    if reference:
        ax.axhline(reference * sweep["target_ratio"], linestyle="--", linewidth=0.8,
                   color="grey")
        ax.text(sizes[-1], reference * sweep["target_ratio"],
                f"p95 target: {sweep['target_ratio']}x the {sweep['reference_size']:,}'s",
                fontsize=7, ha="right", va="bottom")
    ax.set_xscale("log")
    ax.set_xlabel("the agent's memories")
    ax.set_ylabel("ms, in process")
    ax.set_title("size sweep", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def neighbour_panel(ax: Any, case: dict[str, Any]) -> None:
    names = ("p50", "p95", "p99")
    xs = np.arange(len(names))
    for i, (label, key) in enumerate((("A alone", "before"),
                                      (f"A after B ({case['b_memories']:,})", "after"))):
        bars = ax.bar(xs + (i - 0.5) * 0.4, [case[key]["latency_ms"][n] for n in names],
                      0.4, label=label)
        ax.bar_label(bars, fmt="%.1f", fontsize=6, padding=1)
    limit = case["before"]["latency_ms"]["p95"] * case["target_ratio"]
    ax.axhline(limit, linestyle="--", linewidth=0.8, color="grey")
    ax.text(len(names) - 0.5, limit, f"p95 target: {case['target_ratio']}x before",
            fontsize=7, ha="right", va="bottom")
    ax.set_xticks(xs, names)
    ax.set_ylabel("ms, in process")
    ax.set_title(f"neighbour case: A ({case['a_memories']:,}) before and after B arrives",
                 fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)


def summary_table(report: dict[str, Any]) -> str:
    rows = []
    for agent_label, block in report["results"].items():
        floor_p95 = block["latency_ms"].get("floor (embed+sql)", {}).get("p95")
        for name, stats in block["latency_ms"].items():
            if not stats.get("n"):
                continue
            target = TARGET_P95_MS.get(name)
            ratio = (stats["p95"] / floor_p95) if floor_p95 and name in TARGET_P95_MS else None
            rows.append([agent_label, name, stats["p50"], stats["p95"], stats["p99"],
                         target, None if ratio is None else round(ratio, 2),
                         "" if target is None else ("ok" if stats["p95"] <= target
                                                    else "MISSED")])
    return format_table(["agent", "path", "p50 ms", "p95 ms", "p99 ms", "p95 target",
                         "p95/floor", ""], rows, digits=2)


def breakdown_table(report: dict[str, Any]) -> str:
    rows = []
    for agent_label, block in report["results"].items():
        for part, stats in block["breakdown_ms"].items():
            rows.append([agent_label, part, stats.get("p50"), stats.get("p95")])
        rows.append([agent_label, "plan: indexes used", ", ".join(block["plan"]["indexes"]), ""])
        cover = block.get("keyword_coverage") or {}
        rows.append([agent_label, "keyword side: share of exhaustive top-30 found (mean, min)",
                     cover.get("mean_share"), cover.get("min_share")])
    return format_table(["agent", "in-process recall part", "p50 ms", "p95 ms"], rows,
                        digits=2)


def verdict(meets: bool | None) -> str:
    return "" if meets is None else ("ok" if meets else "MISSED")


def sweep_table(sweep: dict[str, Any]) -> str:
    rows = [[f"{r['size']:,}", r["agent"], r["memories"], "yes" if r["own_index"] else "no",
             r["latency_ms"]["p50"], r["latency_ms"]["p95"], r["latency_ms"]["p99"],
             r["p95_ratio"], verdict(r["meets_target"])] for r in sweep["agents"]]
    rows += [[f"{item['size']:,}", "skipped: " + item["note"]] + [None] * 7
             for item in sweep["skipped"]]
    return format_table(["size", "agent", "memories", "own index", "p50 ms", "p95 ms",
                         "p99 ms", f"p95 / {sweep['reference_size']:,}'s "
                                   f"(target <= {sweep['target_ratio']})", ""], rows, digits=2)


def neighbour_table(case: dict[str, Any]) -> str:
    rows = [[f"A ({case['a_memories']:,}) {when}", *(case[key]["latency_ms"][p]
                                                      for p in ("p50", "p95", "p99"))]
            for when, key in (("alone", "before"),
                              (f"after B ({case['b_memories']:,}) arrived", "after"))]
    rows.append([f"p95 after / before (target <= {case['target_ratio']})",
                 case["p95_ratio"], verdict(case["meets_target"]), None])
    return format_table(["neighbour case", "p50 ms", "p95 ms", "p99 ms"], rows, digits=2)


# --- main --------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.recall", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=int, default=1_000_000, help="memories in total")
    parser.add_argument("--queries", type=int, default=1000, help="queries per agent")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--chart", type=Path, default=DEFAULT_CHART)
    parser.add_argument("--keep", nargs="?", type=Path, const=Path(), default=None,
                        help="keep the seeded cluster in DIR (default bench/out/scale-N) "
                             "and reuse it on later runs")
    parser.add_argument("--no-client", action="store_true",
                        help="skip the MemoryClient + worker measurement")
    parser.add_argument("--real-big-embeddings", action="store_true",
                        help="embed every memory of the big agent (slow) instead of "
                             "borrowing pool vectors")
    parser.add_argument("--sweep", action="store_true",
                        help="also measure agents of several sizes in the store (added "
                             "once to a kept cluster), each p95 against the 1,000-memory "
                             "agent's")
    parser.add_argument("--sweep-sizes", type=sizes_arg, default=None, metavar="N,N,...",
                        help="the sweep's agent sizes (implies --sweep; default "
                             + ",".join(map(str, SWEEP_SIZES)) + ")")
    parser.add_argument("--neighbour", action="store_true",
                        help="also measure a 1,000-memory agent before and after a large "
                             "agent arrives")
    parser.add_argument("--neighbour-size", type=positive_int, default=None, metavar="N",
                        help="the arriving agent's memories (implies --neighbour; default "
                             f"{NEIGHBOUR_B_SIZE})")
    args = parser.parse_args(argv)
    args.sweep = args.sweep or args.sweep_sizes is not None
    args.sweep_sizes = args.sweep_sizes or SWEEP_SIZES
    args.neighbour = args.neighbour or args.neighbour_size is not None
    args.neighbour_size = args.neighbour_size or NEIGHBOUR_B_SIZE
    return args


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"not a positive whole number: {value!r}")
    return number


def sizes_arg(value: str) -> tuple[int, ...]:
    """``100,1000,3000`` -> (100, 1000, 3000)."""
    return tuple(positive_int(v.strip()) for v in value.split(","))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = layout(args.scale)
    small = args.scale < 100_000
    keep = args.keep
    if keep is not None and keep == Path():
        keep = OUT_DIR / f"scale-{args.scale}"
    workdir = let_service_user_in(Path(tempfile.mkdtemp(prefix="memoryd-bench-recall-")))
    data_dir = keep if keep is not None else workdir / "cluster"
    watch = Stopwatch()
    report = new_report(args)
    try:
        with watch("seed_or_open"), seeding.seeded_cluster(
                data_dir, **sizes, real_big_embeddings=args.real_big_embeddings,
                load_options=SMALL_SERVER if small else None,
                serve_options=SMALL_SERVER if small else None) as (url, info):
            report["seed"] = info.to_json()
            print(f"seeded store: {info.total:,} memories, {info.agents:,} agents; "
                  f"seeding took {info.seconds}", file=sys.stderr)
            with watch("index_agents"):
                report["index_agents"] = index_large_agents(url)
            with watch("prewarm"):
                seeding.prewarm(url)
            report["results"] = run_all(url, info, args, workdir, watch)
            if args.sweep:
                report["sweep"] = run_sweep(url, data_dir, info, args, watch)
            if args.neighbour:
                report["neighbour"] = run_neighbour(url, data_dir, info, args, watch)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report["timings_s"] = watch.rounded()
    print_tables(report)
    write_json(args.out, report)
    write_chart(args.chart, report)
    print(f"wrote {args.out} and {args.chart}")
    return 0


def new_report(args: argparse.Namespace) -> dict[str, Any]:
    """The report's header: the settings recall runs with, the machine, the arguments."""
    from memoryd.config import get_settings

    settings = get_settings()
    given: dict[str, Any] = {"scale": args.scale, "queries": args.queries,
                             "client": not args.no_client}
    if args.sweep:
        given["sweep_sizes"] = list(args.sweep_sizes)
    if args.neighbour:
        given["neighbour_size"] = args.neighbour_size
    return {"benchmark": "recall", "date": now_iso(),
            "settings": {"embed_threads": settings.embed_threads,
                         "recall_exact_threshold": settings.recall_exact_threshold,
                         "hnsw_ef_search": settings.hnsw_ef_search},
            "machine": machine_info(), "args": given}


def print_tables(report: dict[str, Any]) -> None:
    print(breakdown_table(report))
    print()
    print(summary_table(report))
    if "sweep" in report:
        print()
        print(sweep_table(report["sweep"]))
    if "neighbour" in report:
        print()
        print(neighbour_table(report["neighbour"]))


def index_large_agents(url: str) -> dict[str, Any]:
    """Bring a kept cluster to the current schema, then run the ``index_agents`` job as
    the hourly schedule would have (a no-op on a kept cluster that has its indexes): the
    big agent gets its own HNSW index and counted term frequencies."""
    from memoryd.memory.maintenance import run_job
    from memoryd.memory.store import MemoryStore

    store = MemoryStore(url)
    try:
        store.migrate()
        record = run_job(store, "index_agents", time_budget_s=3600)
    finally:
        store.close()
    print(f"index_agents: {record.stats}", file=sys.stderr)
    return record.as_dict()


def run_all(url: str, info: seeding.SeedInfo, args: argparse.Namespace, workdir: Path,
            watch: Stopwatch) -> dict[str, Any]:
    from memoryd.memory.store import MemoryStore

    qs = seeding.queries(args.queries)
    agents = {f"big ({info.big_agent_size:,})": info.big_agent,
              f"typical ({info.typical_agent_size:,})": info.typical_agent}
    results: dict[str, Any] = {}
    store = MemoryStore(url)
    try:
        for label, agent in agents.items():
            with watch(f"in-process {agent}"):
                plan = explain(store, agent, qs[0])
                inproc = measure_in_process(store, agent, qs)
                floor = measure_floor(store, agent, qs)
                breakdown = measure_breakdown(store, agent, qs)
                breakdown["touch_if_not_hot"] = measure_non_hot_touch(store, agent, qs)
                coverage = keyword_coverage(store, agent, qs)
            results[label] = {"agent": agent, "plan": plan, "breakdown_ms": breakdown,
                              "keyword_coverage": coverage,
                              "latency_ms": {
                                  "in-process": percentiles(inproc),
                                  "floor embed": percentiles(floor["embed"]),
                                  "floor sql (hnsw)": percentiles(floor["sql"]),
                                  "floor (embed+sql)": percentiles(floor["sum"]),
                              }}
    finally:
        store.close()
    if not args.no_client:
        with watch("client"), worker_client(url, workdir) as client:
            for label, agent in agents.items():
                results[label]["latency_ms"]["client"] = percentiles(
                    measure_client(client, agent, qs))
    for block in results.values():  # a fixed order for the table
        order = ("in-process", "client", "floor embed", "floor sql (hnsw)",
                 "floor (embed+sql)")
        block["latency_ms"] = {k: block["latency_ms"][k] for k in order
                               if k in block["latency_ms"]}
    return results


if __name__ == "__main__":
    raise SystemExit(main())
