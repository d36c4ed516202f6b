"""Writing and reading memories through ``MemoryStore`` on the real PostgreSQL.

Dedup (also across processes), key upserts, ``store_many`` atomicity, session
tracking, ``list`` pagination, lookups and ``related``.
"""

from __future__ import annotations

import multiprocessing
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from memoryd.config import override_settings
from memoryd.errors import NotFound, ValidationError
from memoryd.memory.store import MemoryStore
from memoryd.memory.writes import content_hash

AGENT = "agent-store"


def _count(store: MemoryStore, agent: str | None = None) -> int:
    with store.session() as session:
        if agent is None:
            return int(session.execute(text("SELECT count(*) FROM memories")).scalar_one())
        return int(session.execute(text("SELECT count(*) FROM memories WHERE agent_id = :a"),
                                   {"a": agent}).scalar_one())


# --- dedup ----------------------------------------------------------------------------


def test_identical_content_is_a_duplicate_of_the_first(store: MemoryStore) -> None:
    first = store.store(AGENT, "The user's cat is called Miso.")
    assert first.stored and not first.duplicate

    again = store.store(AGENT, "The user's cat is called Miso.")
    assert again.id == first.id
    assert again.duplicate and not again.stored
    assert _count(store, AGENT) == 1


def test_dedup_ignores_whitespace_differences(store: MemoryStore) -> None:
    first = store.store(AGENT, "Deploys happen on Thursdays after standup.")
    spaced = store.store(AGENT, "  Deploys   happen on\tThursdays\nafter standup.  ")
    assert spaced.duplicate and spaced.id == first.id
    assert _count(store, AGENT) == 1
    # The stored text is the original, untouched.
    assert store.get(AGENT, first.id).content == "Deploys happen on Thursdays after standup."
    with store.session() as session:
        stored_hash = session.execute(text("SELECT content_hash FROM memories WHERE id = :id"),
                                      {"id": first.id}).scalar_one()
    assert stored_hash == content_hash("Deploys happen on Thursdays after standup.")
    assert len(stored_hash) == 64


def test_different_content_is_not_a_duplicate(store: MemoryStore) -> None:
    a = store.store(AGENT, "The office is in Lisbon.")
    b = store.store(AGENT, "The office is in Porto.")
    assert a.id != b.id
    assert b.stored and not b.duplicate
    assert _count(store, AGENT) == 2


def test_dedup_is_per_agent(store: MemoryStore) -> None:
    one = store.store("agent-one", "Prefers metric units.")
    two = store.store("agent-two", "Prefers metric units.")
    assert one.stored and two.stored
    assert not two.duplicate
    assert one.id != two.id
    assert _count(store, "agent-one") == 1
    assert _count(store, "agent-two") == 1


def test_forget_frees_the_hash(store: MemoryStore) -> None:
    first = store.store(AGENT, "The staging database is called orca.")
    assert store.forget(AGENT, first.id) is True
    assert _count(store, AGENT) == 0
    with pytest.raises(NotFound):
        store.get(AGENT, first.id)

    again = store.store(AGENT, "The staging database is called orca.")
    assert again.stored and not again.duplicate
    assert again.id != first.id
    assert store.get(AGENT, again.id).content == "The staging database is called orca."
    assert store.forget(AGENT, first.id) is False


def _store_in_own_process(url: str, agent: str, content: str, barrier: Any,
                          results: Any) -> None:
    store = MemoryStore(url)
    try:
        store.embedder.embed(["warm up the model before the race"])
        barrier.wait(timeout=60)
        result = store.store(agent, content)
        results.put((str(result.id), result.stored, result.duplicate))
    finally:
        store.engine.dispose()


@pytest.mark.slow
def test_concurrent_identical_stores_from_processes_make_one_row(
        store: MemoryStore, pg_url: str) -> None:
    processes = 4
    content = "The production cluster runs in eu-west-1 and is upgraded monthly."
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    results = ctx.Queue()
    workers = [ctx.Process(target=_store_in_own_process,
                           args=(pg_url, AGENT, content, barrier, results))
               for _ in range(processes)]
    with override_settings(embed_threads="1"):  # the children inherit this environment
        for worker in workers:
            worker.start()
    outcomes = [results.get(timeout=120) for _ in range(processes)]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0

    with store.session() as session:
        rows = session.execute(text(
            "SELECT count(*) FROM memories WHERE agent_id = :a AND content = :c"),
            {"a": AGENT, "c": content}).scalar_one()
    assert rows == 1
    ids = {memory_id for memory_id, _, _ in outcomes}
    assert len(ids) == 1
    assert sum(1 for _, stored, _ in outcomes if stored) == 1
    assert sum(1 for _, _, duplicate in outcomes if duplicate) == processes - 1
    assert str(store.list(AGENT).items[0].id) == ids.pop()


