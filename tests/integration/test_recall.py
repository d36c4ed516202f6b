"""Hybrid recall on the real PostgreSQL: ranking, score components, filters,
archiving and expiry, access tracking, recency, fusion modes, both vector plans,
deep mode without an LLM, and ``context``."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from memoryd.config import override_settings
from memoryd.memory import recall as rc
from memoryd.memory.scoring import Candidate
from memoryd.memory.store import MemoryStore
from memoryd.types import Recalled

AGENT = "agent-recall"

DISTRACTORS = [
    "The quarterly budget review is scheduled for next Tuesday afternoon.",
    "Our team moved the weekly sync to the small meeting room on the third floor.",
    "The user's sister lives in Lisbon and works as a nurse.",
    "The staging server was rebooted after the kernel update.",
    "The user went hiking in the Alps last summer with two friends.",
    "Invoices are sent to the accounting department at the end of each month.",
    "The company laptop is a ThinkPad with 32 GB of RAM.",
    "The cat knocked a glass of water off the kitchen table.",
]
TARGET = "The user is allergic to peanuts and must avoid any food containing them."
QUERY = "Which food allergies does the user have?"

WEIGHTS = {"semantic": 0.50, "keyword": 0.25, "recency": 0.10, "importance": 0.10,
           "confidence": 0.05}


def _seed(store: MemoryStore, agent: str = AGENT) -> None:
    store.store_many(agent, [{"content": c} for c in [*DISTRACTORS[:4], TARGET,
                                                      *DISTRACTORS[4:]]])


def _weighted(hit: Recalled) -> float:
    parts = hit.components
    return sum(weight * getattr(parts, name) for name, weight in WEIGHTS.items())


def _set(store: MemoryStore, sql: str, **params: object) -> None:
    with store.session() as session:
        session.execute(text(sql), params)


def test_relevant_memory_ranks_first_with_consistent_scores(store: MemoryStore) -> None:
    _seed(store)
    store.store("agent-other", "The user is allergic to peanuts.")

    hits = store.recall(AGENT, QUERY)
    assert hits, "recall found nothing"
    assert hits[0].content == TARGET
    assert all(hit.memory.agent_id == AGENT for hit in hits)
    assert len({hit.id for hit in hits}) == len(hits)

    for hit in hits:
        parts = hit.components
        for name in WEIGHTS:
            assert 0.0 <= getattr(parts, name) <= 1.0, (name, parts)
        assert hit.score == pytest.approx(_weighted(hit), abs=1e-5)
    scores = [hit.score for hit in hits]
    assert scores == sorted(scores, reverse=True)

    top = hits[0].components
    assert top.keyword == pytest.approx(1.0)  # the best keyword match is normalized to 1
    assert top.semantic > max(hit.components.semantic for hit in hits[1:])
    assert top.recency == pytest.approx(1.0, abs=1e-3)  # stored just now
    assert top.confidence == pytest.approx(1.0)
    assert top.importance == pytest.approx(store.get(AGENT, hits[0].id).importance)


@pytest.mark.parametrize(("query", "expected"), [
    ("What are the user's plans for the budget meeting?", DISTRACTORS[0]),
    ("Where does the user's sister live?", DISTRACTORS[2]),
    ("How much memory does the work laptop have?", DISTRACTORS[6]),
    ("ThinkPad", DISTRACTORS[6]),
])
def test_each_relevant_memory_ranks_first(store: MemoryStore, query: str,
                                          expected: str) -> None:
    _seed(store)
    assert store.recall(AGENT, query, limit=3)[0].content == expected


def test_limit_is_respected(store: MemoryStore) -> None:
    _seed(store)
    assert len(store.recall(AGENT, QUERY, limit=3)) == 3
    assert len(store.recall(AGENT, QUERY, limit=1)) == 1
    assert store.recall(AGENT, QUERY, limit=1)[0].content == TARGET
    assert len(store.recall(AGENT, QUERY, limit=50)) == len(DISTRACTORS) + 1


def test_unknown_agent_recalls_nothing(store: MemoryStore) -> None:
    _seed(store)
    assert store.recall("nobody", QUERY) == []


def test_category_filter(store: MemoryStore) -> None:
    store.store(AGENT, "We decided to keep all services on Python 3.11.", category="decision")
    store.store(AGENT, "The user prefers Python over Java.", category="preference")
    store.store(AGENT, "Python 3.11 was installed on the build server.", category="event")

    hits = store.recall(AGENT, "Python", category="decision")
    assert [h.content for h in hits] == ["We decided to keep all services on Python 3.11."]
    hits = store.recall(AGENT, "Python", category="preference")
    assert [h.memory.category for h in hits] == ["preference"]
    assert len(store.recall(AGENT, "Python")) == 3
    assert store.recall(AGENT, "Python", category="task") == []


def test_tags_filter_requires_every_tag(store: MemoryStore) -> None:
    both = store.store(AGENT, "Rotate the API keys for the payment gateway.",
                       tags=["security", "payments"]).id
    only_security = store.store(AGENT, "Enable two-factor login for all admins.",
                                tags=["security"]).id
    store.store(AGENT, "Refund requests are handled within five days.", tags=["payments"])
    store.store(AGENT, "The payment gateway contract renews in May.")

    ids = {h.id for h in store.recall(AGENT, "security of payments", tags=["security"])}
    assert ids == {both, only_security}
    ids = {h.id for h in store.recall(AGENT, "security of payments",
                                      tags=["security", "payments"])}
    assert ids == {both}
    assert store.recall(AGENT, "payments", tags=["security", "missing"]) == []


def test_session_filter(store: MemoryStore) -> None:
    in_session = store.store(AGENT, "We talked about the trip to Kyoto in April.",
                             session_id="s-kyoto").id
    store.store(AGENT, "The trip to Kyoto was booked through the travel agency.",
                session_id="s-other")
    store.store(AGENT, "Kyoto has many temples worth visiting.")

    hits = store.recall(AGENT, "trip to Kyoto", session_id="s-kyoto")
    assert [h.id for h in hits] == [in_session]
    assert len(store.recall(AGENT, "trip to Kyoto")) == 3


def test_archived_excluded_unless_asked_for(store: MemoryStore) -> None:
    _seed(store)
    target = store.recall(AGENT, QUERY, limit=1)[0].id
    _set(store, "UPDATE memories SET archived_at = now() WHERE id = :id", id=target)

    hits = store.recall(AGENT, QUERY, limit=50)
    assert target not in {h.id for h in hits}
    assert len(hits) == len(DISTRACTORS)

    hits = store.recall(AGENT, QUERY, include_archived=True)
    assert hits[0].id == target
    assert hits[0].memory.archived_at is not None
    # the keyword retriever alone must not leak it either
    assert target not in {h.id for h in store.recall(AGENT, "peanuts allergic")}


def test_expired_memories_are_never_returned(store: MemoryStore) -> None:
    _seed(store)
    past = datetime.now(UTC) - timedelta(minutes=5)
    expired_on_store = store.store(AGENT, "The user is allergic to shellfish.",
                                   expires_at=past).id
    target = store.recall(AGENT, QUERY, limit=1)[0].id
    _set(store, "UPDATE memories SET expires_at = now() - interval '1 second' WHERE id = :id",
         id=target)
    future = store.store(AGENT, "The user is allergic to cats.",
                         expires_at=datetime.now(UTC) + timedelta(days=1)).id

    for include_archived in (False, True):
        ids = {h.id for h in store.recall(AGENT, QUERY, limit=50,
                                          include_archived=include_archived)}
        assert target not in ids
        assert expired_on_store not in ids
        assert future in ids
    assert expired_on_store not in {h.id for h in store.recall(AGENT, "shellfish")}


def test_recall_counts_access_on_returned_rows_only(store: MemoryStore) -> None:
    _seed(store)
    before = {m.id: m for m in store.list(AGENT).items}
    assert all(m.access_count == 0 and m.last_accessed_at is None for m in before.values())

    hits = store.recall(AGENT, QUERY, limit=2)
    returned = {h.id for h in hits}
    assert len(returned) == 2
    after = {m.id: m for m in store.list(AGENT).items}
    for memory_id, memory in after.items():
        if memory_id in returned:
            assert memory.access_count == 1
            assert memory.last_accessed_at is not None
        else:
            assert memory.access_count == 0
            assert memory.last_accessed_at is None

    store.recall(AGENT, QUERY, limit=2)
    assert store.get(AGENT, hits[0].id).access_count == 2


def test_recency_decays_by_category_half_life(store: MemoryStore) -> None:
    old = datetime.now(UTC) - timedelta(days=60)
    store.store(AGENT, "The office wifi network is called Falcon.", category="fact",
                created_at=old)
    store.store(AGENT, "We decided the office wifi network stays on WPA3.",
                category="decision", created_at=old - timedelta(days=300))
    store.store(AGENT, "The office wifi password changed today.", category="fact")
    store.store(AGENT, "Fix the office wifi router this week.", category="task",
                created_at=datetime.now(UTC) - timedelta(days=7))

    recency = {h.content: h.components.recency
               for h in store.recall(AGENT, "office wifi network")}
    assert recency["The office wifi network is called Falcon."] == pytest.approx(0.25, abs=1e-3)
    assert recency["We decided the office wifi network stays on WPA3."] == 1.0
    assert recency["The office wifi password changed today."] == pytest.approx(1.0, abs=1e-3)
    assert recency["Fix the office wifi router this week."] == pytest.approx(0.5, abs=1e-3)


@pytest.mark.parametrize(("query", "expected"), [
    (QUERY, TARGET),
    ("peanut allergy", TARGET),
    ("How much memory does the work laptop have?", DISTRACTORS[6]),
    ("Where did the user go hiking?", DISTRACTORS[4]),
    ("Where does the user's sister live?", DISTRACTORS[2]),
])
def test_rrf_fusion_ranks_relevant_first(store: MemoryStore, pg_url: str, query: str,
                                         expected: str) -> None:
    _seed(store)
    with override_settings(recall_fusion="rrf"):
        rrf_store = MemoryStore(pg_url)
    try:
        assert rrf_store.settings.recall_fusion == "rrf"
        hits = rrf_store.recall(AGENT, query)
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
        # the score is not the weighted blend in this mode
        assert any(abs(h.score - _weighted(h)) > 1e-3 for h in hits)
        assert hits[0].content == expected
    finally:
        rrf_store.engine.dispose()


def test_hnsw_plan_finds_the_relevant_memory(store: MemoryStore, pg_url: str) -> None:
    for i in range(3):  # other agents' rows share the HNSW index
        store.store_many(f"neighbour-{i}", [{"content": c} for c in [TARGET, *DISTRACTORS]])
    _seed(store)
    with override_settings(recall_exact_threshold="0"):
        hnsw_store = MemoryStore(pg_url)
    try:
        hits = hnsw_store.recall(AGENT, QUERY, limit=5)
        with hnsw_store.session() as session:
            plan = rc.plan(session, hnsw_store.agent_sizes, AGENT, QUERY, rc.Filters(), 15,
                           ef_search=100)
        assert plan.vector_search == "hnsw"  # threshold 0: every agent is large
        assert hits[0].content == TARGET
        assert len(hits) == 5
        assert all(h.memory.agent_id == AGENT for h in hits)
        assert hnsw_store.recall(AGENT, "How much memory does the work laptop have?",
                                 limit=3)[0].content == DISTRACTORS[6]
        exact = [h.id for h in store.recall(AGENT, QUERY, limit=5)]
        assert [h.id for h in hits][:1] == exact[:1]
    finally:
        hnsw_store.engine.dispose()


def test_hnsw_plan_accepts_the_largest_limit(store: MemoryStore, pg_url: str) -> None:
    """limit=1000 over-fetches 2000 candidates; pgvector's ef_search stops at 1000."""
    _seed(store)
    with override_settings(recall_exact_threshold="0"):
        hnsw_store = MemoryStore(pg_url)
    try:
        hits = hnsw_store.recall(AGENT, QUERY, limit=1000)
        assert len(hits) == len(DISTRACTORS) + 1
        assert hits[0].content == TARGET
    finally:
        hnsw_store.engine.dispose()


