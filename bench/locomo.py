"""LoCoMo retrieval benchmark: does memoryd's recall find the dialogue turns that
answer a question?

Every turn of every conversation becomes one memory of that conversation's agent;
each question (categories 1-4) is recalled and scored against its evidence turns.
BM25 and plain MiniLM cosine run over the same turns and questions as baselines.

    .venv/bin/python -m bench.locomo [--data PATH] [--out PATH.json] [--chart PATH.png]
                                     [--limit-samples N] [--database-url URL]
                                     [--maintain [--per-job] [--reset-access] [--jobs a,b]]

``--maintain`` asks every question before and after every scheduled maintenance job has
run for each conversation's agent (``bench.locomo_maintain``).

Recall settings come from the usual ``MEMORYD_*`` variables (e.g.
``MEMORYD_RECALL_FUSION=rrf``) and are recorded in the JSON. See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import statistics
import sys
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import (
    OUT_DIR,
    CachingEmbedder,
    Stopwatch,
    embedded_postgres,
    format_table,
    machine_info,
    now_iso,
    progress_bar,
    timer,
    write_bar_charts,
    write_json,
)

DEFAULT_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "bench" / "locomo-dev.json"
DEFAULT_OUT = OUT_DIR / "locomo.json"
DEFAULT_CHART = OUT_DIR / "locomo.png"
DEFAULT_MAINTAIN_OUT = OUT_DIR / "locomo-maintain.json"

KS = (5, 10, 20)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
SYSTEMS = ("memoryd", "bm25", "cosine")
STORE_BATCH = 250
TARGET_RECALL_AT_10 = 0.70

_SESSION_KEY = re.compile(r"session_(\d+)")
_DIA_ID = re.compile(r"D:?(\d+):(\d+)")
_EVIDENCE_SPLIT = re.compile(r"[;,\s]+")
_WORD = re.compile(r"\w+")
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y",
                 "%I:%M %p on %B %d, %Y", "%I:%M %p on %b %d, %Y")


# --- parsing ------------------------------------------------------------------------
def normalize_dia_id(token: str) -> str | None:
    """``D3:7``; also accepts ``D:3:7`` and zero-padded ``D03:07``. None if malformed."""
    match = _DIA_ID.fullmatch(token.strip())
    if match is None:
        return None
    return f"D{int(match[1])}:{int(match[2])}"


def parse_evidence(raw: object, known: Iterable[str] | None = None) -> list[str]:
    """Evidence ids, leniently: entries may hold several ids ("D8:6; D9:17") or
    malformed ones ("D:11:26", "D30:05"). Ids not in ``known`` are dropped; order kept,
    duplicates removed."""
    entries = [raw] if isinstance(raw, str) else list(raw) if isinstance(raw, list | tuple) \
        else []
    allowed = set(known) if known is not None else None
    found: list[str] = []
    for entry in entries:
        if not isinstance(entry, str):
            continue
        for token in _EVIDENCE_SPLIT.split(entry):
            dia_id = normalize_dia_id(token) if token else None
            if dia_id and (allowed is None or dia_id in allowed) and dia_id not in found:
                found.append(dia_id)
    return found


def parse_session_datetime(value: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` -> 2023-05-08 13:56 UTC."""
    cleaned = " ".join(value.split())
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(cleaned, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise ValueError(f"unrecognized LoCoMo session date: {value!r}")


def tokenize(text: str) -> list[str]:
    return _WORD.findall(text.lower())


@dataclass(frozen=True)
class Turn:
    dia_id: str
    content: str
    created_at: datetime
    session: str  # the LoCoMo session key ("session_3"), memoryd's session_id


@dataclass(frozen=True)
class Question:
    index: int          # position in the sample's qa list
    question: str
    category: int
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Sample:
    sample_id: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]
    skipped: dict[str, int]


def parse_sample(raw: dict[str, Any], position: int) -> Sample:
    conversation = raw["conversation"]
    sessions = sorted(
        (int(m[1]), key) for key in conversation
        if (m := _SESSION_KEY.fullmatch(key)) and isinstance(conversation[key], list))
    turns: list[Turn] = []
    for _, key in sessions:
        when_text = str(conversation.get(f"{key}_date_time", "")).strip()
        created_at = parse_session_datetime(when_text)
        for turn in conversation[key]:
            dia_id = normalize_dia_id(str(turn.get("dia_id", "")))
            if dia_id is None:
                continue
            content = f"({when_text}) {turn.get('speaker', '?')}: {turn.get('text', '')}"
            turns.append(Turn(dia_id, content, created_at, key))
    known = {t.dia_id for t in turns}
    questions: list[Question] = []
    skipped = {"category": 0, "no_evidence": 0}
    for index, qa in enumerate(raw.get("qa", [])):
        category = qa.get("category")
        if category not in CATEGORIES or not str(qa.get("question", "")).strip():
            skipped["category"] += 1
            continue
        evidence = parse_evidence(qa.get("evidence"), known)
        if not evidence:
            skipped["no_evidence"] += 1
            continue
        questions.append(Question(index, str(qa["question"]), int(category), tuple(evidence)))
    sample_id = str(raw.get("sample_id") or f"sample-{position}")
    return Sample(sample_id, tuple(turns), tuple(questions), skipped)


