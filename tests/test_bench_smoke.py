"""Smoke test of the LoCoMo benchmark on a tiny synthetic dataset (LoCoMo's JSON shape,
made-up content: the real data set is CC BY-NC and stays out of the repository)."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

# bench/ is not an installed package: make the repository root importable however
# pytest was started (``pytest`` alone does not put the working directory on sys.path).
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import locomo  # noqa: E402


def _session(speakers: tuple[str, str], n: int, lines: list[str]) -> list[dict[str, str]]:
    return [{"speaker": speakers[i % 2], "dia_id": f"D{n}:{i + 1}", "text": line}
            for i, line in enumerate(lines)]


def _sample(sample_id: str, a: str, b: str, topic: str, place: str) -> dict[str, object]:
    return {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": a,
            "speaker_b": b,
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": _session((a, b), 1, [
                f"Hi {b}! I started learning {topic} last week.",
                f"That is great, {a}! How is the {topic} going?",
                "Slowly, but I practice every evening after work.",
            ]),
            "session_2_date_time": "10:37 am on 27 June, 2023",
            "session_2": _session((a, b), 2, [
                f"Guess what, {b}: I moved to {place} in June.",
                f"Wow {a}, {place} sounds lovely. Do you like the weather?",
                "It rains a lot, but the parks are beautiful.",
            ]),
            # a date for a session without turns, as in the real files
            "session_3_date_time": "8:18 pm on 6 July, 2023",
        },
        "qa": [
            {"question": f"What did {a} start learning?", "answer": topic,
             "evidence": ["D1:1"], "category": 4},
            {"question": f"When did {a} move to {place}?", "answer": "June 2023",
             "evidence": ["D2:1"], "category": 2},
            # malformed evidence: two ids in one entry, "D:1:3" for "D1:3", zero padding
            {"question": f"What does {a} practice and where does {a} live?",
             "answer": f"{topic}, {place}", "evidence": ["D:1:3; D02:01"], "category": 1},
            {"question": f"Would {a} enjoy rain?", "answer": "maybe",
             "evidence": ["D2:3", "D9:99"], "category": 3},
            # skipped: adversarial category, and evidence that does not exist
            {"question": f"What did {b} learn?", "adversarial_answer": "nothing",
             "evidence": ["D1:2"], "category": 5},
            {"question": "Unanswerable?", "answer": "-", "evidence": ["D"], "category": 4},
        ],
    }


@pytest.fixture
def tiny_locomo(tmp_path: Path) -> Path:
    path = tmp_path / "tiny-locomo.json"
    path.write_text(json.dumps([
        _sample("synthetic-1", "Ada", "Bo", "pottery", "Lisbon"),
        _sample("synthetic-2", "Cy", "Di", "the violin", "Oslo"),
    ]))
    return path


def test_parse_evidence_is_lenient() -> None:
    known = {"D8:6", "D9:17", "D11:26", "D30:5", "D1:1"}
    assert locomo.parse_evidence(["D8:6; D9:17"], known) == ["D8:6", "D9:17"]
    assert locomo.parse_evidence(["D:11:26"], known) == ["D11:26"]
    assert locomo.parse_evidence(["D30:05"], known) == ["D30:5"]
    assert locomo.parse_evidence(["D1:1, D8:6 D1:1"], known) == ["D1:1", "D8:6"]
    assert locomo.parse_evidence(["D", "", "D99:1", "x"], known) == []
    assert locomo.parse_evidence("D1:1", known) == ["D1:1"]
    assert locomo.parse_evidence(None, known) == []
    assert locomo.parse_evidence(["D99:1"]) == ["D99:1"]  # no id list: keep well-formed ids


def test_normalize_dia_id_and_session_dates() -> None:
    assert locomo.normalize_dia_id(" D03:007 ") == "D3:7"
    assert locomo.normalize_dia_id("D:3:7") == "D3:7"
    assert locomo.normalize_dia_id("D3") is None
    assert locomo.parse_session_datetime("1:56 pm on 8 May, 2023") == \
        datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert locomo.parse_session_datetime("12:09 am on 13 September, 2023") == \
        datetime(2023, 9, 13, 0, 9, tzinfo=UTC)
    with pytest.raises(ValueError, match="unrecognized"):
        locomo.parse_session_datetime("yesterday")


def test_score_ranking() -> None:
    scores = locomo.score_ranking([["D1:1"], ["D1:2"], ["D2:1", "D2:2"]], ["D2:2", "D3:3"])
    assert scores["recall@5"] == 0.5
    assert scores["hit@5"] == 1.0


def test_locomo_benchmark_end_to_end(tiny_locomo: Path, tmp_path: Path, pg_url: str) -> None:
    samples = locomo.load_samples(tiny_locomo)
    assert [len(s.turns) for s in samples] == [6, 6]
    assert samples[0].turns[0].content == "(1:56 pm on 8 May, 2023) Ada: Hi Bo! I started " \
        "learning pottery last week."
    assert samples[0].questions[2].evidence == ("D1:3", "D2:1")
    assert samples[0].questions[3].evidence == ("D2:3",)
    assert samples[0].skipped == {"category": 1, "no_evidence": 1}

    out, chart = tmp_path / "out" / "locomo.json", tmp_path / "out" / "locomo.png"
    assert locomo.main(["--data", str(tiny_locomo), "--out", str(out), "--chart", str(chart),
                        "--database-url", pg_url]) == 0

    report = json.loads(out.read_text())
    assert chart.read_bytes().startswith(b"\x89PNG")
    assert report["samples"] == 2
    assert report["turns"] == 12
    assert report["questions"] == 8
    assert report["ks"] == [5, 10, 20]
    assert set(report["results"]) == {"memoryd", "bm25", "cosine"}
    metrics = {f"{m}@{k}" for m in ("recall", "hit") for k in (5, 10, 20)}
    for system, result in report["results"].items():
        assert set(result["by_category"]) == {"multi-hop", "temporal", "open-domain",
                                              "single-hop"}
        for block in (result["overall"], *result["by_category"].values()):
            assert metrics <= set(block)
            for name in metrics:
                assert 0.0 <= block[name] <= 1.0, (system, name)
        # 6 turns per agent: everything fits in the top 20
        assert result["overall"]["recall@20"] == 1.0
        assert result["overall"]["recall@5"] <= result["overall"]["recall@20"]
    assert report["timings_s"]["store"] >= 0
    assert report["memoryd_recall_ms"]["calls"] == 8 * 3
    assert len(report["per_question"]) == 8


# --- the benchmarks' small steps -------------------------------------------------------
def test_timer_reads_running_then_fixed() -> None:
    from bench.common import Stopwatch, Timer, timer

    with timer() as clock:
        running = clock.seconds
        assert running >= 0.0
    done = clock.seconds
    assert done >= running
    assert clock.seconds == done  # fixed once the block ended
    assert clock.ms == pytest.approx(done * 1000)
    assert clock.stop() == done  # a second stop keeps the first

    lone = Timer()
    assert lone.stopped is None and lone.seconds >= 0.0

    watch = Stopwatch()
    for _ in range(2):
        with watch("phase"):
            pass
    with pytest.raises(RuntimeError), watch("failed"):
        raise RuntimeError
    assert set(watch.seconds) == {"phase", "failed"}  # timed even when the block fails
    assert all(v >= 0.0 for v in watch.rounded(3).values())


def _question(evidence: tuple[str, ...] = ("D1:1", "D1:3")) -> locomo.Question:
    return locomo.Question(index=4, question="Where?", category=1, evidence=evidence)


def test_locomo_turn_items_and_ranking() -> None:
    when = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    turn = locomo.Turn("D1:1", "(date) Ada: hi", when, "session_1")
    sample = locomo.Sample("s-1", (turn,), (), {})
    assert locomo.turn_items(sample, [turn]) == [{
        "content": "(date) Ada: hi", "created_at": when, "session_id": "session_1",
        "metadata": {"dia_id": "D1:1", "sample_id": "s-1"}}]

    class _Hit:
        def __init__(self, memory_id: object, dia_id: str) -> None:
            self.memory = type("M", (), {"id": memory_id, "metadata": {"dia_id": dia_id}})()

    shared, other = object(), object()
    owners = {shared: ["D1:1", "D1:2"]}  # two identical turns stored as one memory
    assert locomo.memory_ranking([_Hit(shared, "D1:1"), _Hit(other, "D2:2")], owners) == \
        [["D1:1", "D1:2"], ["D2:2"]]


def test_locomo_question_row() -> None:
    rankings = {"memoryd": [["D1:3"], ["D1:1"]], "bm25": [["D1:1"]], "cosine": [["D9:9"]]}
    memoryd_scores = {"recall@5": 1.0}
    row = locomo.question_row("s-1", _question(), memoryd_scores, rankings)
    assert row["sample"] == "s-1" and row["qa"] == 4 and row["category"] == 1
    assert row["evidence"] == ["D1:1", "D1:3"]
    assert row["scores"]["memoryd"] is memoryd_scores  # measured per k, kept as is
    assert row["scores"]["bm25"]["recall@5"] == 0.5
    assert row["scores"]["cosine"]["hit@20"] == 0.0
    assert row["ranks"] == {"memoryd": [2, 1], "bm25": [1, None], "cosine": [None, None]}


def test_locomo_totals() -> None:
    samples = [locomo.Sample("a", (), (), {"category": 2, "no_evidence": 1}),
               locomo.Sample("b", (), (), {"category": 1, "no_evidence": 0})]
    assert locomo.skipped_total(samples) == {"category": 3, "no_evidence": 1}
    assert locomo.latency_summary([]) == {"calls": 0, "mean": None, "p50": None, "p95": None}
    summary = locomo.latency_summary([1.0, 2.0, 3.0, 10.0])
    assert summary["calls"] == 4 and summary["mean"] == 4.0 and summary["p50"] == 2.5


def test_scale_background_insert_follows_memoryd_columns() -> None:
    from bench import scale
    from memoryd.db.models import MemoryRow
    from memoryd.memory.rows import STORED_COLUMNS
    from memoryd.types import CATEGORIES

    sql = scale.background_insert()
    listed = sql.split("INSERT INTO memories (", 1)[1].split(")", 1)[0].split(", ")
    assert listed == [c for c in STORED_COLUMNS if c in scale.BACKGROUND_VALUES]
    required = {c.name for c in MemoryRow.__table__.columns
                if not c.nullable and c.server_default is None and c.computed is None}
    assert required <= set(listed)
    assert set(scale.BACKGROUND_CATEGORIES) <= set(CATEGORIES)
    assert "(ARRAY['fact', 'preference', 'decision', 'task', 'context', 'event'])" \
        "[1 + g.n % 6]" in sql


def test_scale_background_content_hash_is_memoryds(pg_url: str) -> None:
    from sqlalchemy import create_engine, text

    from bench import scale
    from memoryd.db.engine import normalize_url
    from memoryd.memory.writes import content_hash

    expression = scale.BACKGROUND_VALUES["content_hash"]
    content = scale.sentences(1, seed=1)[0] + " (note 12345)"
    engine = create_engine(normalize_url(pg_url))
    try:
        with engine.connect() as conn:
            got = conn.execute(text(f"SELECT {expression} FROM (SELECT :c AS content) c"),
                               {"c": content}).scalar_one()
    finally:
        engine.dispose()
    assert got == content_hash(content)


def test_scale_pool_count() -> None:
    from bench import scale

    assert scale.pool_count(20_000, 899_000) == 20_000
    assert scale.pool_count(20_000, 100_000) == 5_000  # at least 20 rows per sentence
    assert scale.pool_count(20_000, 10) == 1


def test_store_targets_and_rows() -> None:
    from bench import store

    met = store.against_targets({"per_s": 300.0}, raw_rate=360.0)
    assert met == {"per_s": 300.0, "ratio_to_raw": 0.833, "meets_target": True}
    assert not store.against_targets({"per_s": 200.0}, raw_rate=210.0)["meets_target"]
    assert not store.against_targets({"per_s": 300.0}, raw_rate=500.0)["meets_target"]
    report = {"n": 10, "raw_embedding": {"seconds": 0.1, "per_s": 100.0},
              "single": {"seconds": 0.2, "per_s": 50.0, "ratio_to_raw": 0.5,
                         "meets_target": False},
              "store_many": {"batch": 5, "seconds": 0.1, "per_s": 99.0, "ratio_to_raw": 0.99,
                             "meets_target": True}}
    rows = store.summary_rows(report)
    assert [r[0] for r in rows] == ["raw embedding (in-process, all cores)",
                                    "client.store, wait=False", "client.store_many, 5/call"]
    assert [r[-1] for r in rows] == ["", "no", "yes"]
