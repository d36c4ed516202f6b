"""The pure rules behind what maintenance gathers and links: which named subjects a memory
is summarized by (never across unrelated people), which messages an extracted fact
came from, and which version cause a move to evicted_memories records."""

from __future__ import annotations

import uuid

from memoryd.memory.maintenance.cortex import sources_of
from memoryd.memory.maintenance.evicting import MERGE_REASONS
from memoryd.memory.maintenance.session_lists import Message
from memoryd.memory.maintenance.summary_groups import subject

PEOPLE = ["Alice Moreau", "Bruno Keller", "Chen Wei", "Dana Levi", "Emeka Obi",
          "Farah Haddad", "Goran Petrovic", "Hana Sato", "Ivan Novak", "Julia Costa"]


def test_ten_people_give_ten_subjects() -> None:
    keys = {subject(f"{person} moved to another city last spring.") for person in PEOPLE}
    assert len(keys) == 10 and "" not in keys


def test_facts_about_one_person_share_a_subject_whatever_they_say() -> None:
    keys = {subject(text) for text in (
        "Alice Moreau lives in Porto.", "Alice Moreau's sister studies law.",
        "Alice Moreau plays chess on Sundays.")}
    assert keys == {"alice moreau"}


def test_a_text_naming_no_one_has_no_subject() -> None:
    assert subject("it rained all day on the hike.") == ""
    assert subject("coffee tastes better with oat milk.") == ""


def test_the_value_a_fact_states_is_not_its_subject() -> None:
    assert subject("Ilvar moved to Oslo.") == subject("Ilvar moved to Bergen.")


def _messages(*texts: str) -> list[Message]:
    return [Message(uuid.uuid4(), t) for t in texts]


def test_a_fact_comes_from_the_messages_that_state_it_word_for_word() -> None:
    messages = _messages("Hi there.", "Thanks. I  prefer green tea in the mornings!",
                         "Noted.")
    assert sources_of("I prefer green tea in the mornings.", messages) == [messages[1].id]


def test_a_paraphrased_fact_comes_from_every_message_read() -> None:
    messages = _messages("Hi there.", "I like tea.")
    assert sources_of("The user likes tea.", messages) == [m.id for m in messages]


def test_every_merge_reason_is_one_the_jobs_use() -> None:
    # merging (consolidate: "merged", deduplicate: "duplicate"), repair: "session_merge"
    assert set(MERGE_REASONS) == {"merged", "duplicate", "session_merge"}