def load_samples(path: Path, limit_samples: int | None = None) -> list[Sample]:
    data = json.loads(Path(path).read_text())
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of LoCoMo samples")
    if limit_samples is not None:
        data = data[:limit_samples]
    return [parse_sample(raw, i) for i, raw in enumerate(data)]


# --- scoring ----------------------------------------------------------------------
Ranking = list[list[str]]  # per rank position, the dia_ids that result stands for


def score_ranking(ranking: Ranking, evidence: Sequence[str]) -> dict[str, float]:
    wanted = set(evidence)
    scores: dict[str, float] = {}
    for k in KS:
        found = {d for ids in ranking[:k] for d in ids} & wanted
        scores[f"recall@{k}"] = len(found) / len(wanted)
        scores[f"hit@{k}"] = 1.0 if found else 0.0
    return scores


def evidence_ranks(ranking: Ranking, evidence: Sequence[str]) -> list[int | None]:
    """1-based rank of each evidence turn in the ranking (None: not retrieved)."""
    where: dict[str, int] = {}
    for pos, ids in enumerate(ranking, start=1):
        for d in ids:
            where.setdefault(d, pos)
    return [where.get(d) for d in evidence]


def metric_names() -> list[str]:
    return [f"recall@{k}" for k in KS] + [f"hit@{k}" for k in KS]


def aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean of each metric, overall and per category, for each system."""
    result: dict[str, Any] = {}
    for system in SYSTEMS:
        def mean_of(selected: list[dict[str, Any]], system: str = system) -> dict[str, Any]:
            out: dict[str, Any] = {"n": len(selected)}
            for name in metric_names():
                values = [r["scores"][system][name] for r in selected]
                out[name] = round(statistics.fmean(values), 4) if values else None
            return out

        result[system] = {
            "overall": mean_of(rows),
            "by_category": {name: mean_of([r for r in rows if r["category"] == cat])
                            for cat, name in CATEGORIES.items()},
        }
    return result


# --- the run ----------------------------------------------------------------------
def top_indices(scores: np.ndarray, k: int) -> list[int]:
    """Indices of the ``k`` highest scores, best first, ties by position."""
    order = np.lexsort((np.arange(len(scores)), -scores))
    return [int(i) for i in order[:k]]


@dataclass
class Stored:
    """One conversation stored as an agent: which dia_ids each memory stands for
    (identical turns share one memory)."""

    sample: Sample
    agent: str
    owners: dict[uuid.UUID, list[str]]


def embed_corpus(samples: Sequence[Sample], embedder: CachingEmbedder,
                  query_embedder: CachingEmbedder, watch: Stopwatch) -> None:
    """Embed every turn and question once, up front (timed apart from storing)."""
    all_turns = [t.content for s in samples for t in s.turns]
    all_questions = [q.question for s in samples for q in s.questions]
    with watch("embed_turns"):
        embedder.warm(all_turns, desc="embed turns")
    with watch("embed_questions"):
        embedder.warm(all_questions, desc="embed questions")
        query_embedder.warm(all_questions, desc="embed questions (recall)")


def turn_items(sample: Sample, turns: Sequence[Turn]) -> list[dict[str, Any]]:
    """``store_many`` items for ``turns``: content, the session's date, the LoCoMo session
    as memoryd's session, the turn's ids in the metadata."""
    return [{"content": t.content, "created_at": t.created_at, "session_id": t.session,
             "metadata": {"dia_id": t.dia_id, "sample_id": sample.sample_id}}
            for t in turns]


def _store_sample(store: Any, agent: str, sample: Sample, bar: Any) -> Stored:
    """Every turn of ``sample`` through the public API, in batches of ``STORE_BATCH``."""
    owners: dict[uuid.UUID, list[str]] = {}
    for start in range(0, len(sample.turns), STORE_BATCH):
        batch = sample.turns[start:start + STORE_BATCH]
        results = store.store_many(agent, turn_items(sample, batch))
        for turn, result in zip(batch, results, strict=True):
            owners.setdefault(result.id, []).append(turn.dia_id)  # dups share one
        bar.update(len(batch))
    return Stored(sample, agent, owners)


def store_all(store: Any, samples: Sequence[Sample], run_tag: str, agents: list[str],
               watch: Stopwatch) -> list[Stored]:
    """One agent per conversation; ``agents`` grows as they are created, so the caller
    can delete them whatever happens."""
    stored: list[Stored] = []
    total = sum(len(s.turns) for s in samples)
    with watch("store"), progress_bar(total, desc="store turns", unit="turn") as bar:
        for sample in samples:
            agent = f"locomo-{run_tag}-{sample.sample_id}"
            agents.append(agent)
            stored.append(_store_sample(store, agent, sample, bar))
    return stored


def memory_ranking(hits: Sequence[Any], owners: dict[uuid.UUID, list[str]]) -> Ranking:
    """The dia_ids each recalled memory stands for, in rank order."""
    return [owners.get(h.memory.id) or [str(h.memory.metadata.get("dia_id", ""))]
            for h in hits]


def _memoryd_scores(store: Any, stored: Stored, q: Question,
                    recall_ms: list[float]) -> tuple[dict[str, float], Ranking]:
    """memoryd: one recall per k, exactly as an agent asking for k memories. The
    scores, and the limit-20 call's ranking (for the evidence ranks in the JSON)."""
    scores: dict[str, float] = {}
    ranking: Ranking = []
    for k in KS:
        with timer() as clock:
            hits = store.recall(stored.agent, q.question, limit=k)
        recall_ms.append(clock.ms)
        ranked = memory_ranking(hits, stored.owners)
        one = score_ranking(ranked, q.evidence)
        scores[f"recall@{k}"] = one[f"recall@{k}"]
        scores[f"hit@{k}"] = one[f"hit@{k}"]
        if k == max(KS):
            ranking = ranked
    return scores, ranking


