"""The LoCoMo benchmark end to end on generated data; the seed's SQL hash against memoryd's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# bench/ is not an installed package: make the repository root importable however
# pytest was started (``pytest`` alone does not put the working directory on sys.path).
from bench import locomo


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


def test_locomo_cross_validation_end_to_end(tiny_locomo: Path, tmp_path: Path) -> None:
    from bench import locomo_cv

    out = tmp_path / "cv.json"
    assert locomo_cv.main(["--data", str(tiny_locomo), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [f["held_out"] for f in report["folds"]] == ["synthetic-1", "synthetic-2"]
    assert all(f["chosen"] in locomo_cv.GRID for f in report["folds"])
    assert set(report["all_questions_by_config"]) == set(locomo_cv.GRID)
    assert 0.0 <= report["cv_worst"] <= report["cv_mean"] <= 1.0


def test_locomo_before_and_after_maintenance_end_to_end(tiny_locomo: Path, tmp_path: Path,
                                                        pg_url: str) -> None:
    from bench.scheduled import scheduled_jobs

    out = tmp_path / "maintain.json"
    assert locomo.main(["--data", str(tiny_locomo), "--out", str(out), "--database-url",
                        pg_url, "--maintain", "--per-job"]) == 0
    report = json.loads(out.read_text())
    assert report["benchmark"] == "locomo-maintain"
    assert (report["samples"], report["turns"], report["questions"]) == (2, 12, 8)
    assert report["jobs"] == scheduled_jobs()
    # every job ran for each agent (a fleet-only job once), and finished
    for job in report["jobs"]:
        runs = [m for m in report["maintenance"] if m["job"] == job]
        assert len(runs) == (1 if runs[0]["scope"] == "fleet" else 2), job
        assert all(m["status"] == "ok" for m in runs), job
    assert [s["after"] for s in report["after_each_job"]] == report["jobs"]
    for side in ("before", "after"):
        for name in ("recall@5", "recall@10", "recall@20"):
            assert 0.0 <= report[side]["overall"][name] <= 1.0
    # 6 turns per agent: before maintenance every evidence turn is in the top 20
    assert report["before"]["overall"]["recall@20"] == 1.0
    # the turns are years old, but their sessions list them: summarize leaves them to the
    # conversation; cortex indexed the sessions, a gist linked to every turn it read
    summarized = [m for m in report["maintenance"] if m["job"] == "summarize"]
    assert all(m["stats"]["archived"] == 0 for m in summarized)
    assert report["memories"]["after"]["archived"] == 0
    assert report["memories"]["after"]["derived_links"] >= 1
    assert len(report["per_question"]) == 8


def test_locomo_maintain_flags_need_maintain(tiny_locomo: Path) -> None:
    with pytest.raises(SystemExit):
        locomo.main(["--data", str(tiny_locomo), "--per-job"])


def test_a_derived_memory_is_credited_only_through_its_links_followed_transitively(
        store: object) -> None:
    import uuid

    from sqlalchemy import text

    from bench.locomo_maintain import credit_of
    from memoryd.memory.store import MemoryStore

    assert isinstance(store, MemoryStore)
    agent = "locomo-credit"
    turns = store.store_many(agent, [
        {"content": f"Turn {i} about topic {i}.", "metadata": {"dia_id": f"D1:{i}"}}
        for i in range(1, 4)])
    owners = {r.id: [f"D1:{i}"] for i, r in enumerate(turns, start=1)}
    survivor, loser, alone = (r.id for r in turns)
    summary = store.store(agent, "A summary of the survivor.").id
    fact = store.store(agent, "A fact with a turn's metadata.",
                       metadata={"dia_id": "D1:3"}).id
    with store.session() as session:
        for source, target in ((summary, survivor), (survivor, loser)):
            session.execute(text(
                "INSERT INTO memory_links (agent_id, source_id, target_id, kind) "
                "VALUES (:a, :s, :t, 'derived_from')"), {"a": agent, "s": source, "t": target})
    stored = locomo.Stored(locomo.Sample("s", (), (), {}), agent, owners)
    credit = credit_of(store, stored)
    assert credit[summary] == ["D1:1", "D1:2"]  # the survivor's turn and its loser's
    assert credit[survivor] == ["D1:1", "D1:2"]
    assert credit[alone] == ["D1:3"]
    assert fact not in credit and uuid.uuid4() not in credit  # metadata earns nothing
