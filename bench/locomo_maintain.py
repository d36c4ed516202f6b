"""LoCoMo before and after maintenance (``python -m bench.locomo --maintain``): does
running every scheduled job over months-old conversations leave recall at least as good?

The conversations are stored as in ``bench.locomo`` (each turn a memory of its
conversation's agent, created at its session's date), every question is asked
(recall@k as there), then every job of the effective schedule runs to completion for
each agent, as the schedule would run it (``bench.scheduled``), and every question is
asked again. A memory is credited with the turns it stands for: an original turn with
itself, and any memory with every turn it reaches through ``derived_from`` links,
followed transitively (a summary of a merge survivor reaches the survivor's turn and
its loser's). A derived memory (summary, cortex fact or gist, merge survivor, session
compaction summary) gets credit only through those links: no text matching, no
metadata. Beside it the report gives the same hits credited to original turns alone
(``originals_only``): how much of what is found after maintenance is found through
derived memories. The first round of questions counts as use (recall bumps the access
time of what it returns, and jobs leave alone what agents still recall);
``reset_access`` forgets it before the jobs run, as if nobody had recalled anything
since the conversations were stored. See bench/README.md, "LoCoMo after maintenance".
"""

from __future__ import annotations

import contextlib
import statistics
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    CachingEmbedder,
    Stopwatch,
    format_table,
    machine_info,
    now_iso,
    progress_bar,
    timer,
)
from bench.locomo import (
    CATEGORIES,
    KS,
    Question,
    Ranking,
    Sample,
    Stored,
    embed_corpus,
    latency_summary,
    metric_names,
    score_ranking,
    settings_record,
    skipped_total,
    store_all,
)
from bench.scheduled import run_job_for, scheduled_jobs

Credit = dict[uuid.UUID, list[str]]  # memory -> the dia_ids it is credited with

# Every memory an agent's derived_from links reach from each memory, transitively.
_REACH = """
WITH RECURSIVE reach(source, target) AS (
    SELECT l.source_id, l.target_id FROM memory_links l
    WHERE l.agent_id = :agent AND l.kind = 'derived_from'
  UNION
    SELECT r.source, l.target_id FROM reach r
    JOIN memory_links l ON l.agent_id = :agent AND l.kind = 'derived_from'
                       AND l.source_id = r.target
)
SELECT source, target FROM reach"""


def credit_of(store: Any, stored: Stored) -> Credit:
    """The turns each memory of the agent is credited with: its own (``owners``), and
    those of every memory its ``derived_from`` links reach."""
    from sqlalchemy import text

    with store.session() as session:
        pairs = session.execute(text(_REACH), {"agent": stored.agent}).all()
    credit: dict[uuid.UUID, set[str]] = {m: set(ids) for m, ids in stored.owners.items()}
    for source, target in pairs:
        if target in stored.owners:
            credit.setdefault(source, set()).update(stored.owners[target])
    return {m: sorted(ids) for m, ids in credit.items()}


def ask(store: Any, stored: Sequence[Stored], credits: Sequence[Credit],
        recall_ms: list[float], ks: Sequence[int] = KS,
        desc: str = "recall") -> list[dict[str, Any]]:
    """Every question, one recall per k; a hit counts for the turns its memory is
    credited with. One row per question: its scores, and (``originals``) the scores of
    the same hits when only original turns count."""
    rows: list[dict[str, Any]] = []
    total = sum(len(s.sample.questions) for s in stored)
    with progress_bar(total, desc=desc, unit="q") as bar:
        for one, credit in zip(stored, credits, strict=True):
            for q in one.sample.questions:
                rows.append(_question(store, one, credit, q, recall_ms, ks))
                bar.update(1)
    return rows


def _question(store: Any, stored: Stored, credit: Credit, q: Question,
              recall_ms: list[float], ks: Sequence[int]) -> dict[str, Any]:
    scores: dict[str, float] = {}
    originals: dict[str, float] = {}
    for k in ks:
        with timer() as clock:
            hits = store.recall(stored.agent, q.question, limit=k)
        recall_ms.append(clock.ms)
        for out, credited in ((scores, credit), (originals, stored.owners)):
            ranking: Ranking = [credited.get(h.memory.id, []) for h in hits]
            one = score_ranking(ranking, q.evidence)
            out[f"recall@{k}"], out[f"hit@{k}"] = one[f"recall@{k}"], one[f"hit@{k}"]
    return {"sample": stored.sample.sample_id, "qa": q.index, "category": q.category,
            "scores": scores, "originals": originals}