# --- key upserts ------------------------------------------------------------------------


def test_storing_an_existing_key_with_new_content_makes_a_new_version(
        store: MemoryStore) -> None:
    first = store.store(AGENT, "The user's favourite editor is Vim.", key="editor")
    second = store.store(AGENT, "The user switched to Emacs as their main text editor.",
                         key="editor")
    assert second.id != first.id and second.superseded == (first.id,)
    assert second.stored and not second.duplicate
    assert _count(store, AGENT) == 2  # the old version is kept, superseded

    memory = store.get_by_key(AGENT, "editor")
    assert memory.id == second.id
    assert memory.content == "The user switched to Emacs as their main text editor."
    assert store.get(AGENT, first.id).superseded_by == second.id

    hits = store.recall(AGENT, "Emacs text editor")
    assert [h.id for h in hits] == [second.id]
    old_hits = store.recall(AGENT, "favourite editor Vim")
    assert old_hits and all("Vim" not in h.content for h in old_hits)


def test_old_content_of_an_upserted_key_is_free_again(store: MemoryStore) -> None:
    store.store(AGENT, "Standup is at 09:30.", key="standup")
    store.store(AGENT, "Standup moved to 10:00.", key="standup")
    old = store.store(AGENT, "Standup is at 09:30.")
    assert old.stored and not old.duplicate
    assert store.list(AGENT).total == 2
    assert _count(store, AGENT) == 3


def test_same_key_same_content_is_a_duplicate(store: MemoryStore) -> None:
    first = store.store(AGENT, "Timezone is Europe/Berlin.", key="tz")
    again = store.store(AGENT, "Timezone is Europe/Berlin.", key="tz")
    assert again.id == first.id and again.duplicate and not again.stored


def test_same_key_same_content_with_new_metadata_updates_the_metadata(
        store: MemoryStore) -> None:
    first = store.store(AGENT, "Timezone is Europe/Berlin.", key="tz", metadata={"v": 1})
    again = store.store(AGENT, "Timezone is Europe/Berlin.", key="tz", metadata={"v": 2})
    assert again.id == first.id and again.stored and not again.duplicate
    assert store.get_by_key(AGENT, "tz").metadata == {"v": 2}


def test_list_by_key_pages_in_code_point_order(store: MemoryStore) -> None:
    for key in ("b", "a b", "a", "Z", "é", "a.b"):
        store.store(AGENT, f"Memory under key {key}.", key=key)
    store.store(AGENT, "A memory without a key.")
    pages = [store.list(AGENT, order="key", limit=3, offset=o).items for o in (0, 3, 6)]
    assert [m.key for page in pages for m in page] == [
        "Z", "a", "a b", "a.b", "b", "é", None]
    with pytest.raises(ValidationError) as refused:
        store.list(AGENT, order="oldest")
    assert refused.value.field == "order"


# --- store_many ---------------------------------------------------------------------------


def test_store_many_stores_each_and_dedups_within_the_batch(store: MemoryStore) -> None:
    results = store.store_many(AGENT, [
        {"content": "Alice manages the data team."},
        {"content": "Bob is on call this week."},
        {"content": "Alice  manages the data team."},
        {"content": "Carol wrote the onboarding guide."},
    ])
    assert [r.stored for r in results] == [True, True, False, True]
    assert results[2].duplicate and results[2].id == results[0].id
    assert len({r.id for r in results}) == 3
    assert _count(store, AGENT) == 3


def test_store_many_keeps_every_field_and_finds_existing_duplicates(
        store: MemoryStore) -> None:
    """The batch goes in as one statement: each row keeps its own fields, a row whose
    content the agent already holds comes back as that memory, in input order."""
    before = store.store(AGENT, "Dana runs the Friday demo.")
    when = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    expires = datetime.now(UTC) + timedelta(days=3)
    results = store.store_many(AGENT, [
        {"content": "Erin prefers tea.", "tags": ["people", "drinks"], "role": "user",
         "session_id": "s-1", "metadata": {"turn": 1}, "importance": 0.8,
         "category": "preference", "created_at": when, "source": "chat"},
        {"content": "Dana runs the Friday demo."},
        {"content": "Frank moved to Oslo.", "expires_at": expires, "session_id": "s-1",
         "role": "assistant"},
        {"content": "Erin  prefers tea.", "tags": ["other"]},
    ])
    assert [(r.stored, r.duplicate) for r in results] == [
        (True, False), (False, True), (True, False), (False, True)]
    assert results[1].id == before.id and results[3].id == results[0].id
    erin = store.get(AGENT, results[0].id)
    assert (erin.tags, erin.role, erin.session_id, erin.metadata, erin.importance,
            erin.category, erin.created_at, erin.source) == (
        ("people", "drinks"), "user", "s-1", {"turn": 1}, 0.8, "preference", when, "chat")
    frank = store.get(AGENT, results[2].id)
    assert frank.expires_at == expires and frank.tags == () and frank.metadata == {}
    with store.session() as session:
        refs = session.execute(text(
            "SELECT messages FROM sessions WHERE agent_id = :a AND session_id = 's-1'"),
            {"a": AGENT}).scalar_one()
    assert [r["id"] for r in refs] == [str(results[0].id), str(results[2].id)]


