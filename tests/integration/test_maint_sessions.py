"""``compact_sessions`` and ``repair_sessions`` on the real PostgreSQL.

Compaction: the [summary] + last ``keep`` shape, chunking, idempotence, dry runs, the
extractive fallback, LLM outages and appends while it runs. Repair: each phase on a
deliberately broken session (messages JSON written with SQL), all phases at once,
idempotence, dry runs, the incremental sweep and agents storing while it runs.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text

from memoryd.errors import LLMUnavailable, ValidationError
from memoryd.memory.embeddings import to_pgvector
from memoryd.memory.maintenance import run_job
from memoryd.memory.maintenance.compact_sessions import SUMMARY_PREFIX
from memoryd.memory.maintenance.repair_phases import TRUNCATION_MARKER
from memoryd.memory.store import MemoryStore
from memoryd.memory.writes import content_hash
from tests.support.maint import FakeLLM, frozen_clock, scalar
from tests.support.maint import memory_row as _memory

AGENT = "agent-sess"
OTHER = "agent-sess-other"
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def frozen_now() -> Iterator[datetime]:
    yield from frozen_clock()


def _chat(store: MemoryStore, session_id: str, n: int, agent: str = AGENT,
          size: int = 0, word: str = "Message") -> list[str]:
    """``n`` alternating user/assistant messages stored into the session."""
    pad = " filler" * (size // 7)
    roles = ("user", "assistant")
    # one batch: one embedding call and one transaction keep the tests quick
    return [str(r.id) for r in store.store_many(agent, [
        {"content": f"{word} {i} of {session_id}.{pad}", "role": roles[i % 2],
         "session_id": session_id} for i in range(n)])]


def _session(store: MemoryStore, session_id: str, agent: str = AGENT) -> Any:
    with store.session() as session:
        return session.execute(text(
            "SELECT * FROM sessions WHERE agent_id = :a AND session_id = :s"),
            {"a": agent, "s": session_id}).mappings().one()


def _ids(store: MemoryStore, session_id: str, agent: str = AGENT) -> list[str]:
    return [m["id"] for m in _session(store, session_id, agent)["messages"]]


def _count(store: MemoryStore, sql: str, **params: Any) -> int:
    return int(scalar(store, sql, **params))


def _snapshot(store: MemoryStore) -> list[tuple[Any, ...]]:
    with store.session() as session:
        memories = session.execute(text(
            "SELECT id::text, content, content_hash, embedding::text FROM memories ORDER BY 1"))
        sessions = session.execute(text(
            "SELECT agent_id, session_id, messages::text, message_count, compacted_at, "
            "repaired_at FROM sessions ORDER BY 1, 2"))
        evicted = session.execute(text("SELECT count(*) FROM evicted_memories")).scalar_one()
        return [tuple(r) for r in memories] + [tuple(r) for r in sessions] + [(evicted,)]


# --- compact_sessions --------------------------------------------------------------------


def test_compaction_keeps_the_last_ten_behind_one_summary(store: MemoryStore,
                                                          frozen_now: datetime) -> None:
    ids = _chat(store, "s-long", 35)
    small = _chat(store, "s-small", 12)
    theirs = _chat(store, "s-long", 35, agent=OTHER)
    fake = FakeLLM()
    run = run_job(store, "compact_sessions", agent_id=AGENT, llm=fake)

    assert run.stats["compacted"] == 1 and run.stats["summarized"] == 25
    assert run.stats["kept"] == 10 and run.stats["llm"] == "fake-model"
    assert len(run.stats["summary_ids"]) == 1
    summary_id = run.stats["summary_ids"][0]
    assert _ids(store, "s-long") == [summary_id, *ids[-10:]]
    row = _session(store, "s-long")
    assert row["message_count"] == 11 and row["compacted_at"] == frozen_now
    assert row["messages"][0]["role"] == "system"

    summary = _memory(store, summary_id)
    assert summary["content"] == f"{SUMMARY_PREFIX}\nChunk summary 1."
    assert (summary["role"], summary["category"], summary["importance"]) == (
        "system", "summary", 0.9)
    assert summary["source"] == "session:s-long" and summary["session_id"] is None
    assert "Message 0 of s-long." in fake.prompts[0]
    assert "Message 25 of s-long." not in fake.prompts[0]  # the kept ten are not summarized
    # summarized messages stay in the memories table
    assert all(_memory(store, m) is not None for m in ids)
    # below the threshold, and another agent's session: untouched
    assert _ids(store, "s-small") == small
    assert _ids(store, "s-long", OTHER) == theirs


def test_compacted_messages_keep_their_places_in_recalls_positions(
        store: MemoryStore) -> None:
    ids = _chat(store, "s-long", 35)
    run = run_job(store, "compact_sessions", agent_id=AGENT, llm=FakeLLM())
    summary_id = run.stats["summary_ids"][0]
    assert scalar(store, "SELECT message_ids FROM sessions WHERE agent_id = :a "
                  "AND session_id = 's-long'", a=AGENT) == [*ids[:25], summary_id, *ids[-10:]]
    store.forget(AGENT, ids[3])
    assert ids[3] not in scalar(store, "SELECT message_ids FROM sessions WHERE agent_id = :a "
                                "AND session_id = 's-long'", a=AGENT)


def test_second_compaction_changes_nothing(store: MemoryStore) -> None:
    _chat(store, "s-long", 31)
    run_job(store, "compact_sessions", agent_id=AGENT, llm=FakeLLM())
    before = _snapshot(store)
    fake = FakeLLM()
    again = run_job(store, "compact_sessions", agent_id=AGENT, llm=fake)
    assert again.stats["compacted"] == 0 and fake.prompts == []
    assert _snapshot(store) == before


def test_compaction_of_a_compacted_session_folds_the_old_summary_in(store: MemoryStore) -> None:
    _chat(store, "s-long", 31)
    first = run_job(store, "compact_sessions", agent_id=AGENT, llm=FakeLLM())
    _chat(store, "s-long", 25, word="Later message")  # 11 + 25 = 36 again
    fake = FakeLLM(word="Second summary")
    second = run_job(store, "compact_sessions", agent_id=AGENT, llm=fake)
    assert second.stats["summarized"] == 26 and second.stats["kept"] == 10
    assert "Chunk summary 1." in fake.prompts[0]  # the earlier summary is summarized too
    assert _ids(store, "s-long")[0] == second.stats["summary_ids"][0]
    assert first.stats["summary_ids"][0] not in _ids(store, "s-long")


SMALL_CHUNKS = {"chunk_chars": 1000, "threshold": 12, "keep": 4}


def test_long_histories_are_summarized_in_chunks(store: MemoryStore) -> None:
    _chat(store, "s-big", 16, size=300)
    fake = FakeLLM()
    run = run_job(store, "compact_sessions", agent_id=AGENT, llm=fake, params=SMALL_CHUNKS)
    assert len(fake.prompts) == 4  # 12 messages of ~320 characters, 1,000 per chunk
    assert run.stats["summarized"] == 12 and run.stats["kept"] == 4
    summary = _memory(store, run.stats["summary_ids"][0])
    parts = summary["content"].removeprefix(f"{SUMMARY_PREFIX}\n").split("\n\n")
    assert parts == [f"Chunk summary {n}." for n in range(1, len(fake.prompts) + 1)]


def test_on_demand_compaction_of_one_session(store: MemoryStore) -> None:
    _chat(store, "s-a", 31)
    _chat(store, "s-b", 31)
    with pytest.raises(ValidationError, match="agent_id"):
        run_job(store, "compact_sessions", params={"session_id": "s-a"}, llm=FakeLLM())
    run = run_job(store, "compact_sessions", agent_id=AGENT, params={"session_id": "s-a"},
                  llm=FakeLLM())
    assert run.stats["compacted"] == 1
    assert _session(store, "s-a")["message_count"] == 11
    assert _session(store, "s-b")["message_count"] == 31


def test_compaction_with_the_extractive_fallback(store: MemoryStore) -> None:
    _chat(store, "s-long", 30)
    run = run_job(store, "compact_sessions", agent_id=AGENT)  # no API key in tests
    assert run.stats["llm"] == "extractive" and run.stats["compacted"] == 1
    content = _memory(store, run.stats["summary_ids"][0])["content"]
    assert content.startswith(f"{SUMMARY_PREFIX}\nMessage 0 of s-long.")


def test_compaction_dry_run_changes_nothing(store: MemoryStore) -> None:
    _chat(store, "s-long", 35)
    before = _snapshot(store)
    fake = FakeLLM()
    run = run_job(store, "compact_sessions", agent_id=AGENT, dry_run=True, llm=fake)
    assert (run.stats["compacted"], run.stats["summarized"], run.stats["kept"]) == (1, 25, 10)
    assert fake.prompts == [] and _snapshot(store) == before


def test_llm_unavailable_leaves_the_session_as_it_was(store: MemoryStore) -> None:
    _chat(store, "s-big", 16, size=300)
    before = _snapshot(store)
    with pytest.raises(LLMUnavailable):
        run_job(store, "compact_sessions", agent_id=AGENT, llm=FakeLLM(fail_on=1),
                params=SMALL_CHUNKS)
    assert _snapshot(store) == before  # no summary memory, no rewritten list


def test_messages_appended_during_compaction_are_kept(store: MemoryStore) -> None:
    ids = _chat(store, "s-live", 30)
    late: list[str] = []

    def agent_appends() -> None:
        if not late:
            late.append(str(store.store(AGENT, "Typed while compacting.", role="user",
                                        session_id="s-live").id))

    run = run_job(store, "compact_sessions", agent_id=AGENT, llm=FakeLLM(during=agent_appends))
    assert run.stats["compacted"] == 1 and run.stats["kept"] == 11
    assert _ids(store, "s-live") == [run.stats["summary_ids"][0], *ids[-10:], *late]
    assert _session(store, "s-live")["message_count"] == 12


# --- repair_sessions: helpers -------------------------------------------------------------


def _put(store: MemoryStore, content: str, agent: str = AGENT, **fields: Any) -> str:
    return str(store.store(agent, content, **fields).id)


def _ref(memory_id: str, role: str | None, minute: int) -> dict[str, Any]:
    return {"id": memory_id, "role": role, "ts": (T0 + timedelta(minutes=minute)).isoformat()}


def _write_session(store: MemoryStore, session_id: str, messages: list[Any],
                   agent: str = AGENT, count: int | None = None,
                   updated: str = "now()") -> None:
    with store.session() as session:
        session.execute(text(f"""
            INSERT INTO sessions (agent_id, session_id, messages, message_count, updated_at)
            VALUES (:a, :s, CAST(:m AS jsonb), :n, {updated})
            ON CONFLICT (agent_id, session_id) DO UPDATE
            SET messages = EXCLUDED.messages, message_count = EXCLUDED.message_count,
                updated_at = EXCLUDED.updated_at
        """), {"a": agent, "s": session_id, "m": json.dumps(messages),
               "n": len(messages) if count is None else count})


def _repair(store: MemoryStore, **kwargs: Any) -> Any:
    run = run_job(store, "repair_sessions", **kwargs)
    assert run.status == "ok"
    return run


# --- repair_sessions: one phase at a time ---------------------------------------------------


def test_phase_1_drops_references_without_an_id(store: MemoryStore) -> None:
    a, b = _put(store, "Alpha question?"), _put(store, "Beta answer.")
    _write_session(store, "s1", [_ref(a, "user", 0), {"role": "user", "ts": "x"},
                                 {"id": "", "role": "user"}, "garbage", {"id": None},
                                 _ref(b, "assistant", 1)])
    run = _repair(store, agent_id=AGENT)
    assert run.stats["missing_id"] == 4 and run.stats["sessions_repaired"] == 1
    assert _ids(store, "s1") == [a, b]
    assert _session(store, "s1")["message_count"] == 2


def test_a_messages_value_that_is_not_a_list_is_repaired(store: MemoryStore) -> None:
    a = _put(store, "Lost in an object.")
    with store.session() as session:
        session.execute(text(
            "INSERT INTO sessions (agent_id, session_id, messages, message_count) VALUES "
            "(:a, 'obj', CAST(:m AS jsonb), 1), (:a, 'scalar', CAST('\"oops\"' AS jsonb), 3)"),
            {"a": AGENT, "m": json.dumps(_ref(a, "user", 0))})
    run = _repair(store, agent_id=AGENT)
    assert run.stats["sessions_repaired"] == 2
    assert _ids(store, "obj") == [a]
    assert _session(store, "scalar")["messages"] == []


def test_phase_2_drops_duplicate_ids_keeping_the_first(store: MemoryStore) -> None:
    a, b = _put(store, "First question?"), _put(store, "First answer.")
    _write_session(store, "s2", [_ref(a, "user", 0), _ref(b, "assistant", 1),
                                 _ref(a, "user", 2), _ref(b, "assistant", 3)])
    run = _repair(store, agent_id=AGENT)
    assert run.stats["duplicates"] == 2
    assert _ids(store, "s2") == [a, b]


def test_phase_3_merges_consecutive_same_role_messages(store: MemoryStore) -> None:
    a = _put(store, "I need a hotel in Porto.")
    b = _put(store, "Near the river, please.")
    c = _put(store, "Here are three options.")
    s1 = _put(store, "System note one.")
    s2 = _put(store, "System note two.")
    old_embedding = _memory(store, a)["embedding"]
    _write_session(store, "s3", [_ref(a, "user", 0), _ref(b, "user", 1),
                                 _ref(c, "assistant", 2), _ref(s1, "system", 3),
                                 _ref(s2, "system", 4)])
    run = _repair(store, agent_id=AGENT)
    assert run.stats["merged"] == 1 and run.stats["merge_skipped"] == 0
    assert _ids(store, "s3") == [a, c, s1, s2]  # system messages are never merged
    first = _memory(store, a)
    merged_text = "I need a hotel in Porto.\nNear the river, please."
    assert first["content"] == merged_text
    assert first["content_hash"] == content_hash(merged_text)
    expected = to_pgvector(store.embedder.embed([merged_text])[0])
    assert np.allclose(_vector(first["embedding"]), _vector(expected), atol=1e-5)
    assert not np.allclose(_vector(first["embedding"]), _vector(old_embedding))
    assert _memory(store, b) is None
    assert _count(store, "SELECT count(*) FROM evicted_memories WHERE memory_id = :m "
                  "AND reason = 'session_merge'", m=b) == 1


def _vector(value: Any) -> Any:
    return np.array(json.loads(value) if isinstance(value, str) else value, dtype=np.float32)


def test_phase_3_skips_a_merge_whose_text_already_exists(store: MemoryStore) -> None:
    a, b = _put(store, "Part one."), _put(store, "Part two.")
    clash = _put(store, "Part one.\nPart two.")  # the merged text, already a memory
    _write_session(store, "s3c", [_ref(a, "user", 0), _ref(b, "user", 1)])
    run = _repair(store, agent_id=AGENT)
    assert run.stats["merged"] == 0 and run.stats["merge_skipped"] == 1
    assert _ids(store, "s3c") == [a, b]
    assert _memory(store, a)["content"] == "Part one." and _memory(store, clash) is not None
    assert run.stats["sessions_repaired"] == 0  # nothing else was wrong: not rewritten


def test_phase_3_never_merges_pinned_or_decision_memories(store: MemoryStore) -> None:
    a = _put(store, "We decided on Porto.", category="decision")
    b = _put(store, "Pinned: budget is 2000 EUR.")
    c = _put(store, "Ordinary follow-up.")
    with store.session() as session:
        session.execute(text("UPDATE memories SET pinned = true WHERE id = :id"), {"id": b})
    _write_session(store, "s3p", [_ref(a, "user", 0), _ref(b, "user", 1), _ref(c, "user", 2)])
    run = _repair(store, agent_id=AGENT)
    assert run.stats["merged"] == 0
    assert _ids(store, "s3p") == [a, b, c]


def test_phase_4_drops_orphans(store: MemoryStore) -> None:
    a, b = _put(store, "Still here."), _put(store, "Also here.")
    gone = _put(store, "Soon forgotten.")
    with store.session() as session:
        session.execute(text("DELETE FROM memories WHERE id = :id"), {"id": gone})
    _write_session(store, "s4", [_ref(a, "user", 0), _ref(gone, "assistant", 1),
                                 _ref(str(uuid.uuid4()), "assistant", 2),
                                 {"id": "not-a-uuid", "role": "assistant", "ts": "x"},
                                 _ref(b, "assistant", 3)])
    run = _repair(store, agent_id=AGENT)
    assert run.stats["orphans"] == 3
    assert _ids(store, "s4") == [a, b]


def test_phase_5_restores_timestamp_order(store: MemoryStore) -> None:
    a, b, c = (_put(store, f"Turn {n}.") for n in "abc")
    _write_session(store, "s5", [_ref(c, "user", 2), _ref(a, "user", 0),
                                 _ref(b, "assistant", 1)])
    run = _repair(store, agent_id=AGENT)
    assert run.stats["reordered"] == 3
    # sorting first made a and c neighbours? no: a(user), b(assistant), c(user)
    assert _ids(store, "s5") == [a, b, c]


def test_phase_6_truncates_oversized_messages_and_keeps_the_full_text(
        store: MemoryStore) -> None:
    a = _put(store, "Short question?")
    big_text = "Long log line with details. " * 200  # 5,600 bytes
    big = _put(store, big_text)
    _write_session(store, "s6", [_ref(a, "user", 0), _ref(big, "tool", 1)])
    run = _repair(store, agent_id=AGENT, params={"max_message_bytes": 2000})
    assert run.stats["truncated"] == 1
    row = _memory(store, big)
    assert row["content"].endswith(TRUNCATION_MARKER)
    assert len(row["content"].encode()) <= 2000
    assert row["content_hash"] == content_hash(row["content"])
    with store.session() as session:
        kept = session.execute(text(
            "SELECT data->>'content' FROM evicted_memories WHERE memory_id = :m "
            "AND reason = 'truncated'"), {"m": big}).scalar_one()
    assert kept == big_text
    assert _ids(store, "s6") == [a, big]


def test_phase_6_default_limit_is_500_kb(store: MemoryStore) -> None:
    a = _put(store, "Please paste the log.")
    big = _put(store, "placeholder log")
    with store.session() as session:  # bigger than store() accepts: written behind its back
        session.execute(text("UPDATE memories SET content = repeat('x', 600000), "
                             "content_hash = 'h-big' WHERE id = :id"), {"id": big})
    _write_session(store, "s6d", [_ref(a, "user", 0), _ref(big, "tool", 1)])
    run = _repair(store, agent_id=AGENT)
    assert run.stats["truncated"] == 1
    assert _count(store, "SELECT octet_length(content) FROM memories WHERE id = :id",
                  id=big) <= 512_000
    assert _count(store, "SELECT length(data->>'content') FROM evicted_memories "
                  "WHERE memory_id = :m", m=big) == 600_000


def test_phase_7_fixes_the_count_and_leaves_healthy_sessions_alone(
        store: MemoryStore, frozen_now: datetime) -> None:
    a, b = _put(store, "Hello?"), _put(store, "Hi!")
    _write_session(store, "s-count", [_ref(a, "user", 0), _ref(b, "assistant", 1)], count=7)
    _write_session(store, "s-fine", [_ref(a, "user", 0), _ref(b, "assistant", 1)])
    run = _repair(store, agent_id=AGENT)
    assert run.stats["recounted"] == 1 and run.stats["sessions_repaired"] == 1
    assert run.stats["sessions_checked"] == 2
    fixed = _session(store, "s-count")
    assert fixed["message_count"] == 2 and fixed["repaired_at"] == frozen_now
    assert _session(store, "s-fine")["repaired_at"] is None


# --- repair_sessions: everything at once -----------------------------------------------------


def _broken_world(store: MemoryStore) -> dict[str, str]:
    ids = {name: _put(store, text_) for name, text_ in {
        "q1": "Where should we eat tonight?", "q2": "Somewhere with vegan options.",
        "a1": "Try the place on Rua Augusta.", "q3": "Thanks, booking it.",
        "log": "Tool output line. " * 300}.items()}
    gone = _put(store, "A forgotten message.")
    with store.session() as session:
        session.execute(text("DELETE FROM memories WHERE id = :id"), {"id": gone})
    ids["gone"] = gone
    _write_session(store, "broken", [
        _ref(ids["a1"], "assistant", 3),     # out of order
        _ref(ids["q1"], "user", 1),
        {"role": "user", "ts": "x"},          # no id
        _ref(ids["q2"], "user", 2),           # same role as q1 once sorted: merged
        _ref(ids["gone"], "assistant", 4),    # orphan
        _ref(ids["q1"], "user", 5),           # duplicate
        _ref(ids["log"], "tool", 6),          # oversized at 2,000 bytes
        _ref(ids["q3"], "user", 7),
    ], count=99)
    return ids


def test_all_phases_on_one_broken_session(store: MemoryStore) -> None:
    ids = _broken_world(store)
    run = _repair(store, agent_id=AGENT, params={"max_message_bytes": 2000})
    stats = run.stats
    assert (stats["missing_id"], stats["duplicates"], stats["orphans"]) == (1, 1, 1)
    assert stats["merged"] == 1 and stats["truncated"] == 1 and stats["reordered"] > 0
    assert stats["sessions_repaired"] == 1
    assert _ids(store, "broken") == [ids["q1"], ids["a1"], ids["log"], ids["q3"]]
    assert _memory(store, ids["q1"])["content"] == (
        "Where should we eat tonight?\nSomewhere with vegan options.")
    assert _session(store, "broken")["message_count"] == 4


def test_second_repair_changes_nothing(store: MemoryStore) -> None:
    _broken_world(store)
    _repair(store, agent_id=AGENT, params={"max_message_bytes": 2000})
    before = _snapshot(store)
    again = _repair(store, agent_id=AGENT, params={"max_message_bytes": 2000})
    assert again.stats["sessions_repaired"] == 0
    assert _snapshot(store) == before


def test_repair_dry_run_reports_and_changes_nothing(store: MemoryStore) -> None:
    _broken_world(store)
    before = _snapshot(store)
    run = _repair(store, agent_id=AGENT, dry_run=True, params={"max_message_bytes": 2000})
    assert run.stats["sessions_repaired"] == 1 and run.stats["merged"] == 1
    assert run.stats["truncated"] == 1 and run.stats["orphans"] == 1
    assert _snapshot(store) == before


def test_repair_scope_and_on_demand(store: MemoryStore) -> None:
    a = _put(store, "Theirs.", agent=OTHER)
    _write_session(store, "theirs", [_ref(a, "user", 0), _ref(a, "user", 1)], agent=OTHER)
    b = _put(store, "Mine.")
    _write_session(store, "mine", [_ref(b, "user", 0), _ref(b, "user", 1)])
    _write_session(store, "mine-too", [_ref(b, "user", 0), _ref(b, "user", 1)])
    with pytest.raises(ValidationError, match="agent_id"):
        run_job(store, "repair_sessions", params={"session_id": "mine"})
    run = _repair(store, agent_id=AGENT, params={"session_id": "mine"})
    assert run.stats["sessions_checked"] == 1 and run.stats["sweep_complete"] is False
    assert _ids(store, "mine") == [b]
    assert len(_ids(store, "mine-too")) == 2
    assert len(_ids(store, "theirs", OTHER)) == 2


def test_sweeps_only_check_sessions_updated_since_the_last_complete_sweep(
        store: MemoryStore) -> None:
    a = _put(store, "Only message.")
    _write_session(store, "quiet", [_ref(a, "user", 0)])
    first = _repair(store)
    assert first.stats["sessions_checked"] == 1 and first.stats["sweep_complete"] is True
    # broken behind the sweep's back, but not updated since: a later sweep skips it ...
    _write_session(store, "quiet", [_ref(a, "user", 0), _ref(a, "user", 0)],
                   updated="now() - interval '1 day'")
    assert _repair(store).stats["sessions_checked"] == 0
    # ... until an agent writes to it again
    with store.session() as session:
        session.execute(text("UPDATE sessions SET updated_at = now()"))
    assert _repair(store).stats["duplicates"] == 1
    # an incomplete sweep does not move the starting point: with the complete sweeps an
    # hour back, a session broken half an hour ago is still found after one
    with store.session() as session:
        session.execute(text("UPDATE maintenance_runs "
                             "SET started_at = started_at - interval '1 hour'"))
    _write_session(store, "late", [_ref(a, "user", 0), _ref(a, "user", 0)],
                   updated="now() - interval '30 minutes'")
    cut_short = _repair(store, time_budget_s=1e-9)
    assert not cut_short.complete and cut_short.stats["sweep_complete"] is False
    assert _repair(store).stats["duplicates"] == 1
    assert _ids(store, "late") == [a]


def test_concurrent_stores_during_a_repair(store: MemoryStore) -> None:
    for n in range(8):
        ids = [str(r.id) for r in store.store_many(
            AGENT, [{"content": f"Session {n} turn {t}."} for t in range(4)])]
        _write_session(store, f"s-{n}", [_ref(ids[t], "user" if t < 2 else "assistant", t)
                                         for t in (3, 0, 1, 2)])
    written: list[str] = []
    errors: list[BaseException] = []

    def agent_writes() -> None:
        try:
            for i in range(16):
                # user then assistant: appended turns alternate, so none is merged
                written.append(_put(store, f"Live message {i}.",
                                    role="user" if i < 8 else "assistant",
                                    session_id=f"s-{i % 8}"))
        except BaseException as exc:
            errors.append(exc)

    writer = threading.Thread(target=agent_writes)
    writer.start()
    run = _repair(store, agent_id=AGENT)
    writer.join()
    assert not errors
    assert run.stats["sessions_repaired"] + run.stats["conflicts"] == 8
    with store.session() as session:
        refs = session.execute(text(
            "SELECT e->>'id' FROM sessions, jsonb_array_elements(messages) e")).scalars().all()
    assert set(written) <= set(refs)
    # whatever the interleaving, the next run leaves a fully repaired fleet
    _repair(store, agent_id=AGENT)
    final = _repair(store, agent_id=AGENT)
    assert final.stats["sessions_repaired"] == 0 and final.stats["conflicts"] == 0
