"""Memory that stays true: after a fact changes, does recall answer with the new value,
and does the replaced one still come back unmarked?

One agent holds, for each of ``--people`` made-up people, one single-valued attribute
(where they live, who they work for, their phone number, car, manager, ...) stated months
ago, and a newer statement replacing it stated days ago in other words ("moved to", "left X
and joined Y", "changed number to"), among facts that merely add to what is known (a
second hobby, another city visited), the same attribute of someone close to them (a
relative's city, a colleague's employer) and unrelated facts. Each person is asked about
their attribute ("Where does P live?"); the same questions are asked again after every
maintenance job of the schedule has run for the agent.

    .venv/bin/python -m bench.knowledge [--people N] [--seed S]
                                        [--phrasings tune|held-out|all] [--jobs a,b]
                                        [--out PATH.json] [--database-url URL]

The data is generated here (``generate``, seeded); the phrasing tables are in
``bench/knowledge_data.py``. See bench/README.md, "Knowledge that changes".
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import (
    OUT_DIR,
    Stopwatch,
    embedded_postgres,
    format_table,
    machine_info,
    now_iso,
    progress,
    timer,
    write_json,
)
from bench.knowledge_data import (
    ADDITIVE,
    EMAIL_DOMAINS,
    FIRST_NAMES,
    KINDS,
    LAST_NAMES,
    POOLS,
    UNRELATED,
)
from bench.scheduled import run_maintenance, scheduled_jobs
from memoryd.errors import ValidationError

DEFAULT_OUT = OUT_DIR / "knowledge.json"
DEFAULT_PEOPLE = 40
MAX_PEOPLE = 60  # the value pools of bench/knowledge_data.py hold enough for this many
PHRASING_SETS = ("tune", "held-out", "all")
RECALL_LIMIT = 10  # what an agent asking its memory would get; @1 and @3 are read from it
ROLES = ("old", "new", "additive", "distractor", "unrelated")
KEPT_ROLES = ("additive", "distractor")  # never superseded: counted as false supersessions
TARGETS = {"current_at_1": ">= 0.95", "replaced_in_top3_unmarked": "<= 0.05",
           "false_supersessions": "0", "versions_lost": "0"}

# Days before "now" each statement was made: (earliest, latest).
AGES = {"old": (90, 240), "new": (1, 10), "additive_first": (60, 300),
        "additive_second": (1, 14), "distractor": (1, 120), "unrelated": (5, 300)}


# --- the data -------------------------------------------------------------------------
@dataclass(frozen=True)
class Fact:
    """One memory to store: whose, what part it plays, the value it states."""

    person: str
    role: str  # one of ROLES
    kind: str  # an attribute kind of KINDS or ADDITIVE, or "unrelated"
    value: str
    content: str
    created_at: datetime


@dataclass(frozen=True)
class Question:
    person: str
    kind: str
    text: str
    current: str   # the value stated days ago
    replaced: str  # the value it replaced
    new_fact: int  # index of the facts stating them
    old_fact: int


@dataclass(frozen=True)
class Dataset:
    seed: int
    phrasings: str
    facts: tuple[Fact, ...]
    questions: tuple[Question, ...]


def phrasings(kind: str, side: str, which: str) -> list[str]:
    """The phrasings of ``kind``'s ``side`` ("old" or "new") in set ``which``."""
    table = KINDS[kind][side]
    return [*table["tune"], *table["held-out"]] if which == "all" else list(table[which])


