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
FIRST_ROUND_NAME = "first round only: expand 0, context 0.15, no time boost"
# name -> settings overrides; "defaults" is what memoryd ships (the second round on).
# Weights keep their sum.
GRID: dict[str, dict[str, Any]] = {
    "defaults": {},
    # What memoryd shipped before the second round became the default: the baseline the
    # defaults are compared with fold by fold.
    FIRST_ROUND_NAME: {"recall_expand": 0, "recall_context_weight": 0.15,
                       "recall_time_boost": 0.0},
    "semantic 0.60 / keyword 0.15": {"weight_semantic": 0.60, "weight_keyword": 0.15},
    "semantic 0.40 / keyword 0.35": {"weight_semantic": 0.40, "weight_keyword": 0.35},
    "no recency": {"weight_recency": 0.0, "weight_semantic": 0.60},
    "no importance": {"weight_importance": 0.0, "weight_semantic": 0.60},
    "rrf fusion": {"recall_fusion": "rrf"},
    "context 0.15": {"recall_context_weight": 0.15},
    "context 0.45": {"recall_context_weight": 0.45},
    "context 0.60": {"recall_context_weight": 0.60},
    "context 0.75": {"recall_context_weight": 0.75},
    "no time boost": {"recall_time_boost": 0.0},
    "expand 0 (no second round)": {"recall_expand": 0},
    "expand 3": {"recall_expand": 3},
    "expand 10": {"recall_expand": 10},
    "candidates 3x the limit": {"recall_candidates": 3},
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
                      "first_round_held_out": round(mean(scores[FIRST_ROUND_NAME][held]), 4)})
    held = [f["held_out_recall"] for f in folds]
    defaults = [f["defaults_held_out"] for f in folds]
    first = [f["first_round_held_out"] for f in folds]
    gains = [d - f for d, f in zip(defaults, first, strict=True)]
    by_category = {locomo.CATEGORIES[c]: round(mean([r for r in held_out_rows if r[0] == c]), 4)
                   for c in sorted({c for c, _ in held_out_rows})}
    pooled = {name: round(mean([r for rows in per.values() for r in rows]), 4)
              for name, per in scores.items()}
    return {"folds": folds, "cv_mean": round(statistics.fmean(held), 4),
            "cv_worst": round(min(held), 4), "cv_spread": round(max(held) - min(held), 4),
            "defaults_mean": round(statistics.fmean(defaults), 4),
            "defaults_worst": round(min(defaults), 4),
            "first_round_mean": round(statistics.fmean(first), 4),
            "first_round_worst": round(min(first), 4),
            # The defaults against the first round alone, fold by fold (a paired comparison).
            "defaults_gain": {"mean": round(statistics.fmean(gains), 4),
                              "sd": round(statistics.stdev(gains), 4) if len(gains) > 1 else 0.0,
                              "folds_improved": sum(g > 0 for g in gains)},
            "held_out_by_category": by_category, "all_questions_by_config": pooled}


def report_text(cv: dict[str, Any]) -> str:
    folds = format_table(["held out", "chosen on the other four", "train r@10",
                          "held-out r@10", "defaults held-out", "first round only held-out"],
                         [[f["held_out"], f["chosen"], f["train_recall"],
                           f["held_out_recall"], f["defaults_held_out"],
                           f["first_round_held_out"]] for f in cv["folds"]])
    grid = format_table(["configuration", "recall@10, all questions"],
                        list(cv["all_questions_by_config"].items()))
    return (f"{folds}\nCV mean {cv['cv_mean']}, worst fold {cv['cv_worst']}, spread "
            f"{cv['cv_spread']}; defaults: mean {cv['defaults_mean']}, worst "
            f"{cv['defaults_worst']}; first round only: mean {cv['first_round_mean']}, worst "
            f"{cv['first_round_worst']}; the defaults' gain over it per fold "
            f"{cv['defaults_gain']}\nheld out by category: {cv['held_out_by_category']}\n"
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
