"""The ``cortex`` job on the real PostgreSQL: stale cleanup, session consolidation (facts)
and session indexing (gists), once per session, with a fake LLM and the extractive
fallback; what it must never touch, dry runs, LLM outages, concurrent agents."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
from sqlalchemy import text

from memoryd.errors import LLMUnavailable
from memoryd.memory.maintenance import run_job
from memoryd.memory.store import MemoryStore
from tests.support.maint import FakeLLM as SharedFakeLLM
from tests.support.maint import frozen_clock

AGENT = "agent-cortex"
OTHER = "agent-cortex-other"
FACTS = "The user lives in Lisbon.\nThe user prefers green tea."
GIST = "The user talked about moving to Lisbon and their tea habits."


# The shared fake with this module's defaults: canned facts or gist depending on the
# system prompt; from call ``fail_on`` (0-based) on it raises ``LLMUnavailable``.
FakeLLM = partial(SharedFakeLLM, facts=FACTS, gist=GIST, error="rate limited",
                  retry_after=3.0)


@pytest.fixture(autouse=True)
def frozen_now() -> Iterator[datetime]:
    yield from frozen_clock()


CHAT = ["Hi, I am moving to Lisbon next month.", "Lisbon is lovely! Need help?",
        "I prefer green tea in the mornings.", "Noted: green tea in the mornings."]


def _session(store: MemoryStore, session_id: str, messages: list[str] = CHAT,
             agent: str = AGENT) -> list[str]:
    roles = ["user", "assistant"]
    return [str(store.store(agent, m, role=roles[i % 2], session_id=session_id,
                            category="context").id) for i, m in enumerate(messages)]


def _session_row(store: MemoryStore, session_id: str, agent: str = AGENT) -> Any:
    with store.session() as session:
        return session.execute(text(
            "SELECT * FROM sessions WHERE agent_id = :a AND session_id = :s"),
            {"a": agent, "s": session_id}).mappings().one()


def _memories(store: MemoryStore, agent: str = AGENT, **where: Any) -> list[Any]:
    clause = " AND ".join(f"{k} = :{k}" for k in where) or "TRUE"
    with store.session() as session:
        return list(session.execute(text(
            f"SELECT * FROM memories WHERE agent_id = :agent AND {clause} ORDER BY content"),
            {"agent": agent, **where}).mappings())


def _snapshot(store: MemoryStore) -> list[tuple[Any, ...]]:
    with store.session() as session:
        rows = session.execute(text(
            "SELECT id::text, content FROM memories ORDER BY 1")).all()
        sessions = session.execute(text(
            "SELECT session_id, summary, consolidated_at, indexed_at FROM sessions "
            "ORDER BY 1")).all()
        evicted = session.execute(text("SELECT count(*) FROM evicted_memories")).scalar_one()
    return [tuple(r) for r in rows] + [tuple(r) for r in sessions] + [(evicted,)]


# --- stale cleanup -------------------------------------------------------------------


def _stale_world(store: MemoryStore) -> dict[str, str]:
    old = datetime.now(UTC) - timedelta(days=100)

    def put(content: str, agent: str = AGENT, **fields: Any) -> str:
        return str(store.store(agent, content, created_at=old, **fields).id)

    ids = {
        "stale": put("An unimportant old remark about the weather.", importance=0.2),
        "decision": put("Decided long ago: tabs over spaces.", category="decision",
                        importance=0.1),
        "pinned": put("Pinned low-importance note.", importance=0.1),
        "important": put("Old but important: the user is allergic to nuts.", importance=0.8),
        "accessed": put("Old low-importance note recalled last week.", importance=0.2),
        "recent": str(store.store(AGENT, "A fresh low-importance note.", importance=0.1).id),
        "other": put("Another agent's unimportant old remark.", agent=OTHER, importance=0.1),
    }
    with store.session() as session:
        session.execute(text("UPDATE memories SET pinned = true WHERE id = :id"),
                        {"id": ids["pinned"]})
        session.execute(text("UPDATE memories SET last_accessed_at = now() - interval '7 days' "
                             "WHERE id = :id"), {"id": ids["accessed"]})
    return ids


def test_stale_cleanup_evicts_only_stale_unprotected_memories(store: MemoryStore) -> None:
    ids = _stale_world(store)
    run = run_job(store, "cortex", agent_id=AGENT, llm=FakeLLM())
    assert run.stats["stale_removed"] == 1
    left = {str(r["id"]) for r in _memories(store)} | {str(r["id"])
                                                      for r in _memories(store, OTHER)}
    assert ids["stale"] not in left
    assert {k for k, v in ids.items() if v in left} == {
        "decision", "pinned", "important", "accessed", "recent", "other"}
    with store.session() as session:
        reason = session.execute(text(
            "SELECT reason FROM evicted_memories WHERE memory_id = :id"),
            {"id": ids["stale"]}).scalar_one()
    assert reason == "stale"


def test_stale_cleanup_works_in_small_batches(store: MemoryStore) -> None:
    old = datetime.now(UTC) - timedelta(days=120)
    for i in range(7):
        store.store(AGENT, f"Stale note number {i}.", importance=0.1, created_at=old)
    run = run_job(store, "cortex", agent_id=AGENT, params={"batch_size": 3}, llm=FakeLLM())
    assert run.stats["stale_removed"] == 7 and run.complete


# --- consolidation and indexing ----------------------------------------------------------


def test_sessions_are_consolidated_and_indexed(store: MemoryStore,
                                               frozen_now: datetime) -> None:
    _session(store, "s-long")
    _session(store, "s-short", ["Hi there.", "Hello! How can I help?"])
    _session(store, "s-one", ["Just one message."])
    fake = FakeLLM()
    run = run_job(store, "cortex", agent_id=AGENT, llm=fake)

    assert run.stats["sessions_consolidated"] == 1
    assert run.stats["facts_extracted"] == 2 and run.stats["facts_stored"] == 2
    assert run.stats["sessions_indexed"] == 2
    assert run.stats["llm"] == "fake-model"
    facts = _memories(store, category="fact")
    assert [f["content"] for f in facts] == ["The user lives in Lisbon.",
                                             "The user prefers green tea."]
    assert all(f["importance"] == 0.6 and f["source"] == "session:s-long"
               and f["session_id"] is None for f in facts)
    # the prompt lists the session's messages in order
    fact_prompt = next(p for s, p in fake.calls if "durable facts" in s)
    assert fact_prompt.index("moving to Lisbon") < fact_prompt.index("green tea in the")

    long_row = _session_row(store, "s-long")
    assert long_row["consolidated_at"] == frozen_now and long_row["indexed_at"] == frozen_now
    assert long_row["summary"] == GIST
    assert long_row["message_count"] == 4  # nothing appended by the job
    index = store.get_by_key(AGENT, "session-index:s-long")
    assert index.category == "reflection" and index.content == GIST
    assert index.source == "session:s-long"
    short_row = _session_row(store, "s-short")
    assert short_row["consolidated_at"] is None and short_row["indexed_at"] == frozen_now
    one_row = _session_row(store, "s-one")
    assert one_row["indexed_at"] is None and one_row["consolidated_at"] is None


def test_each_session_is_processed_once(store: MemoryStore) -> None:
    _session(store, "s-long")
    run_job(store, "cortex", agent_id=AGENT, llm=FakeLLM())
    before = _snapshot(store)
    fake = FakeLLM()
    again = run_job(store, "cortex", agent_id=AGENT, llm=fake)
    assert fake.calls == []
    assert again.stats["sessions_consolidated"] == again.stats["sessions_indexed"] == 0
    assert _snapshot(store) == before
    # more messages later do not make it a candidate again
    _session(store, "s-long", ["I also work at Acme.", "Good to know."])
    fake = FakeLLM()
    run_job(store, "cortex", agent_id=AGENT, llm=fake)
    assert fake.calls == []


def test_inactive_sessions_and_other_agents_are_left_alone(store: MemoryStore) -> None:
    _session(store, "s-old")
    _session(store, "s-theirs", agent=OTHER)
    with store.session() as session:
        session.execute(text("UPDATE sessions SET updated_at = now() - interval '2 days' "
                             "WHERE session_id = 's-old'"))
    fake = FakeLLM()
    run = run_job(store, "cortex", agent_id=AGENT, llm=fake)
    assert fake.calls == [] and run.stats["sessions_indexed"] == 0
    assert _session_row(store, "s-theirs", OTHER)["indexed_at"] is None
    assert _memories(store, OTHER, category="fact") == []


def test_extractive_fallback_extracts_pattern_facts(store: MemoryStore) -> None:
    _session(store, "s-fallback", ["Hello. My name is Ada and I live in Berlin.",
                                   "Nice to meet you!", "Do you know what I like?",
                                   "Tea time. I prefer green tea.", "I enjoy long walks."])
    run = run_job(store, "cortex", agent_id=AGENT)  # no API key in tests
    assert run.stats["llm"] == "extractive"
    # "I enjoy long walks." is a message of its own already: dedup keeps one copy
    assert run.stats["facts_extracted"] == 3 and run.stats["facts_stored"] == 2
    facts = _memories(store, category="fact", source="session:s-fallback")
    assert [f["content"] for f in facts] == [
        "I prefer green tea.", "My name is Ada and I live in Berlin."]
    assert _session_row(store, "s-fallback")["summary"] == (
        "Hello. My name is Ada and I live in Berlin.")


def test_dry_run_reports_and_changes_nothing(store: MemoryStore) -> None:
    _stale_world(store)
    _session(store, "s-long")
    before = _snapshot(store)
    fake = FakeLLM()
    run = run_job(store, "cortex", agent_id=AGENT, dry_run=True, llm=fake)
    assert run.stats["stale_removed"] == 1
    assert run.stats["sessions_consolidated"] == 1 and run.stats["sessions_indexed"] == 1
    assert fake.calls == []
    assert _snapshot(store) == before


def test_llm_unavailable_propagates_after_committed_sessions(store: MemoryStore) -> None:
    _session(store, "s-a")
    _session(store, "s-b", ["I am a nurse.", "Thanks for sharing.", "I like jazz.", "Nice."])
    with pytest.raises(LLMUnavailable):
        run_job(store, "cortex", agent_id=AGENT, llm=FakeLLM(fail_on=1))
    # s-a finished (facts and marker together); s-b has neither; indexing never started
    assert _session_row(store, "s-a")["consolidated_at"] is not None
    assert _session_row(store, "s-b")["consolidated_at"] is None
    assert {f["source"] for f in _memories(store, category="fact")} == {"session:s-a"}
    assert _memories(store, category="reflection") == []

    retry = run_job(store, "cortex", agent_id=AGENT,
                    llm=FakeLLM(facts="The user is a nurse."))
    assert retry.stats["sessions_consolidated"] == 1 and retry.stats["sessions_indexed"] == 2
    assert _session_row(store, "s-b")["consolidated_at"] is not None


def test_concurrent_stores_during_a_run(store: MemoryStore) -> None:
    for n in range(4):
        _session(store, f"s-{n}", [f"{m} (session {n})" for m in CHAT])
    errors: list[BaseException] = []
    written: list[str] = []

    def agent_writes() -> None:
        try:
            for i in range(12):
                written.append(str(store.store(AGENT, f"Live message {i}.", role="user",
                                               session_id=f"s-{i % 4}").id))
        except BaseException as exc:
            errors.append(exc)

    writer = threading.Thread(target=agent_writes)
    writer.start()
    run = run_job(store, "cortex", agent_id=AGENT,
                  llm=FakeLLM(facts=f"Fact {uuid.uuid4()}."))
    writer.join()
    assert not errors and run.status == "ok"
    assert run.stats["sessions_consolidated"] == 4 and run.stats["sessions_indexed"] == 4
    with store.session() as session:
        refs = session.execute(text(
            "SELECT e->>'id' FROM sessions, jsonb_array_elements(messages) e "
            "WHERE agent_id = :a"), {"a": AGENT}).scalars().all()
    assert set(written) <= set(refs)


def test_broken_session_rows_do_not_break_the_run(store: MemoryStore) -> None:
    ids = _session(store, "s-broken")
    messages = ["garbage", 5, None, {"id": "not-a-uuid"}, {"role": "user"},
                *({"id": i, "role": "user", "ts": "x"} for i in ids)]
    with store.session() as session:
        session.execute(text("UPDATE sessions SET messages = CAST(:m AS jsonb) "
                             "WHERE session_id = 's-broken'"), {"m": json.dumps(messages)})
        session.execute(text(
            "INSERT INTO sessions (agent_id, session_id, messages, message_count) "
            "VALUES (:a, 's-object', CAST('{\"id\": 1}' AS jsonb), 9)"), {"a": AGENT})
    fake = FakeLLM()
    run = run_job(store, "cortex", agent_id=AGENT, llm=fake)
    assert run.stats["sessions_consolidated"] == 1 and run.stats["sessions_indexed"] == 1
    assert "moving to Lisbon" in fake.calls[0][1]