@pytest.mark.parametrize("query", ["the", "a", "?!", "of the and", "x y z"])
def test_queries_without_keywords_still_recall_by_meaning(store: MemoryStore,
                                                         query: str) -> None:
    _seed(store)
    hits = store.recall(AGENT, query, limit=3)
    assert len(hits) == 3
    assert all(h.components.keyword == 0.0 for h in hits)


class _ReversingLLM:
    """A fake LLM (the one fake the standards allow) that ranks the candidates it is
    shown last first, and remembers what it was shown."""

    name = "reversing"

    def __init__(self) -> None:
        self.shown: list[str] = []

    def complete(self, system: str, prompt: str, max_tokens: int) -> str:
        self.shown = [line.split("] ", 1)[1] for line in prompt.splitlines()
                      if line.startswith("[")]
        return ", ".join(str(i) for i in reversed(range(len(self.shown))))


def test_deep_mode_orders_the_candidates_as_the_llm_says(store: MemoryStore) -> None:
    """The LLM sees every fast candidate's whole content, best first, and the hits
    follow its order (limited after it), each with its fast score and whole row."""
    from memoryd.memory import llm as llm_mod

    _seed(store)
    fast = store.recall(AGENT, QUERY, limit=50)
    fake = _ReversingLLM()
    llm_mod.set_llm(fake)
    try:
        deep = store.recall(AGENT, QUERY, limit=3, mode="deep")
    finally:
        llm_mod.set_llm(None)
    # The deep recall's candidates (a pool for limit 3) in the fast order, best first.
    assert len(fake.shown) > 3
    assert fake.shown == [h.content for h in fast if h.content in fake.shown]
    by_content = {h.content: h for h in fast}
    assert [h.id for h in deep] == [by_content[c].id for c in reversed(fake.shown)][:3]
    by_id = {h.id: h for h in fast}
    for hit in deep:
        assert hit.score == by_id[hit.id].score
        assert hit.memory.access_count == by_id[hit.id].memory.access_count + 1