class _Values:
    """Draws values without replacement, so no value is stated by two memories."""

    def __init__(self, rng: random.Random, spare_names: list[str]) -> None:
        self.rng = rng
        self.pools = {name: rng.sample(values, len(values)) for name, values in POOLS.items()}
        self.pools["name"] = spare_names
        self.used: set[str] = set()  # phone numbers and e-mail addresses drawn

    def draw(self, pool: str, person: str) -> str:
        if pool == "phone":
            return self._phone()
        if pool == "email":
            return self._email(person)
        if not self.pools[pool]:
            raise ValidationError("people", f"too many: the {pool} values ran out")
        return self.pools[pool].pop()

    def _phone(self) -> str:
        while True:
            digits = self.rng.randrange(10**9)
            phone = f"+44 7{digits // 10**6:03d} {digits % 10**6:06d}"
            if phone not in self.used:
                self.used.add(phone)
                return phone

    def _email(self, person: str) -> str:
        """An address made from ``person``'s name (for a distractor, someone else's),
        at one of the domains; never one drawn before."""
        first, last = person.lower().split(" ", 1)
        while True:
            form = self.rng.choice([f"{first}.{last}", f"{first[0]}{last}", f"{last}.{first}",
                                    f"{first}{self.rng.randrange(10, 100)}"])
            address = f"{form}@{self.rng.choice(EMAIL_DOMAINS)}"
            if address not in self.used:
                self.used.add(address)
                return address


def _ago(rng: random.Random, now: datetime, span: str) -> datetime:
    low, high = AGES[span]
    return now - timedelta(days=rng.uniform(low, high))


def _person_facts(rng: random.Random, values: _Values, person: str, kind: str,
                  additive: str, which: str, now: datetime) -> list[Fact]:
    """Old and new value of ``kind``, a distractor, an additive pair, an unrelated fact."""
    spec = KINDS[kind]
    old, new = values.draw(spec["pool"], person), values.draw(spec["pool"], person)
    other = values.draw(spec["pool"], values.draw("name", person) if spec["pool"] == "email"
                        else person)
    add = ADDITIVE[additive]
    first, second = values.draw(add["pool"], person), values.draw(add["pool"], person)
    template, choices = UNRELATED[rng.randrange(len(UNRELATED))]
    unrelated = rng.choice(choices)
    facts = [
        ("old", kind, old, rng.choice(phrasings(kind, "old", which)), "old"),
        ("new", kind, new, rng.choice(phrasings(kind, "new", which)), "new"),
        ("distractor", kind, other, rng.choice(spec["distractor"]), "distractor"),
        ("additive", additive, first, rng.choice(add["first"]), "additive_first"),
        ("additive", additive, second, rng.choice(add["second"]), "additive_second"),
        ("unrelated", "unrelated", unrelated, template, "unrelated"),
    ]
    return [Fact(person, role, k, value, text.format(p=person, v=value, old=old),
                 _ago(rng, now, span)) for role, k, value, text, span in facts]


def generate(people: int = DEFAULT_PEOPLE, *, seed: int = 0, which: str = "all",
             now: datetime | None = None) -> Dataset:
    """The benchmark's data: a pure function of its arguments (``now`` defaults to the
    current time, which only moves the timestamps). Person i's attribute is kind
    ``i mod len(KINDS)``, and their additive pair alternates between a hobby and a city."""
    if isinstance(people, bool) or not isinstance(people, int) \
            or not 1 <= people <= MAX_PEOPLE:
        raise ValidationError("people", f"must be an integer from 1 to {MAX_PEOPLE}")
    if which not in PHRASING_SETS:
        raise ValidationError("phrasings", f"must be one of {', '.join(PHRASING_SETS)}")
    rng, when = random.Random(seed), now or datetime.now(UTC)
    names = [f"{first} {last}" for first, last in product(FIRST_NAMES, LAST_NAMES)]
    rng.shuffle(names)
    persons, spare = names[:people], names[people:]
    values = _Values(rng, spare)
    kinds, additives = list(KINDS), list(ADDITIVE)
    facts: list[Fact] = []
    questions: list[Question] = []
    for i, person in enumerate(persons):
        kind = kinds[i % len(kinds)]
        start = len(facts)
        facts += _person_facts(rng, values, person, kind, additives[i % len(additives)],
                               which, when)
        old, new = facts[start], facts[start + 1]
        questions.append(Question(person, kind, KINDS[kind]["question"].format(p=person),
                                  new.value, old.value, start + 1, start))
    return Dataset(seed, which, tuple(facts), tuple(questions))


