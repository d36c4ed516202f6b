"""Moving a store to another embedding model: memories per second of the ``reembed``
job against raw embedding, and recall latency while it runs.

N memories of several agents are stored with the int8 rendition of MiniLM (the "old"
model); then a store whose model is the wheel's float MiniLM runs ``reembed`` to
completion while a thread recalls one of the agents back to back (``--no-recall``: the
job alone). Reported: the job's memories/s, the raw float embedding rate of the same
texts, and recall p50/p95 during the move.

    .venv/bin/python -m bench.reembed [--n N] [--agents A] [--out PATH]

See bench/README.md ("Re-embedding a store").
"""

from __future__ import annotations

import argparse
import statistics
import threading
from collections.abc import Sequence
from pathlib import Path

from bench.common import (
    OUT_DIR,
    embedded_postgres,
    format_table,
    machine_info,
    now_iso,
    timer,
    write_json,
)

DEFAULT_OUT = OUT_DIR / "reembed.json"
TOPICS = ("tea", "the deploy", "the cat", "the river path", "the database", "the offsite")


def texts(n: int) -> list[str]:
    """``n`` distinct sentences."""
    return [f"Note {i}: the user talked about {TOPICS[i % len(TOPICS)]} on day {i % 97}, "
            f"item {i}." for i in range(n)]


def run(n: int, agents: int, url: str, *, recall: bool = True) -> dict[str, object]:
    from memoryd.memory.embeddings import MiniLMEmbedder, get_embedder
    from memoryd.memory.maintenance import run_to_completion
    from memoryd.memory.store import MemoryStore

    old = MemoryStore(url, embedder=MiniLMEmbedder(int8=True))
    old.migrate()
    corpus = texts(n)
    for a in range(agents):
        old.store_many(f"agent-{a}", [{"content": t} for t in corpus[a::agents]])
    new = MemoryStore(url, embedder=get_embedder())
    latencies: list[float] = []
    done = threading.Event()

    def recall_meanwhile() -> None:
        while not done.is_set():
            new.store_models.clear()  # see every change of the agent's models at once
            with timer() as t:
                new.recall("agent-0", "what did the user say about the database?")
            latencies.append(t.ms)

    reader = threading.Thread(target=recall_meanwhile if recall else done.wait)
    reader.start()
    with timer() as job:
        record = run_to_completion(new, "reembed")
    done.set()
    reader.join()
    with timer() as raw:
        get_embedder().embed(corpus)
    old.close()
    new.close()
    cuts = statistics.quantiles(latencies, n=20) if len(latencies) > 1 else [0.0] * 19
    return {"memories": n, "agents": agents, "reembedded": record.stats.get("reembedded"),
            "job_seconds": round(job.seconds, 2), "job_per_s": round(n / job.seconds, 1),
            "raw_embedding_per_s": round(n / raw.seconds, 1),
            "recalls_during": len(latencies),
            "recall_p50_ms": round(statistics.median(latencies), 2) if latencies else None,
            "recall_p95_ms": round(cuts[18], 2) if latencies else None}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000, help="memories to move")
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--no-recall", action="store_true",
                        help="the job alone, without recalls running beside it")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    with embedded_postgres() as url:
        result = run(args.n, args.agents, url, recall=not args.no_recall)
    print(format_table(["memories", "job s", "job per s", "raw embedding per s",
                        "recalls during", "recall p50 ms", "recall p95 ms"],
                       [[result["memories"], result["job_seconds"], result["job_per_s"],
                         result["raw_embedding_per_s"], result["recalls_during"],
                         result["recall_p50_ms"], result["recall_p95_ms"]]]))
    write_json(args.out, {"benchmark": "reembed", "date": now_iso(),
                          "machine": machine_info(), "args": vars(args) | {"out": str(args.out)},
                          "results": result})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