def test_deep_mode_without_llm_matches_fast_mode(store: MemoryStore) -> None:
    from memoryd.memory import llm as llm_mod

    assert llm_mod.is_fallback(llm_mod.get_llm()), "an LLM is configured in the test env"
    _seed(store)
    fast = store.recall(AGENT, QUERY, limit=5)
    deep = store.recall(AGENT, QUERY, limit=5, mode="deep")
    assert [h.id for h in deep] == [h.id for h in fast]
    assert deep[0].content == TARGET


def test_context_groups_by_category(store: MemoryStore) -> None:
    store.store(AGENT, "The user prefers tea over coffee.", category="preference")
    store.store(AGENT, "We decided to order tea for the office kitchen.", category="decision")
    store.store(AGENT, "The user drinks green tea every morning.", category="preference")
    store.store(AGENT, "Tea  supplies\nrun out on Fridays.", category="fact")

    block = store.context(AGENT, "tea")
    lines = block.splitlines()
    assert lines[0] == "## Relevant memories"
    headings = [line for line in lines if line.startswith("### ")]
    assert sorted(headings) == ["### Decision", "### Fact", "### Preference"]
    sections: dict[str, list[str]] = {}
    current = ""
    for line in lines[1:]:
        if line.startswith("### "):
            current = line[4:]
            sections[current] = []
        else:
            assert line.startswith("- "), line
            sections[current].append(line)
    assert len(sections["Preference"]) == 2
    assert all("tea" in line for line in sections["Preference"])
    assert sections["Decision"][0].startswith("- We decided to order tea for the office kitchen.")
    # whitespace inside a memory is normalized so each memory stays on one line
    assert sections["Fact"][0].startswith("- Tea supplies run out on Fridays. (")
    created = store.list(AGENT, category="fact").items[0].created_at.date().isoformat()
    assert sections["Fact"][0].endswith(f"({created})")


