"""LoCoMo recall@10 by leave-one-conversation-out cross-validation on the dev split.

The dev split's five conversations are stored once (as bench/locomo.py stores them);
every question is then recalled once under each configuration of ``GRID`` (ranking
weights, conversation-context share, fusion). For each fold, the configuration with the
best recall@10 over the other four conversations' questions is chosen and scored on the
held-out conversation. Reported: each fold's choice and scores, the mean and the worst
held-out fold, the same for the shipped defaults, and the held-out score by category.
A constant is worth changing only if the cross-validated mean moves by more than the
spread between folds.

    .venv/bin/python -m bench.locomo_cv [--data PATH] [--out PATH] [--limit-samples N]

See bench/README.md ("LoCoMo cross-validation").
"""

from __future__ import annotations

import argparse
import statistics
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import locomo
from bench.common import (
    OUT_DIR,
    CachingEmbedder,
    Stopwatch,
    embedded_postgres,
    format_table,
    machine_info,
    now_iso,
    progress_bar,
    write_json,
)

DEFAULT_OUT = OUT_DIR / "locomo_cv.json"
K = 10
SECOND_ROUND_NAME = "second round: expand 5, context 0.30, time boost 0.20"
# name -> settings overrides; "defaults" is what memoryd ships. Weights keep their sum.
SECOND_ROUND = {"recall_expand": 5, "recall_context_weight": 0.30, "recall_time_boost": 0.20}
GRID: dict[str, dict[str, Any]] = {
    "defaults": {},
    # The second round with the context share and the named-date boost it works with: the
    # best retrieval, an option (it costs recall latency; bench/README.md).
    SECOND_ROUND_NAME: SECOND_ROUND,
    "semantic 0.60 / keyword 0.15": {"weight_semantic": 0.60, "weight_keyword": 0.15},
    "semantic 0.40 / keyword 0.35": {"weight_semantic": 0.40, "weight_keyword": 0.35},
    "no recency": {"weight_recency": 0.0, "weight_semantic": 0.60},
    "no importance": {"weight_importance": 0.0, "weight_semantic": 0.60},
    "rrf fusion": {"recall_fusion": "rrf"},
    "context 0.30": {"recall_context_weight": 0.30},
    "time boost 0.20": {"recall_time_boost": 0.20},
    "second round, expand 10": {**SECOND_ROUND, "recall_expand": 10},
    "second round, context 0.45": {**SECOND_ROUND, "recall_context_weight": 0.45},
    "second round, no time boost": {**SECOND_ROUND, "recall_time_boost": 0.0},
}


def score_grid(samples: list[locomo.Sample], database_url: str,
               watch: Stopwatch) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """config -> sample id -> [(category, recall@10)] for every question."""
    from memoryd.config import get_settings
    from memoryd.memory.embeddings import get_embedder, get_query_embedder
    from memoryd.memory.store import MemoryStore

    embedder = CachingEmbedder(get_embedder())
    query_embedder = CachingEmbedder(get_query_embedder())
    base = MemoryStore(database_url, embedder=embedder, query_embedder=query_embedder)
    base.migrate()
    locomo.embed_corpus(samples, embedder, query_embedder, watch)
    agents: list[str] = []
    stored = locomo.store_all(base, samples, uuid.uuid4().hex[:8], agents, watch)
    scores: dict[str, dict[str, list[tuple[int, float]]]] = {}
    questions = sum(len(s.questions) for s in samples)
    for name, overrides in GRID.items():
        settings = get_settings().model_copy(update=overrides)
        store = MemoryStore(engine=base.engine, embedder=embedder,
                            query_embedder=query_embedder, settings=settings)
        per_sample: dict[str, list[tuple[int, float]]] = {}
        with watch(f"recall {name}"), progress_bar(questions, desc=name, unit="q") as bar:
            for one in stored:
                rows = per_sample.setdefault(one.sample.sample_id, [])
                for q in one.sample.questions:
                    hits = store.recall(one.agent, q.question, limit=K)
                    ranked = locomo.memory_ranking(hits, one.owners)
                    rows.append((q.category,
                                 locomo.score_ranking(ranked, q.evidence)[f"recall@{K}"]))
                    bar.update(1)
        scores[name] = per_sample
    for agent in agents:
        base.forget_agent(agent)
    base.engine.dispose()
    return scores