@dataclass
class _Baselines:
    """BM25 and cosine over one conversation's turns."""

    turn_ids: list[str]
    bm25: Any
    matrix: np.ndarray


def _baselines(sample: Sample, embedder: CachingEmbedder, watch: Stopwatch) -> _Baselines:
    from rank_bm25 import BM25Okapi

    matrix = embedder.embed([t.content for t in sample.turns])
    with watch("bm25_index"):
        bm25 = BM25Okapi([tokenize(t.content) for t in sample.turns])
    return _Baselines([t.dia_id for t in sample.turns], bm25, matrix)


def _baseline_rankings(base: _Baselines, q: Question, embedder: CachingEmbedder,
                       watch: Stopwatch) -> dict[str, Ranking]:
    with watch("bm25_query"):
        bm = base.bm25.get_scores(tokenize(q.question))
        bm25 = [[base.turn_ids[i]] for i in top_indices(bm, max(KS))]
    with watch("cosine_query"):
        cos = base.matrix @ embedder.embed([q.question])[0]
        cosine = [[base.turn_ids[i]] for i in top_indices(cos, max(KS))]
    return {"bm25": bm25, "cosine": cosine}


def question_row(sample_id: str, q: Question, memoryd_scores: dict[str, float],
                 rankings: dict[str, Ranking]) -> dict[str, Any]:
    """One question's entry of ``per_question``: memoryd's scores as measured per k, the
    baselines' from their rankings, and every system's evidence ranks."""
    per_k = {"memoryd": memoryd_scores}
    for system in ("bm25", "cosine"):
        per_k[system] = score_ranking(rankings[system], q.evidence)
    return {"sample": sample_id, "qa": q.index, "category": q.category,
            "evidence": list(q.evidence), "scores": per_k,
            "ranks": {s: evidence_ranks(rankings[s], q.evidence) for s in SYSTEMS}}


def _ask_all(store: Any, stored: Sequence[Stored], embedder: CachingEmbedder,
             watch: Stopwatch, recall_ms: list[float]) -> list[dict[str, Any]]:
    """Every question to memoryd and the baselines; one row per question."""
    rows: list[dict[str, Any]] = []
    total = sum(len(s.sample.questions) for s in stored)
    with progress_bar(total, desc="recall", unit="q") as bar:
        for one in stored:
            base = _baselines(one.sample, embedder, watch)
            for q in one.sample.questions:
                scores, ranking = _memoryd_scores(store, one, q, recall_ms)
                rankings = {"memoryd": ranking, **_baseline_rankings(base, q, embedder, watch)}
                rows.append(question_row(one.sample.sample_id, q, scores, rankings))
                bar.update(1)
    return rows