def test_context_is_empty_without_memories(store: MemoryStore) -> None:
    assert store.context(AGENT, "anything at all") == ""
    store.store("someone-else", "A memory of another agent.")
    assert store.context(AGENT, "memory of another agent") == ""


def test_keyword_weighs_rare_terms_above_common_ones(store: MemoryStore) -> None:
    """Keyword scores sum the inverse document frequencies (over the agent's own
    memories) of the query stems a memory holds: a name in every memory counts little."""
    common = [f"Caroline talked about the weather on day {i}." for i in range(8)]
    rare = "Caroline adopted a greyhound from the shelter."
    store.store_many(AGENT, [{"content": c} for c in [*common, rare]])
    store.store("agent-other", "A greyhound, a greyhound, a greyhound.")
    hits = {h.content: h.components.keyword for h in store.recall(AGENT, "Caroline greyhound",
                                                                  limit=20)}
    assert hits[rare] == pytest.approx(1.0)
    assert all(0.0 < hits[c] < 0.3 for c in common), hits


def test_prefix_matches_only_when_no_memory_holds_the_stem(store: MemoryStore) -> None:
    store.store_many(AGENT, [{"content": "The user loves photography and old cameras."},
                             {"content": "The user visited a photo exhibition."},
                             {"content": "The kitchen tap is leaking again."}])
    by_content = {h.content: h.components.keyword
                  for h in store.recall(AGENT, "photo", limit=3)}
    assert by_content["The user visited a photo exhibition."] == pytest.approx(1.0)
    assert by_content["The user loves photography and old cameras."] == 0.0
    other = "agent-recall-2"
    store.store_many(other, [{"content": "The user loves photography and old cameras."},
                             {"content": "The kitchen tap is leaking again."}])
    by_content = {h.content: h.components.keyword
                  for h in store.recall(other, "photo", limit=2)}
    assert by_content["The user loves photography and old cameras."] == pytest.approx(1.0)
    assert by_content["The kitchen tap is leaking again."] == 0.0


def test_adjacent_session_messages_lend_part_of_their_score(store: MemoryStore,
                                                            pg_url: str) -> None:
    """A turn that matches lends ``recall_context_weight`` x its own score to the turns
    within ``CONTEXT_REACH`` places of it in the same session (an answer rarely repeats
    the question's words); farther turns lend nothing."""
    assert rc.CONTEXT_REACH == 2
    turns = ["Caroline: What did you adopt from the shelter last month?",
             "Melanie: A three year old greyhound named Max.",
             "Caroline: The weather at the beach was lovely.",
             "Melanie: We should take the kids there in July."]
    for turn in turns:
        store.store(AGENT, turn, session_id="chat-1")
    store.store(AGENT, "Melanie: My sister adopted a cat from the shelter.")
    store.store("agent-other", "Melanie: A three year old greyhound named Max.",
                session_id="chat-1")
    query = "What did Melanie adopt from the shelter last month?"

    hits = {h.content: h for h in store.recall(AGENT, query, limit=5)}
    own = {c: _weighted(h) for c, h in hits.items()}
    weight = store.settings.recall_context_weight
    for hit in hits.values():
        assert hit.score == pytest.approx(own[hit.content] + weight * hit.components.context,
                                          abs=1e-5)
    for i, turn in enumerate(turns):
        near = [own[other] for j, other in enumerate(turns) if 0 < abs(i - j) <= 2]
        assert hits[turn].components.context == pytest.approx(max(near), abs=1e-5)
    assert own[turns[0]] > own[turns[1]]  # so turn 3 gains less than turns 1 and 2 do
    assert hits["Melanie: My sister adopted a cat from the shelter."].components.context == 0.0

    with override_settings(recall_context_weight="0"):
        plain = MemoryStore(pg_url)
        try:
            for hit in plain.recall(AGENT, query, limit=5):
                assert hit.components.context == 0.0
                assert hit.score == pytest.approx(_weighted(hit), abs=1e-5)
        finally:
            plain.engine.dispose()


