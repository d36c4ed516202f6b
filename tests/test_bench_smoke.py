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