# --- scoring --------------------------------------------------------------------------
def marked_superseded(hit: Any) -> bool:
    """Whether a recall result says it no longer holds. The one place to change when
    results carry a marker: today nothing does, so every replaced value counts."""
    memory = hit.memory
    if getattr(hit, "current", True) is False or getattr(memory, "current", True) is False:
        return True
    return bool(getattr(memory, "superseded", False) or getattr(memory, "superseded_by", None)
                or memory.metadata.get("superseded"))


def states(hit: Any, value: str, own: uuid.UUID, other: uuid.UUID) -> bool:
    """Whether ``hit`` states ``value``: it is the memory ``own`` that stated it, or another
    memory holding it (a summary), except ``other`` (the new statement names the value
    it replaces, "left X and joined Y", without stating it holds)."""
    return bool(hit.memory.id == own or (hit.memory.id != other and value in hit.memory.content))


def rank_of(hits: Sequence[Any], value: str, own: uuid.UUID, other: uuid.UUID,
          *, unmarked: bool = False) -> int | None:
    """1-based rank of the first hit stating ``value`` (unmarked ones only if asked)."""
    for rank, hit in enumerate(hits, start=1):
        if states(hit, value, own, other) and not (unmarked and marked_superseded(hit)):
            return rank
    return None


def ask(store: Any, agent: str, data: Dataset, ids: Sequence[uuid.UUID],
        recall_ms: list[float]) -> list[dict[str, Any]]:
    """Every question, one recall each; the ranks of the current and the replaced value."""
    rows = []
    for q in progress(data.questions, desc="recall", unit="q"):
        with timer() as clock:
            hits = store.recall(agent, q.text, limit=RECALL_LIMIT)
        recall_ms.append(clock.ms)
        new_id, old_id = ids[q.new_fact], ids[q.old_fact]
        current = rank_of(hits, q.current, new_id, old_id)
        replaced = rank_of(hits, q.replaced, old_id, new_id, unmarked=True)
        rows.append({"kind": q.kind, "current_rank": current, "replaced_rank": replaced,
                     "current_at_1": current == 1,
                     "replaced_in_top3_unmarked": replaced is not None and replaced <= 3})
    return rows