def test_store_many_with_an_invalid_item_writes_nothing(store: MemoryStore) -> None:
    store.store(AGENT, "Existing memory before the batch.")
    with pytest.raises(ValidationError) as info:
        store.store_many(AGENT, [
            {"content": "A perfectly fine memory."},
            {"content": "Broken \x00 memory."},
            {"content": "Another fine memory."},
        ])
    assert info.value.field == "items[1].content"
    assert _count(store) == 1


def test_store_many_with_an_oversized_item_writes_nothing(store: MemoryStore,
                                                          pg_url: str) -> None:
    with override_settings(max_content_bytes="100"):
        small = MemoryStore(pg_url)
    try:
        assert small.settings.max_content_bytes == 100
        with pytest.raises(ValidationError) as info:
            small.store_many(AGENT, [
                {"content": "Short and fine."},
                {"content": "Also short."},
                {"content": "x" * 101},
            ])
        assert info.value.field == "items[2].content"
        assert _count(store) == 0
        ok = small.store_many(AGENT, [{"content": "y" * 100}])
        assert ok[0].stored
    finally:
        small.engine.dispose()
    assert _count(store) == 1


def test_store_many_is_one_transaction_on_database_errors(store: MemoryStore) -> None:
    """A failure inside the write (here a CHECK violation) rolls back the whole batch."""
    with store.session() as session:
        session.execute(text("ALTER TABLE memories ADD CONSTRAINT test_no_poison "
                             "CHECK (content NOT LIKE '%poison%')"))
    try:
        with pytest.raises(IntegrityError, match="test_no_poison"):
            store.store_many(AGENT, [
                {"content": "First memory of the batch.", "session_id": "s-batch"},
                {"content": "This one is poison."},
            ])
        assert _count(store) == 0
        assert store.sessions(AGENT) == []
    finally:
        with store.session() as session:
            session.execute(text("ALTER TABLE memories DROP CONSTRAINT test_no_poison"))


def test_store_many_rejects_an_empty_batch(store: MemoryStore) -> None:
    with pytest.raises(ValidationError) as info:
        store.store_many(AGENT, [])
    assert info.value.field == "items"


# --- sessions ---------------------------------------------------------------------------


def test_session_tracking_counts_stored_messages_only(store: MemoryStore) -> None:
    first = store.store(AGENT, "Hi, I'm planning a trip to Japan.", role="user",
                        session_id="trip")
    store.store(AGENT, "Great, when are you travelling?", role="assistant", session_id="trip")
    dup = store.store(AGENT, "Hi, I'm planning a trip to Japan.", role="user",
                      session_id="trip")
    assert dup.duplicate
    store.store(AGENT, "Unrelated note without a session.")

    sessions = store.sessions(AGENT)
    assert [s.session_id for s in sessions] == ["trip"]
    assert sessions[0].message_count == 2

    store.store_many(AGENT, [
        {"content": "In April, ideally.", "role": "user", "session_id": "trip"},
        {"content": "In April, ideally.", "role": "user", "session_id": "trip"},
        {"content": "Other chat opener.", "role": "user", "session_id": "other"},
    ])
    counts = {s.session_id: s.message_count for s in store.sessions(AGENT)}
    assert counts == {"trip": 3, "other": 1}

    with store.session() as session:
        messages = session.execute(text(
            "SELECT messages FROM sessions WHERE agent_id = :a AND session_id = 'trip'"),
            {"a": AGENT}).scalar_one()
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[0]["id"] == str(first.id)

    assert store.forget(AGENT, first.id)
    counts = {s.session_id: s.message_count for s in store.sessions(AGENT)}
    assert counts == {"trip": 2, "other": 1}


# --- reading ------------------------------------------------------------------------------