def settings_record(store: Any) -> dict[str, Any]:
    """The recall settings the run used (for the JSON)."""
    settings = store.settings
    return {**settings.weights(), "recall_fusion": settings.recall_fusion,
            "recall_context_weight": settings.recall_context_weight,
            "recall_expand": settings.recall_expand,
            "recall_time_boost": settings.recall_time_boost,
            "recall_candidates": settings.recall_candidates,
            "recall_exact_threshold": settings.recall_exact_threshold,
            "embed_int8": settings.embed_int8,
            "query_embed_int8": settings.query_embed_int8}


def skipped_total(samples: Sequence[Sample]) -> dict[str, int]:
    skipped: dict[str, int] = {}
    for s in samples:
        for reason, n in s.skipped.items():
            skipped[reason] = skipped.get(reason, 0) + n
    return skipped


def latency_summary(recall_ms: Sequence[float]) -> dict[str, Any]:
    """Calls, mean, p50 and p95 of memoryd's recall calls, ms."""
    return {
        "calls": len(recall_ms),
        "mean": round(statistics.fmean(recall_ms), 2) if recall_ms else None,
        "p50": round(statistics.median(recall_ms), 2) if recall_ms else None,
        "p95": round(float(np.percentile(recall_ms, 95)), 2) if recall_ms else None,
    }


def run(samples: list[Sample], database_url: str, *, data_path: str = "") -> dict[str, Any]:
    """Store every conversation, ask every question; the report (see bench/README.md)."""
    from memoryd.memory.embeddings import get_embedder, get_query_embedder
    from memoryd.memory.store import MemoryStore

    watch = Stopwatch()
    embedder = CachingEmbedder(get_embedder())
    # memoryd embeds questions as it would in service (the int8 rendition by default);
    # the cosine baseline uses the stored model for both sides.
    query_embedder = CachingEmbedder(get_query_embedder())
    store = MemoryStore(database_url, embedder=embedder, query_embedder=query_embedder)
    agents: list[str] = []
    recall_ms: list[float] = []
    try:
        with watch("migrate"):
            store.migrate()
        embed_corpus(samples, embedder, query_embedder, watch)
        stored = store_all(store, samples, uuid.uuid4().hex[:8], agents, watch)
        rows = _ask_all(store, stored, embedder, watch, recall_ms)
        config = settings_record(store)
    finally:
        # Leave a shared database as we found it; never mask the error that got us here.
        with contextlib.suppress(Exception):
            for agent in agents:
                store.forget_agent(agent)
        store.engine.dispose()

    return {
        "benchmark": "locomo",
        "date": now_iso(),
        "machine": machine_info(),
        "data": Path(data_path).name if data_path else "",
        "samples": len(samples),
        "turns": sum(len(s.turns) for s in samples),
        "questions": len(rows),
        "skipped_questions": skipped_total(samples),
        "ks": list(KS),
        "categories": {str(k): v for k, v in CATEGORIES.items()},
        "memoryd_settings": config,
        "results": aggregate(rows),
        "timings_s": {**watch.rounded(), "memoryd_recall": round(sum(recall_ms) / 1000, 2)},
        "memoryd_recall_ms": latency_summary(recall_ms),
        "per_question": rows,
    }


# --- output -----------------------------------------------------------------------
def report_text(report: dict[str, Any]) -> str:
    results = report["results"]
    headers = ["system", *(f"R@{k}" for k in KS), *(f"H@{k}" for k in KS)]
    overall = [[s, *(results[s]["overall"][m] for m in metric_names())] for s in SYSTEMS]
    by_cat_headers = ["category / system", "n", *headers[1:]]
    by_cat = [[f"{name} / {s}", results[s]["by_category"][name]["n"],
               *(results[s]["by_category"][name][m] for m in metric_names())]
              for name in CATEGORIES.values() for s in SYSTEMS]
    t = report["timings_s"]
    ms = report["memoryd_recall_ms"]
    store_total = t.get("embed_turns", 0.0) + t.get("store", 0.0)
    r10 = results["memoryd"]["overall"]["recall@10"]
    verdict = ("n/a" if r10 is None else
               f"{r10:.3f} ({'meets' if r10 >= TARGET_RECALL_AT_10 else 'BELOW'} "
               f"target {TARGET_RECALL_AT_10:.2f})")
    return "\n".join([
        f"LoCoMo retrieval: {report['samples']} samples, {report['turns']} turns, "
        f"{report['questions']} questions (skipped: {report['skipped_questions']})",
        f"memoryd settings: {report['memoryd_settings']}",
        "",
        format_table(headers, overall),
        "",
        format_table(by_cat_headers, by_cat),
        "",
        f"storing:  {report['turns']} turns in {store_total:.1f} s "
        f"(embedding {t.get('embed_turns', 0.0):.1f} s, writing {t.get('store', 0.0):.1f} s)",
        f"querying: {ms['calls']} memoryd recalls in {t.get('memoryd_recall', 0.0):.1f} s "
        f"(mean {ms['mean']} ms, p50 {ms['p50']} ms, p95 {ms['p95']} ms; query embeddings "
        f"{t.get('embed_questions', 0.0):.1f} s); bm25 {t.get('bm25_query', 0.0):.1f} s, "
        f"cosine {t.get('cosine_query', 0.0):.2f} s",
        f"memoryd recall@10: {verdict}",
    ])