def means(rows: Sequence[dict[str, Any]], scores: str = "scores") -> dict[str, Any]:
    """Each metric's mean (of the rows' ``scores``), overall and per category."""
    def mean_of(selected: Sequence[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {"n": len(selected)}
        for name in metric_names():
            values = [r[scores][name] for r in selected if name in r[scores]]
            out[name] = round(statistics.fmean(values), 4) if values else None
        return out

    return {"overall": mean_of(rows),
            "by_category": {name: mean_of([r for r in rows if r["category"] == cat])
                            for cat, name in CATEGORIES.items()}}


def census(store: Any, agents: Sequence[str]) -> dict[str, int]:
    """The benchmark's memories by state and kind: what maintenance did to them."""
    from sqlalchemy import text

    with store.session() as session:
        row = session.execute(text("""
            SELECT count(*) FILTER (WHERE archived_at IS NULL AND valid_to IS NULL) AS live,
                   count(*) FILTER (WHERE archived_at IS NOT NULL) AS archived,
                   count(*) FILTER (WHERE valid_to IS NOT NULL) AS superseded,
                   count(*) FILTER (WHERE category = 'summary') AS summaries,
                   count(*) FILTER (WHERE source LIKE 'session:%') AS from_sessions,
                   (SELECT count(*) FROM evicted_memories e
                    WHERE e.agent_id = ANY(:agents)) AS evicted,
                   (SELECT count(*) FROM memory_links l WHERE l.agent_id = ANY(:agents)
                    AND l.kind = 'derived_from') AS derived_links
            FROM memories WHERE agent_id = ANY(:agents)"""), {"agents": list(agents)}).one()
    return {key: int(value) for key, value in row._mapping.items()}


def forget_access(store: Any, agents: Sequence[str]) -> None:
    """The agents' memories as if never recalled: no access time, no access count."""
    from sqlalchemy import text

    with store.session() as session:
        session.execute(text("UPDATE memories SET last_accessed_at = NULL, access_count = 0 "
                             "WHERE agent_id = ANY(:agents)"), {"agents": list(agents)})


def maintain(store: Any, stored: Sequence[Stored], jobs: Sequence[str],
             after_each: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Each job for each agent, in schedule order (a fleet-only job runs once, fleet-wide,
    as the schedule runs it); ``after_each(job)`` after each job."""
    done: list[dict[str, Any]] = []
    for job in jobs:
        for one in stored:
            result = run_job_for(store, one.agent, job)
            done.append({**result, "agent": one.agent})
            if result["scope"] == "fleet":
                break
        if after_each is not None:
            after_each(job)
    return done


def run(samples: list[Sample], database_url: str, *, data_path: str = "",
        jobs: Sequence[str] | None = None, per_job: bool = False,
        reset_access: bool = False) -> dict[str, Any]:
    """Store every conversation, ask, run the maintenance, ask again; the report.
    ``per_job``: also recall@10 after each job (where a loss comes from);
    ``reset_access``: forget the first round's recalls before the jobs run."""
    from memoryd.memory.embeddings import get_embedder, get_query_embedder
    from memoryd.memory.llm import get_llm
    from memoryd.memory.store import MemoryStore

    jobs = list(jobs) if jobs is not None else scheduled_jobs()
    watch = Stopwatch()
    embedder = CachingEmbedder(get_embedder())
    query_embedder = CachingEmbedder(get_query_embedder())
    store = MemoryStore(database_url, embedder=embedder, query_embedder=query_embedder)
    agents: list[str] = []
    recall_ms: dict[str, list[float]] = {"before": [], "after": []}
    steps: list[dict[str, Any]] = []
    try:
        with watch("migrate"):
            store.migrate()
        embed_corpus(samples, embedder, query_embedder, watch)
        stored = store_all(store, samples, uuid.uuid4().hex[:8], agents, watch)
        census_before = census(store, agents)
        with watch("recall_before"):
            before = ask(store, stored, [credit_of(store, s) for s in stored],
                         recall_ms["before"], desc="recall before")
        if reset_access:
            forget_access(store, agents)

        def measure(job: str) -> None:
            rows = ask(store, stored, [credit_of(store, s) for s in stored], [], ks=(10,),
                       desc=f"after {job}")
            steps.append({"after": job, "recall@10": means(rows)["overall"]["recall@10"]})

        with watch("maintenance"):
            maintenance = maintain(store, stored, jobs, measure if per_job else None)
        census_after = census(store, agents)
        with watch("recall_after"):
            after = ask(store, stored, [credit_of(store, s) for s in stored],
                        recall_ms["after"], desc="recall after")
        config = settings_record(store)
        llm = get_llm(store.settings).name
    finally:
        with contextlib.suppress(Exception):  # never mask the error that got us here
            for agent in agents:
                store.forget_agent(agent)
        store.engine.dispose()
    return {
        "benchmark": "locomo-maintain", "date": now_iso(), "machine": machine_info(),
        "data": Path(data_path).name if data_path else "", "samples": len(samples),
        "turns": sum(len(s.turns) for s in samples), "questions": len(before),
        "skipped_questions": skipped_total(samples), "ks": list(KS), "llm": llm,
        "jobs": jobs, "reset_access": reset_access, "memoryd_settings": config,
        "before": means(before), "after": means(after),
        "after_originals_only": means(after, "originals"), "after_each_job": steps,
        "memories": {"before": census_before, "after": census_after},
        "maintenance": maintenance, "timings_s": watch.rounded(),
        "recall_ms": {k: latency_summary(v) for k, v in recall_ms.items()},
        "per_question": [{"sample": b["sample"], "qa": b["qa"], "category": b["category"],
                          "before": b["scores"], "after": a["scores"]}
                         for b, a in zip(before, after, strict=True)],
    }


def report_text(report: dict[str, Any]) -> str:
    """Before and after, overall and per category; what maintenance did."""
    before, after = report["before"], report["after"]
    headers = ["", *(f"R@{k}" for k in KS), *(f"H@{k}" for k in KS)]
    overall = [[label, *(block["overall"][m] for m in metric_names())]
               for label, block in (("before", before), ("after", after),
                                    ("after, originals only", report["after_originals_only"]))]
    by_cat = [[name, before["by_category"][name]["n"],
               before["by_category"][name]["recall@10"], after["by_category"][name]["recall@10"]]
              for name in CATEGORIES.values()]
    r10 = (before["overall"]["recall@10"], after["overall"]["recall@10"])
    verdict = ("n/a" if None in r10 else
               f"{r10[0]:.3f} -> {r10[1]:.3f} ({'meets' if r10[1] >= r10[0] else 'BELOW'} "
               "target: after >= before)")
    changed = {job: _summed([m["stats"] for m in report["maintenance"] if m["job"] == job])
               for job in report["jobs"]}
    lines = [
        f"LoCoMo before and after maintenance: {report['samples']} samples, "
        f"{report['turns']} turns, {report['questions']} questions, LLM {report['llm']}, "
        f"first round's recalls {'forgotten' if report['reset_access'] else 'kept'}",
        "", format_table(headers, overall), "",
        format_table(["category", "n", "R@10 before", "R@10 after"], by_cat), "",
        f"memories before: {report['memories']['before']}",
        f"memories after:  {report['memories']['after']}",
        *(f"  {job}: {stats}" for job, stats in changed.items() if stats),
    ]
    if report["after_each_job"]:
        lines.append("recall@10 after each job: " + ", ".join(
            f"{s['after']} {s['recall@10']}" for s in report["after_each_job"]))
    lines.append(f"memoryd recall@10 before -> after maintenance: {verdict}")
    return "\n".join(lines)


def _summed(stats: Sequence[dict[str, Any]]) -> dict[str, int]:
    """The non-zero counts of a job's runs (not its timings), summed over the agents."""
    total: dict[str, int] = {}
    for one in stats:
        for key, value in one.items():
            if isinstance(value, int) and not isinstance(value, bool) and value \
                    and not key.endswith("_ms"):
                total[key] = total.get(key, 0) + value
    return total