def test_list_is_paginated_newest_first(store: MemoryStore) -> None:
    now = datetime.now(UTC)
    ids = []
    for hours in range(5):  # index 0 is the newest
        result = store.store(AGENT, f"Weekly report number {hours} was filed.",
                             created_at=now - timedelta(hours=hours), category="event")
        ids.append(result.id)
    store.store("someone-else", "Weekly report number 0 was filed.")

    page = store.list(AGENT, limit=2)
    assert page.total == 5
    assert [m.id for m in page.items] == ids[:2]
    page = store.list(AGENT, limit=2, offset=2)
    assert page.total == 5
    assert [m.id for m in page.items] == ids[2:4]
    page = store.list(AGENT, limit=2, offset=4)
    assert [m.id for m in page.items] == ids[4:]
    page = store.list(AGENT, limit=2, offset=10)
    assert page.total == 5 and page.items == []
    assert [m.id for m in store.list(AGENT).items] == ids

    store.store(AGENT, "We decided to use Postgres.", category="decision")
    decisions = store.list(AGENT, category="decision")
    assert decisions.total == 1
    assert decisions.items[0].content == "We decided to use Postgres."
    assert store.list(AGENT).total == 6


def test_get_returns_the_stored_fields(store: MemoryStore) -> None:
    expires = datetime.now(UTC) + timedelta(days=3)
    result = store.store(AGENT, "Remember the VPN password rotates monthly.", role="user",
                         session_id="s1", key="vpn", category="fact", importance=0.8,
                         tags=["security", "vpn"], source="chat",
                         metadata={"channel": "slack"}, expires_at=expires)
    memory = store.get(AGENT, str(result.id))
    assert memory.id == result.id
    assert memory.agent_id == AGENT
    assert memory.role == "user" and memory.session_id == "s1" and memory.key == "vpn"
    assert memory.category == "fact" and memory.importance == pytest.approx(0.8)
    assert memory.tags == ("security", "vpn")
    assert memory.source == "chat" and memory.metadata == {"channel": "slack"}
    assert memory.expires_at == expires
    assert memory.confidence == pytest.approx(1.0)
    assert memory.access_count == 0 and memory.archived_at is None


def test_get_and_get_by_key_raise_not_found(store: MemoryStore) -> None:
    stored = store.store(AGENT, "Something to find.", key="present")
    with pytest.raises(NotFound):
        store.get(AGENT, uuid.uuid4())
    with pytest.raises(NotFound):
        store.get_by_key(AGENT, "absent")
    with pytest.raises(NotFound):
        store.get("other-agent", stored.id)
    with pytest.raises(NotFound):
        store.get_by_key("other-agent", "present")
    assert store.get_by_key(AGENT, "present").id == stored.id


def test_related_returns_linked_before_similar(store: MemoryStore) -> None:
    anchor = store.store(AGENT, "The user is learning to play the piano.").id
    similar = store.store(AGENT, "The user practises piano scales every evening.").id
    also_similar = store.store(AGENT, "The user takes weekly music lessons.").id
    linked = store.store(AGENT, "The quarterly tax filing is due in July.").id
    incoming = store.store(AGENT, "The car needs new winter tyres.").id
    with store.session() as session:
        session.execute(text("""
            INSERT INTO memory_links (agent_id, source_id, target_id, kind, score)
            VALUES (:a, :anchor, :linked, 'supports', 0.9),
                   (:a, :incoming, :anchor, 'derived_from', 0.4)
        """), {"a": AGENT, "anchor": anchor, "linked": linked, "incoming": incoming})

    related = store.related(AGENT, anchor)
    assert [r.memory.id for r in related[:2]] == [linked, incoming]
    assert [r.kind for r in related[:2]] == ["supports", "derived_from"]
    rest = related[2:]
    assert {r.kind for r in rest} == {"similar"}
    assert {r.memory.id for r in rest} == {similar, also_similar}
    assert anchor not in {r.memory.id for r in related}
    assert len({r.memory.id for r in related}) == len(related) == 4
    scores = [r.score for r in rest]
    assert scores == sorted(scores, reverse=True)

    assert [r.memory.id for r in store.related(AGENT, anchor, limit=1)] == [linked]
    with pytest.raises(NotFound):
        store.related(AGENT, uuid.uuid4())


def test_forget_agent_deletes_everything_of_that_agent(store: MemoryStore) -> None:
    for i in range(7):
        store.store(AGENT, f"Fact number {i} about the garden.", session_id="s")
    store.kg_add(AGENT, {"id": "garden", "relations": [{"target": "tomato", "type": "grows"}]})
    keep = store.store("keeper", "Fact number 1 about the garden.", session_id="s")

    assert store.forget_agent(AGENT, batch_size=3) == 7
    assert _count(store, AGENT) == 0
    assert store.sessions(AGENT) == []
    with pytest.raises(NotFound):
        store.kg_query(AGENT, "garden")
    assert store.get("keeper", keep.id).content == "Fact number 1 about the garden."
    assert store.forget_agent(AGENT) == 0
