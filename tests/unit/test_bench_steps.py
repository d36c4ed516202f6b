"""Smoke test of the LoCoMo benchmark on a tiny synthetic dataset (LoCoMo's JSON shape,
made-up content: the real data set is CC BY-NC and stays out of the repository)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

# bench/ is not an installed package: make the repository root importable however
# pytest was started (``pytest`` alone does not put the working directory on sys.path).
from bench import locomo


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