def test_mid_sized_agents_take_keywords_from_the_index_with_the_same_scores(
        store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Above ``KEYWORD_SCAN_MAX`` memories the keyword side comes from the GIN index
    (while the vector side may still be exact): same scores for exact-stem matches."""
    from memoryd.memory import keywords

    _seed(store)
    scanned = {h.id: round(h.components.keyword, 5) for h in store.recall(AGENT, QUERY, limit=9)}
    monkeypatch.setattr(keywords, "KEYWORD_SCAN_MAX", 0)
    hits = store.recall(AGENT, QUERY, limit=9)
    assert hits[0].content == TARGET
    assert {h.id: round(h.components.keyword, 5) for h in hits} == scanned
    assert sum(1 for v in scanned.values() if v > 0) >= 2


def test_access_bump_commits_without_waiting_for_the_flush(store: MemoryStore) -> None:
    """The access bump switches ``synchronous_commit`` off for its own transaction only."""
    from memoryd.memory import recall

    _seed(store)
    ids = [h.id for h in store.recall(AGENT, QUERY, limit=2)]
    with store.session() as session:
        assert session.execute(text("SHOW synchronous_commit")).scalar() == "on"
        recall.touch(session, AGENT, ids)
        assert session.execute(text("SHOW synchronous_commit")).scalar() == "off"
    with store.session() as session:
        assert session.execute(text("SHOW synchronous_commit")).scalar() == "on"
        counts = session.execute(text(
            "SELECT access_count FROM memories WHERE id = ANY(:ids)"), {"ids": ids}).scalars()
        assert sorted(counts) == [2, 2]


class _WrappedEmbedder:
    """The store's embedder, recording the thread of each call; ``fail`` texts raise."""

    def __init__(self, inner: object, fail: str = "") -> None:
        self.inner, self.fail = inner, fail
        self.threads: list[str] = []
        self.dim = inner.dim  # type: ignore[attr-defined]
        self.name = inner.name  # type: ignore[attr-defined]

    def embed(self, texts: list[str]) -> object:
        if texts == [self.fail]:
            raise RuntimeError("embedding backend is down")
        self.threads.append(threading.current_thread().name)
        return self.inner.embed(texts)  # type: ignore[attr-defined]


def test_the_keyword_query_runs_at_the_server_while_the_query_is_embedded(
        store: MemoryStore) -> None:
    """Recall sends its keyword query before it embeds the query, on its own thread:
    while the embedding runs, the recall's backend is already on the keyword query."""
    _seed(store)
    seen: list[str] = []

    class Watching(_WrappedEmbedder):
        def embed(self, texts: list[str]) -> object:
            if texts == [QUERY]:  # the recall's backend, as the embedding starts
                with store.engine.connect() as other:
                    seen.extend(other.execute(text(
                        "SELECT state FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                        "AND datname = current_database() "
                        "AND query LIKE '%mine AS MATERIALIZED%'")).scalars())
            return super().embed(texts)

    watching = Watching(store.embedder)
    other = MemoryStore(engine=store.engine, embedder=watching)  # type: ignore[arg-type]
    hits = other.recall(AGENT, QUERY, limit=3)
    assert hits[0].content == TARGET
    assert seen == ["active"]
    assert watching.threads == [threading.current_thread().name]


def test_a_connection_lost_under_the_keyword_query_fails_that_recall_as_transient(
        store: MemoryStore) -> None:
    """The statement sent ahead fails as SQLAlchemy's statements do: its backend killed
    while the query is embedded, the recall raises SQLAlchemy's ``OperationalError``
    (which tasks retry) without the query's words, the broken connection leaves the
    pool, and the next recall works."""
    from sqlalchemy.exc import OperationalError

    from memoryd.db import faults

    _seed(store)

    class Killing(_WrappedEmbedder):
        def embed(self, texts: list[str]) -> object:
            if texts == [QUERY]:
                with store.engine.connect() as other:
                    other.execute(text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE pid <> pg_backend_pid() AND datname = current_database() "
                        "AND query LIKE '%mine AS MATERIALIZED%'")).all()
            return super().embed(texts)

    killing = MemoryStore(engine=store.engine,  # type: ignore[arg-type]
                          embedder=Killing(store.embedder))
    with pytest.raises(OperationalError) as failed:
        killing.recall(AGENT, QUERY)
    assert faults.transient(failed.value)
    assert failed.value.connection_invalidated
    assert "allergies" not in str(failed.value).lower()
    assert store.recall(AGENT, QUERY, limit=3)[0].content == TARGET


