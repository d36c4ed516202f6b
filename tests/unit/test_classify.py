"""The category and importance heuristics (``memory.classify``)."""

from __future__ import annotations

import pytest

from memoryd.memory import classify
from memoryd.types import CATEGORIES, ROLES
from tests.support.classify_examples import EXAMPLES


def test_examples_cover_every_category() -> None:
    assert set(EXAMPLES) == set(CATEGORIES)
    assert set(classify.HALF_LIFE_DAYS) == set(CATEGORIES)


@pytest.mark.parametrize(("category", "content"),
                         [(cat, text) for cat, texts in EXAMPLES.items() for text in texts])
def test_clear_examples_get_their_category(category: str, content: str) -> None:
    result = classify.classify(content)
    assert result.category == category
    assert 0.5 <= result.confidence <= 0.95


def test_no_rule_matching_falls_back_to_fact_with_low_confidence() -> None:
    result = classify.classify("Canberra")
    assert result.category == "fact"
    assert result.confidence == pytest.approx(0.3)


def test_classification_ignores_case() -> None:
    assert classify.classify("WE DECIDED TO SHIP ON MONDAY.").category == "decision"


def test_ties_go_to_the_category_that_matters_most() -> None:
    # one decision word and one preference word: decision wins the tie
    assert classify.classify("We agreed she likes it.").category == "decision"


def test_importance_orders_roles_user_assistant_system() -> None:
    content = "The staging database is read-only on weekends."
    by_role = {role: classify.importance(content, role, "fact") for role in ROLES}
    assert by_role["user"] > by_role["assistant"] > by_role["system"]
    assert by_role["assistant"] >= by_role["tool"] > by_role["system"]


def test_signal_words_raise_importance() -> None:
    plain = classify.importance("The staging database is read-only.", "user", "fact")
    signal = classify.importance("Remember: the staging database is always read-only.",
                                 "user", "fact")
    strong = classify.importance(
        "Important: the user is allergic to nuts, never forget it, it is critical.", "user",
        "fact")
    assert signal > plain
    assert strong > plain


def test_category_raises_importance_of_decisions() -> None:
    content = "Use PostgreSQL for the analytics store."
    assert (classify.importance(content, "user", "decision")
            > classify.importance(content, "user", "preference")
            > classify.importance(content, "user", "fact"))


@pytest.mark.parametrize("content", [
    "x",
    "word " * 5000,
    "Important critical crucial essential key must always never remember password deadline! "
    * 50,
])
@pytest.mark.parametrize("role", [*ROLES, None])
@pytest.mark.parametrize("category", [*CATEGORIES, None])
def test_importance_stays_in_the_unit_interval(content: str, role: str | None,
                                               category: str | None) -> None:
    assert 0.0 <= classify.importance(content, role, category) <= 1.0