def mean(rows: Sequence[tuple[int, float]]) -> float:
    return statistics.fmean(score for _, score in rows) if rows else 0.0


def cross_validate(scores: dict[str, dict[str, list[tuple[int, float]]]]) -> dict[str, Any]:
    """Leave one conversation out: choose on the other four, score the fifth."""
    samples = sorted(next(iter(scores.values())))
    folds, held_out_rows = [], []
    for held in samples:
        train = {name: [r for s in samples if s != held for r in per[s]]
                 for name, per in scores.items()}
        chosen = max(GRID, key=lambda name: (mean(train[name]), name == "defaults"))
        held_out_rows += scores[chosen][held]
        folds.append({"held_out": held, "chosen": chosen,
                      "train_recall": round(mean(train[chosen]), 4),
                      "held_out_recall": round(mean(scores[chosen][held]), 4),
                      "defaults_held_out": round(mean(scores["defaults"][held]), 4),
                      "second_round_held_out": round(mean(scores[SECOND_ROUND_NAME][held]), 4)})
    held = [f["held_out_recall"] for f in folds]
    defaults = [f["defaults_held_out"] for f in folds]
    second = [f["second_round_held_out"] for f in folds]
    gains = [s - d for s, d in zip(second, defaults, strict=True)]
    by_category = {locomo.CATEGORIES[c]: round(mean([r for r in held_out_rows if r[0] == c]), 4)
                   for c in sorted({c for c, _ in held_out_rows})}
    pooled = {name: round(mean([r for rows in per.values() for r in rows]), 4)
              for name, per in scores.items()}
    return {"folds": folds, "cv_mean": round(statistics.fmean(held), 4),
            "cv_worst": round(min(held), 4), "cv_spread": round(max(held) - min(held), 4),
            "defaults_mean": round(statistics.fmean(defaults), 4),
            "defaults_worst": round(min(defaults), 4),
            "second_round_mean": round(statistics.fmean(second), 4),
            "second_round_worst": round(min(second), 4),
            # The second round against the defaults, fold by fold (a paired comparison).
            "second_round_gain": {"mean": round(statistics.fmean(gains), 4),
                              "sd": round(statistics.stdev(gains), 4) if len(gains) > 1 else 0.0,
                              "folds_improved": sum(g > 0 for g in gains)},
            "held_out_by_category": by_category, "all_questions_by_config": pooled}


def report_text(cv: dict[str, Any]) -> str:
    folds = format_table(["held out", "chosen on the other four", "train r@10",
                          "held-out r@10", "defaults held-out", "second round held-out"],
                         [[f["held_out"], f["chosen"], f["train_recall"],
                           f["held_out_recall"], f["defaults_held_out"],
                           f["second_round_held_out"]] for f in cv["folds"]])
    grid = format_table(["configuration", "recall@10, all questions"],
                        list(cv["all_questions_by_config"].items()))
    return (f"{folds}\nCV mean {cv['cv_mean']}, worst fold {cv['cv_worst']}, spread "
            f"{cv['cv_spread']}; defaults: mean {cv['defaults_mean']}, worst "
            f"{cv['defaults_worst']}; second round: mean {cv['second_round_mean']}, worst "
            f"{cv['second_round_worst']}, against the defaults per fold "
            f"{cv['second_round_gain']}\nheld out by category: {cv['held_out_by_category']}\n"
            f"{grid}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.locomo_cv", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=locomo.DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--limit-samples", type=int, default=None, metavar="N")
    args = parser.parse_args(argv)
    samples = locomo.load_samples(args.data, args.limit_samples)
    watch = Stopwatch()
    with embedded_postgres() as url:
        scores = score_grid(samples, url, watch)
    cv = cross_validate(scores)
    print(report_text(cv))
    write_json(args.out, {"benchmark": "locomo_cv", "date": now_iso(),
                          "machine": machine_info(), "data": args.data.name,
                          "grid": GRID, **cv, "timings_s": watch.rounded()})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