def write_chart(report: dict[str, Any], path: Path) -> Path:
    results = report["results"]
    overall = {s: [results[s]["overall"][f"recall@{k}"] or 0.0 for k in KS] for s in SYSTEMS}
    by_cat = {s: [results[s]["by_category"][c]["recall@10"] or 0.0 for c in CATEGORIES.values()]
              for s in SYSTEMS}
    return write_bar_charts(path, [
        {"groups": [f"recall@{k}" for k in KS], "series": overall,
         "title": f"LoCoMo recall@k ({report['questions']} questions)", "ylabel": "recall"},
        {"groups": list(CATEGORIES.values()), "series": by_cat,
         "title": "recall@10 by category", "ylabel": "recall@10"},
    ], suptitle=f"memoryd vs BM25 vs MiniLM cosine, {report['date'][:10]}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.locomo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo JSON file")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"JSON report path (default {DEFAULT_OUT}, with --maintain "
                             f"{DEFAULT_MAINTAIN_OUT})")
    parser.add_argument("--chart", type=Path, default=DEFAULT_CHART, help="PNG chart path")
    parser.add_argument("--limit-samples", type=int, default=None, metavar="N",
                        help="only the first N conversations")
    parser.add_argument("--database-url", default=None,
                        help="use this PostgreSQL (pgvector) instead of a throwaway embedded one")
    parser.add_argument("--maintain", action="store_true",
                        help="recall before and after every scheduled maintenance job")
    parser.add_argument("--per-job", action="store_true",
                        help="with --maintain: also recall@10 after each job")
    parser.add_argument("--reset-access", action="store_true",
                        help="with --maintain: forget the first round's recalls before the "
                             "jobs run (as if nothing had been recalled since storing)")
    parser.add_argument("--jobs", default=None,
                        help="with --maintain: comma-separated jobs (default: the schedule's)")
    args = parser.parse_args(argv)

    data_path = args.data.resolve()
    if not data_path.exists():
        parser.error(f"data file not found: {data_path}")
    if (args.per_job or args.reset_access or args.jobs is not None) and not args.maintain:
        parser.error("--per-job, --reset-access and --jobs need --maintain")
    samples = load_samples(data_path, args.limit_samples)
    if args.maintain:
        return _main_maintain(parser, args, samples, data_path)
    args.out = args.out or DEFAULT_OUT
    if args.database_url:
        report = run(samples, args.database_url, data_path=str(data_path))
    else:
        with embedded_postgres(prefix="memoryd-locomo-") as url:
            report = run(samples, url, data_path=str(data_path))
    print(report_text(report))
    write_json(args.out, report)
    write_chart(report, args.chart)
    print(f"wrote {args.out} and {args.chart}")
    return 0


def _main_maintain(parser: argparse.ArgumentParser, args: argparse.Namespace,
                   samples: list[Sample], data_path: Path) -> int:
    """``--maintain``: before and after maintenance (``bench.locomo_maintain``)."""
    from bench import locomo_maintain
    from memoryd.memory.maintenance.jobs import JOBS

    jobs = None if args.jobs is None else [j for j in args.jobs.split(",") if j]
    if jobs is not None and (unknown := sorted(set(jobs) - set(JOBS))):
        parser.error(f"unknown jobs {unknown}; one of {sorted(JOBS)}")
    out = args.out or DEFAULT_MAINTAIN_OUT
    with contextlib.ExitStack() as stack:
        url = args.database_url or stack.enter_context(
            embedded_postgres(prefix="memoryd-locomo-"))
        report = locomo_maintain.run(samples, url, data_path=str(data_path), jobs=jobs,
                                     per_job=args.per_job, reset_access=args.reset_access)
    print(locomo_maintain.report_text(report))
    write_json(out, report)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