def lifecycle(store: Any, agent: str, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
    """Where each memory is now: live, superseded, archived, evicted (restorable) or gone."""
    from sqlalchemy import text

    with store.session() as session:
        rows = session.execute(text(
            "SELECT id, CASE WHEN valid_to IS NOT NULL THEN 'superseded' "
            "WHEN archived_at IS NOT NULL THEN 'archived' ELSE 'live' END AS state "
            "FROM memories WHERE agent_id = :a AND id = ANY(:ids)"),
            {"a": agent, "ids": list(ids)}).all()
        evicted = set(session.execute(text(
            "SELECT memory_id FROM evicted_memories WHERE agent_id = :a "
            "AND memory_id = ANY(:ids)"), {"a": agent, "ids": list(ids)}).scalars())
    found = {r.id: r.state for r in rows}
    return {i: found.get(i, "evicted" if i in evicted else "gone") for i in ids}


def _share(rows: Sequence[dict[str, Any]], key: str) -> float | None:
    return round(statistics.fmean(bool(r[key]) for r in rows), 4) if rows else None


def metrics(data: Dataset, ids: Sequence[uuid.UUID], rows: Sequence[dict[str, Any]],
            where: dict[uuid.UUID, str]) -> dict[str, Any]:
    """The benchmark's figures for one pass over the questions and the memories' state."""
    not_live = {role: sum(1 for f, i in zip(data.facts, ids, strict=True)
                          if f.role == role and where[i] != "live") for role in ROLES}
    lost = sum(1 for f, i in zip(data.facts, ids, strict=True)
               if f.role == "old" and where[i] == "gone")
    # Besides kept facts that left recall, any memory but an old value that was superseded.
    wrongly_replaced = sum(1 for f, i in zip(data.facts, ids, strict=True)
                           if f.role not in ("old", *KEPT_ROLES) and where[i] == "superseded")
    by_kind = {kind: {"n": len(of), "current_at_1": _share(of, "current_at_1"),
                      "replaced_in_top3_unmarked": _share(of, "replaced_in_top3_unmarked")}
               for kind in KINDS if (of := [r for r in rows if r["kind"] == kind])}
    return {"current_at_1": _share(rows, "current_at_1"),
            "replaced_in_top3_unmarked": _share(rows, "replaced_in_top3_unmarked"),
            "false_supersessions": sum(not_live[r] for r in KEPT_ROLES) + wrongly_replaced,
            "old_values_superseded": sum(1 for f, i in zip(data.facts, ids, strict=True)
                                         if f.role == "old" and where[i] == "superseded"),
            "versions_lost": lost, "not_live_by_role": not_live, "by_kind": by_kind}


def latency(ms: Sequence[float]) -> dict[str, Any]:
    if not ms:
        return {"calls": 0, "p50": None, "p95": None}
    return {"calls": len(ms), "p50": round(statistics.median(ms), 2),
            "p95": round(float(np.percentile(ms, 95)), 2)}


# --- the run --------------------------------------------------------------------------
def store_facts(store: Any, agent: str, facts: Sequence[Fact],
                store_ms: list[float]) -> list[uuid.UUID]:
    """Each fact with its own ``store`` call, oldest first (as the agent lived them),
    backdated through the public ``created_at``; the memory ids in the facts' order."""
    ids: dict[int, uuid.UUID] = {}
    order = sorted(range(len(facts)), key=lambda i: facts[i].created_at)
    for i in progress(order, desc="store", unit="memory"):
        with timer() as clock:
            result = store.store(agent, facts[i].content, created_at=facts[i].created_at)
        store_ms.append(clock.ms)
        if not result.stored:
            raise RuntimeError(f"fact {i} was not stored (a duplicate?)")
        ids[i] = result.id
    return [ids[i] for i in range(len(facts))]


def store_unjudged(store: Any, facts: Sequence[Fact]) -> list[float]:
    """The store latencies of the same facts with store-time judging off (another agent,
    erased afterwards): what the judge costs is the difference."""
    agent, ms = f"knowledge-unjudged-{uuid.uuid4().hex[:8]}", []
    judged = store.settings
    store.settings = judged.model_copy(update={"judge": "off"})
    try:
        store_facts(store, agent, facts, ms)
    finally:
        store.settings = judged
        store.forget_agent(agent)
    return ms


def _pass(store: Any, agent: str, data: Dataset, ids: Sequence[uuid.UUID],
          recall_ms: list[float]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    rows = ask(store, agent, data, ids, recall_ms)
    return metrics(data, ids, rows, lifecycle(store, agent, ids)), rows


def run(data: Dataset, database_url: str, jobs: Sequence[str]) -> dict[str, Any]:
    """Store the data as one agent, ask, run the jobs, ask again; the report."""
    from memoryd.memory.llm import get_llm
    from memoryd.memory.store import MemoryStore

    watch = Stopwatch()
    store = MemoryStore(database_url)
    agent = f"knowledge-{uuid.uuid4().hex[:8]}"
    store_ms: list[float] = []
    recall_ms: dict[str, list[float]] = {"before": [], "after": []}
    try:
        with watch("migrate"):
            store.migrate()
        store.embedder.embed(["warm up"])  # loading the model is not a store's cost
        store.query_embedder.embed(["warm up"])
        unjudged_ms = store_unjudged(store, data.facts)
        with watch("store"):
            ids = store_facts(store, agent, data.facts, store_ms)
        queued = len(store.reviews(agent, limit=1000))
        before, rows_before = _pass(store, agent, data, ids, recall_ms["before"])
        with watch("maintenance"):
            maintenance = run_maintenance(store, agent, jobs)
        after, rows_after = _pass(store, agent, data, ids, recall_ms["after"])
        llm = get_llm(store.settings).name
    finally:
        with contextlib.suppress(Exception):  # never mask the error that got us here
            store.forget_agent(agent)
        store.engine.dispose()
    return {
        "benchmark": "knowledge", "date": now_iso(), "machine": machine_info(),
        "seed": data.seed, "people": len(data.questions), "phrasings": data.phrasings,
        "memories": len(data.facts), "questions": len(data.questions),
        "kinds": sorted({q.kind for q in data.questions}), "recall_limit": RECALL_LIMIT,
        "llm": llm, "targets": TARGETS,
        "judge": store.settings.judge, "review_queue": queued,
        "store_ms": {"without_judge": latency(unjudged_ms), "with_judge": latency(store_ms)},
        "recall_ms": {k: latency(v) for k, v in recall_ms.items()},
        "before_maintenance": before, "after_maintenance": after,
        "maintenance": maintenance, "timings_s": watch.rounded(),
        "per_question": [{"kind": q.kind, "before": b, "after": a} for q, b, a
                         in zip(data.questions, rows_before, rows_after, strict=True)],
    }


# --- output ---------------------------------------------------------------------------
def report_text(report: dict[str, Any]) -> str:
    before, after = report["before_maintenance"], report["after_maintenance"]
    rows = [[name, before[name], after[name], target] for name, target in TARGETS.items()]
    kinds = [[kind, one["n"], one["current_at_1"], after["by_kind"][kind]["current_at_1"],
              one["replaced_in_top3_unmarked"],
              after["by_kind"][kind]["replaced_in_top3_unmarked"]]
             for kind, one in before["by_kind"].items()]
    store, judged = report["store_ms"]["without_judge"], report["store_ms"]["with_judge"]
    jobs = ", ".join(f"{j['job']} {j['status']} {j['seconds']:.1f}s" for j in report["maintenance"])
    return "\n".join([
        f"Knowledge that changes: {report['people']} people, {report['memories']} memories, "
        f"{report['questions']} questions, phrasings {report['phrasings']}, seed "
        f"{report['seed']}, LLM {report['llm']}",
        "",
        format_table(["metric", "before maintenance", "after maintenance", "target"], rows),
        "",
        format_table(["kind", "n", "current@1 before", "after", "replaced@3 before", "after"],
                     kinds),
        "",
        f"store per memory: p50 {store['p50']} ms, p95 {store['p95']} ms without the judge; "
        f"p50 {judged['p50']} ms, p95 {judged['p95']} ms with it (judge "
        f"{report['judge']}); review queue: {report['review_queue']}",
        f"maintenance: {jobs or 'none run'}",
    ])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.knowledge", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--people", type=int, default=DEFAULT_PEOPLE, metavar="N")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--phrasings", choices=PHRASING_SETS, default="all",
                        help="draw old/new statements from the tune half, the held-out half "
                             "or both")
    parser.add_argument("--jobs", default=None,
                        help="comma-separated maintenance jobs (default: every scheduled one)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON report path")
    parser.add_argument("--database-url", default=None,
                        help="use this PostgreSQL (pgvector) instead of a throwaway embedded one")
    args = parser.parse_args(argv)

    jobs = scheduled_jobs() if args.jobs is None else [j for j in args.jobs.split(",") if j]
    from memoryd.memory.maintenance.jobs import JOBS

    if unknown := sorted(set(jobs) - set(JOBS)):
        parser.error(f"unknown jobs {unknown}; one of {sorted(JOBS)}")
    try:
        data = generate(args.people, seed=args.seed, which=args.phrasings)
    except ValidationError as exc:
        parser.error(f"--{exc.field}: {exc.message}")
    if args.database_url:
        report = run(data, args.database_url, jobs)
    else:
        with embedded_postgres(prefix="memoryd-knowledge-") as url:
            report = run(data, url, jobs)
    print(report_text(report))
    write_json(args.out, report)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