def test_a_failed_query_embedding_fails_recall_and_counts_nothing(
        store: MemoryStore) -> None:
    _seed(store)
    broken = MemoryStore(engine=store.engine,  # type: ignore[arg-type]
                         embedder=_WrappedEmbedder(store.embedder, fail=QUERY))
    with pytest.raises(RuntimeError, match="backend is down"):
        broken.recall(AGENT, QUERY)
    with store.session() as session:
        touched = session.execute(text(
            "SELECT count(*) FROM memories WHERE access_count > 0")).scalar_one()
    assert touched == 0


def test_index_keyword_side_stays_inside_the_agent(store: MemoryStore,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The GIN index is keyed by (agent, lexeme): another agent holding the same words
    never lends a candidate, even when it holds more of them."""
    from memoryd.memory import keywords

    _seed(store)
    store.store_many("agent-other", [{"content": f"{TARGET} Peanuts, food, allergies {i}."}
                                     for i in range(40)])
    monkeypatch.setattr(keywords, "KEYWORD_SCAN_MAX", 0)
    hits = store.recall(AGENT, "peanuts food allergies", limit=20)
    assert hits and hits[0].content == TARGET
    assert {h.memory.agent_id for h in hits} == {AGENT}
    assert len(hits) == len(DISTRACTORS) + 1


@pytest.mark.parametrize("query", [QUERY, "zebra xylophone", "?!"])
def test_large_agent_settings_ride_on_the_keyword_query(store: MemoryStore, query: str) -> None:
    """Applied by the keyword statement itself (a round trip saved), also when it finds
    nothing ("zebra"), or by a statement of their own when the query has no words
    ("?!"); for the transaction only."""
    _seed(store)
    plan = rc.build_plan(AGENT, query, rc.Filters(), 30, vector_search="hnsw",
                         keyword_search="index", ef_search=123)
    settings = plan.vector_settings
    assert settings["hnsw.ef_search"] == "123"
    assert (plan.settings_statement is None) == (plan.keyword_statement is not None)
    with store.session() as session:
        rc.keyword_hits(session, plan)
        applied = {name: session.execute(text("SELECT current_setting(:n)"),
                                         {"n": name}).scalar_one() for name in settings}
    assert applied == settings
    with store.session() as session:
        assert session.execute(text("SHOW plan_cache_mode")).scalar_one() == "auto"
    assert rc.vector_settings("exact", ef_search=123, generic=False) == {}


@pytest.mark.parametrize("large", [True, False])
def test_index_keyword_query_runs_with_a_generic_plan(store: MemoryStore, large: bool) -> None:
    """Once psycopg prepares it, the index search is never planned again (PostgreSQL
    would otherwise plan it afresh each time); the statements after it plan as the
    vector query's settings say."""
    _seed(store)
    plan = rc.build_plan(AGENT, QUERY, rc.Filters(), 30, keyword_search="index",
                         vector_search="hnsw" if large else "exact", ef_search=100)
    assert plan.keyword_plan_cache == {"plan_cache_mode": "force_generic_plan"}
    store.engine.dispose()  # a new connection: none of this test's statements prepared yet
    with store.session() as session:
        for _ in range(8):
            rc.keyword_hits(session, plan)
        plans = session.execute(text(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE '%kw_found%'")).one()
        after = session.execute(text("SHOW plan_cache_mode")).scalar_one()
    assert plans.generic_plans >= 2 and plans.custom_plans == 0
    assert after == "force_generic_plan"


@pytest.mark.parametrize(("keyword_scan_max", "ahead"), [
    (10_000, ["keyword", "candidates"]),
    (0, ["setup", "keyword", "candidates"]),
])
def test_a_recall_sends_its_keyword_query_ahead_then_takes_one_round_trip_per_step(
        store: MemoryStore, monkeypatch: pytest.MonkeyPatch, keyword_scan_max: int,
        ahead: list[str]) -> None:
    """Once the agent's size is known: the keyword query (with its generic-plan setting
    for the index search) sent ahead together, then the candidate query, both pipelined
    (with the transaction's BEGIN and COMMIT), and the access bump; no statement of its
    own for the vector settings (tests/integration/test_recall_round_trips.py counts the
    round trips on the wire)."""
    from sqlalchemy import event

    from memoryd.memory import keywords

    _seed(store)
    monkeypatch.setattr(keywords, "KEYWORD_SCAN_MAX", keyword_scan_max)
    store.recall(AGENT, QUERY, limit=3)  # counts the agent's size
    sent: list[str] = []
    pipelined = _record_pipelined(monkeypatch)

    def remember(conn: object, cursor: object, statement: str, *args: object) -> None:
        sent.append(_step(statement))

    event.listen(store.engine, "before_cursor_execute", remember)
    try:
        store.recall(AGENT, QUERY, limit=3)
    finally:
        event.remove(store.engine, "before_cursor_execute", remember)
    assert [_step(sql) for sql in pipelined] == ahead
    assert sent == ["touch"]


def _step(statement: str) -> str:
    """Which of recall's steps ``statement`` is."""
    return ("keyword" if "FROM kw" in statement and "unnest(CAST" not in statement
            else "candidates" if "unnest(CAST" in statement
            else "touch" if "access_count" in statement
            else "setup" if "set_config" in statement else statement)


def _record_pipelined(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The statements recall sends ahead of their results, in order (they do not pass
    through SQLAlchemy's execute events)."""
    from memoryd.db.pipeline import Pipe

    sent: list[str] = []
    send = Pipe.send

    def recording(pipe: Pipe, sql: str, params: Any, literals: Any = None) -> Any:
        sent.append(sql)
        return send(pipe, sql, params, literals)

    monkeypatch.setattr(Pipe, "send", recording)
    return sent


def test_session_context_and_the_second_round_cost_no_round_trip_of_their_own(
        store: MemoryStore, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Conversation turns, the context score and the second round on: still the keyword
    query, the candidate query and the access bump, nothing else."""
    from sqlalchemy import event

    for turn in ("Caroline: What did you adopt from the shelter?", "Melanie: A greyhound.",
                 "Caroline: Lovely!", "Melanie: He is called Max."):
        store.store(AGENT, turn, session_id="chat-1")
    sent: list[str] = []

    def remember(conn: object, cursor: object, statement: str, *args: object) -> None:
        sent.append(_step(statement))

    with override_settings(recall_expand="5", recall_context_weight="0.3"):
        expanding = MemoryStore(pg_url, embedder=store.embedder)
    try:
        expanding.recall(AGENT, "What did Melanie adopt?", limit=3)  # counts the agent
        pipelined = _record_pipelined(monkeypatch)
        event.listen(expanding.engine, "before_cursor_execute", remember)
        hits = expanding.recall(AGENT, "What did Melanie adopt?", limit=3)
    finally:
        expanding.engine.dispose()
    assert [_step(sql) for sql in pipelined] == ["keyword", "candidates"]
    assert sent == ["touch"]
    assert any(h.components.context > 0 for h in hits)


def test_the_plan_follows_the_agent_size(store: MemoryStore,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Small agents: exact vector search and a scan of their rows, the candidate query
    planned once (generic) and never by a sequential scan; above ``KEYWORD_SCAN_MAX``
    the index keyword search, its plan-cache mode set before and reset by the keyword
    statement."""
    from memoryd.memory import keywords

    _seed(store)
    with store.session() as session:
        small = rc.plan(session, store.agent_sizes, AGENT, QUERY, rc.Filters(), 30,
                        ef_search=100)
        monkeypatch.setattr(keywords, "KEYWORD_SCAN_MAX", 0)
        indexed = rc.plan(session, store.agent_sizes, AGENT, QUERY, rc.Filters(), 30,
                          ef_search=100)
    assert small.agent_size == len(DISTRACTORS) + 1
    assert (small.vector_search, small.keyword_search) == ("exact", "scan")
    assert small.vector_settings == small.settings_after_keywords == {
        "plan_cache_mode": "force_generic_plan", "enable_seqscan": "off"}
    assert small.keyword_setup is None and small.keyword_statement is not None
    assert (indexed.vector_search, indexed.keyword_search) == ("exact", "index")
    assert indexed.settings_after_keywords == small.vector_settings
    assert indexed.keyword_setup is not None and indexed.keyword_statement is not None
    assert "kw_found" in indexed.keyword_statement.text


def _second_round(store: MemoryStore, query: str, per_retriever: int, seeds: int,
                  reach: int = 1) -> list[Candidate]:
    """The candidate query of ``store.recall`` for ``query``, with ``per_retriever``
    candidates per retriever and the second round seeded by each retriever's first
    ``seeds``, bringing in the messages within ``reach`` places of them."""
    with store.session() as session:
        plan = rc.plan(session, store.agent_sizes, AGENT, query, rc.Filters(), per_retriever,
                       ef_search=100,
                       sessions=rc.Sessions(seeds=seeds, reach=reach, max_messages=5000))
        return rc.searched(store.recaller, session, plan, query, store.query_vector(query))


def test_the_second_round_brings_in_the_session_neighbours_of_the_retrievers_best(
        store: MemoryStore) -> None:
    """The candidate query's second round: the messages just before and after each seed
    (a candidate one of the retrievers ranked within the first ``seeds``) in its
    session's list, unless already found, archived, or another agent's, as candidates
    with their cosine to the query, no keyword score and their place in the session."""
    asked = ["Caroline: What did you adopt from the shelter last month?",
             "Melanie: A three year old greyhound named Max."]
    beach = ["Caroline: Did you adopt anything at the shelter by the beach?",
             "Melanie: We should go again in July."]
    ids = [store.store(AGENT, turn, session_id="chat-1").id for turn in asked]
    ids += [store.store(AGENT, turn, session_id="chat-2").id for turn in beach]
    store.store("agent-other", "Someone else's message.", session_id="chat-1")
    _set(store, "UPDATE memories SET archived_at = now() WHERE id = :id", id=ids[3])
    query = "What did you adopt from the shelter?"
    vector = store.query_embedder.embed([query])[0]

    found = {c.row["id"]: c for c in _second_round(store, query, per_retriever=2, seeds=2)}
    assert set(found) == {ids[0], ids[1], ids[2]}  # not 3: archived
    answer = found[ids[1]]
    assert (answer.keyword_raw, answer.vector_rank, answer.keyword_rank) == (0.0, None, None)
    stored = store.embedder.embed([asked[1]])[0]
    assert answer.semantic == pytest.approx(float(stored @ vector), abs=1e-4)
    assert answer.model == store.embedder.name
    assert [found[i].session_pos for i in ids[:3]] == [1, 2, 1]
    without = {c.row["id"] for c in _second_round(store, query, per_retriever=2, seeds=0)}
    assert without == {ids[0], ids[2]}


def test_a_damaged_session_list_does_not_fail_a_recall(store: MemoryStore,
                                                       pg_url: str) -> None:
    """A session list entry that is not a memory id (maintenance repairs such lists
    later) next to a seed is passed over, not cast and failed on."""
    first = store.store(AGENT, "Caroline: What did you adopt from the shelter?",
                        session_id="chat-1").id
    _set(store, "UPDATE sessions SET messages = jsonb_build_array("
                "jsonb_build_object('id', 'not-a-uuid')) || messages "
                "|| jsonb_build_array(jsonb_build_object('id', 42)) WHERE agent_id = :a",
         a=AGENT)
    found = _second_round(store, "What did you adopt from the shelter?", 5, seeds=5)
    assert [(c.row["id"], c.session_pos) for c in found] == [(first, 2)]


def test_the_second_round_reaches_as_far_as_it_is_told(store: MemoryStore) -> None:
    """With reach 2 the two messages on each side of a seed come in, with their places;
    the third does not."""
    turns = ["Melanie: We painted the lake last weekend.",
             "Caroline: Which one?", "Melanie: The one near the cabin.",
             "Caroline: What did you adopt from the shelter?",
             "Melanie: Nothing yet.", "Caroline: Oh.", "Melanie: Maybe next spring."]
    ids = [store.store(AGENT, turn, session_id="chat-1").id for turn in turns]
    found = {c.row["id"]: c.session_pos
             for c in _second_round(store, "What did you adopt from the shelter?", 1,
                                    seeds=1, reach=2)}
    assert found == {ids[i]: i + 1 for i in range(1, 6)}


def test_with_the_second_round_a_neighbour_outside_the_first_round_can_be_recalled(
        store: MemoryStore, pg_url: str) -> None:
    """Twenty notes about the shelter's dogs fill the first round of a recall of two
    (six candidates per retriever); the answer, the turn after the question, shares no
    word with the query and is found only through its session neighbour (lent all of
    the question's score here, to make the effect certain)."""
    store.store_many(AGENT, [{"content": f"Note {i}: the shelter's volunteers walk its "
                                         f"dogs every morning, shift {i}."}
                             for i in range(20)])
    question = store.store(AGENT, "Caroline: What did Melanie adopt from the shelter?",
                           session_id="chat-1").id
    answer = store.store(AGENT, "A three year old greyhound named Max.",
                         session_id="chat-1").id
    query = "What did Melanie adopt from the shelter?"
    with override_settings(recall_expand="0"):
        first_round = MemoryStore(pg_url, embedder=store.embedder)
    try:
        plain = [h.memory.id for h in first_round.recall(AGENT, query, limit=2)]
    finally:
        first_round.engine.dispose()
    assert answer not in plain
    with override_settings(recall_expand="5", recall_context_weight="1"):
        expanding = MemoryStore(pg_url, embedder=store.embedder)
        try:
            hits = expanding.recall(AGENT, query, limit=2)
        finally:
            expanding.engine.dispose()
    found = {h.memory.id: h for h in hits}
    assert answer in found and found[answer].components.context > 0
    assert question not in plain or question in found


def test_recall_does_not_wait_for_rows_a_maintenance_job_holds(store: MemoryStore) -> None:
    """A memory locked by another transaction (a job rewriting it) is returned without
    waiting; only its access count is skipped, so recall never waits on, or deadlocks
    with, a job updating the agent's rows."""
    held, free = (store.store(AGENT, text).id for text in
                  ("The release train leaves on Thursdays.", "The release notes go out Fridays."))
    import threading

    found: list[Recalled] = []
    recalling = threading.Thread(target=lambda: found.extend(
        store.recall(AGENT, "When does the release go out?", limit=2)))
    with store.engine.connect() as job:
        job.execute(text("SELECT 1 FROM memories WHERE id = :id FOR UPDATE"), {"id": held})
        recalling.start()
        recalling.join(10)
        waited = recalling.is_alive()
        job.rollback()  # lets a waiting recall finish either way
    recalling.join()
    assert not waited, "recall waited for the row the job holds"
    assert {h.memory.id for h in found} == {held, free}
    with store.session() as session:
        counts = dict(session.execute(text(
            "SELECT id, access_count FROM memories WHERE agent_id = :a"), {"a": AGENT}).all())
    assert counts == {held: 0, free: 1}
