"""What a question asks about, and what a memory states of whom (``memory.asking``)."""

from __future__ import annotations

import pytest

from memoryd.memory import asking


@pytest.mark.parametrize(("question", "attribute"), [
    ("Where does Ilvar Ostberg live?", "residence"),
    ("Who does Nell Thistlewood work for?", "employer"),
    ("What is Orla Harrowby's job title?", "role"),
    ("Who is Lumi Brennagh's manager?", "manager"),
    ("What is Zephyr Drummage's phone number?", "phone"),
    ("What is Tovah Stavely's email address?", "email"),
    ("What car does Caspian Drummage drive?", "vehicle"),
    ("Who is Anselm Carrick's partner?", "relationship"),
])
def test_a_question_for_one_attribute_of_a_named_person_is_read(question: str,
                                                                attribute: str) -> None:
    found = asking.asked(question)
    assert found is not None and found.attribute == attribute and found.relations == ()
    assert len(found.names) == 2


@pytest.mark.parametrize("question", [
    "When did Caroline go to the LGBTQ support group?",  # no single-valued attribute
    "where do we deploy on fridays",  # nobody named
    "What car and phone does Ilvar have?",  # two attributes
])
def test_other_questions_ask_nothing_ranking_would_use(question: str) -> None:
    assert asking.asked(question) is None


def test_a_relative_in_the_question_is_part_of_its_subject() -> None:
    found = asking.asked("Where does Ilvar's sister live?")
    assert found is not None and found.relations == ("sister",)


def test_a_memory_states_its_subject_and_attribute() -> None:
    assert asking.about("Jory Thistlewood moved to Halifax last week.") == [
        "jory thistlewood||residence"]
    assert asking.about("Jory Thistlewood's sister lives in Rotterdam.") == [
        "jory thistlewood|sister|residence"]
    assert asking.about("The weather was lovely.") == []


def test_fit_prefers_the_subject_over_someone_close_to_them() -> None:
    question = asking.asked("Where does Jory Thistlewood live?")
    assert question is not None
    assert asking.fit(question, ["jory thistlewood||residence"]) == 1
    assert asking.fit(question, ["jory thistlewood|sister|residence"]) == -1
    assert asking.fit(question, ["jory thistlewood||employer"]) == 0
    assert asking.fit(question, ["ilvar ostberg||residence"]) == 0
    assert asking.fit(question, None) == 0
    sister = asking.asked("Where does Jory Thistlewood's sister live?")
    assert sister is not None
    assert asking.fit(sister, ["jory thistlewood|sister|residence"]) == 1
