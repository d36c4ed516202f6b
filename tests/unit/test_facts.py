"""The fact rule every merge applies besides similarity: pairs of different facts never
merge, true duplicates (case, spacing, punctuation) do."""

from __future__ import annotations

import pytest

from memoryd.memory.facts import carries, facts_of, plain, same_facts

DIFFERENT = [
    ("Order 4411 shipped", "Order 4412 shipped"),
    ("Note 148: the pricing team mentioned item 148 in the review.",
     "Note 149: the pricing team mentioned item 149 in the review."),
    ("Meeting on 2024-03-05", "Meeting on 2024-03-06"),
    ("The standup is at 10:30", "The standup is at 11:30"),
    ("The standup is at 10:30 am", "The standup is at 10:30 pm"),
    ("The plan costs $5.00 a month", "The plan costs $6.00 a month"),
    ("The plan costs $5 a month", "The plan costs €5 a month"),
    ("The plan costs 5 a month", "The plan costs 5% a month"),
    ("The freezer runs at -5 degrees", "The freezer runs at 5 degrees"),
    ("The ratio is 4.5", "The ratio is 45"),
    ("The ratio is 4.5", "The ratio is 4 5"),
    ("Alice likes tea", "Bob likes tea"),
    ("The report goes to Alice", "The report goes to Bob"),
    ("The user likes cats", "The user does not like cats"),
    ("The user likes cats", "The user doesn't like cats"),
    ("The user likes cats", "The user never liked cats"),
    ("The user drinks coffee with sugar", "The user drinks coffee without sugar"),
    ("Send the invoice to user@x.com", "Send the invoice to user@y.com"),
    ("The docs live at https://a.example.com/x", "The docs live at https://b.example.com/x"),
    ("Deployed v1.2.3 to production", "Deployed v1.2.4 to production"),
    ("SKU AB-1234 is out of stock", "SKU AB-1243 is out of stock"),
    ("Request 3f2b8c1e-0000-4000-8000-000000000001 failed",
     "Request 3f2b8c1e-0000-4000-8000-000000000002 failed"),
    ("The user has three cats", "The user has four cats"),
    ("The review is on Monday", "The review is on Tuesday"),
    ("The launch is in March", "The launch is in April"),
    ("The launch is today", "The launch is tomorrow"),
    ("Moved the meeting from 3 to 4", "Moved the meeting from 4 to 3"),
    ("I like C++", "I like C"),
    ("Order 4411 shipped", "Order shipped"),
    ("Dark mode is enabled for the user", "Dark mode is disabled for the user"),
    ("The build passed on main", "The build failed on main"),
    ("The alarm is on", "The alarm is off"),
    ("The user likes cats", "The user dislikes cats"),
]

SAME = [
    ("User prefers dark mode.", "user prefers  dark mode"),
    ("User prefers dark mode.", "User prefers dark mode!"),
    ("User prefers dark mode", "USER PREFERS DARK MODE"),
    ("Hello, World!", "  hello   world. "),
    ("Order 4411 shipped.", "order #4411 shipped"),
    ("Order 4,411 shipped", "Order 4411 shipped"),
    ("The plan costs $5.00.", "The plan costs $5"),
    ("The user doesn't like cats", "The user does not like cats."),
    ("The user cannot swim", "the user can't swim"),
    ("Alice's flight leaves at 10:30.", "alice's flight leaves at 10:30"),
    ("Meeting on 2024-03-05 (Tuesday).", "meeting on 2024-03-05, tuesday"),
    ("The user prefers dark mode", "User prefers the dark mode"),
    ("Ask Bob about the SKU AB-1234 order", "ask bob about the sku ab-1234 order"),
    ("The user doesn\u2019t like cats", "The user does not like cats"),
    ("Alice\u2019s flight", "alice's flight"),
    ("The freezer runs at \u22125 degrees", "The freezer runs at -5 degrees"),
]


@pytest.mark.parametrize(("a", "b"), DIFFERENT)
def test_memories_that_differ_in_a_fact_are_not_the_same_facts(a: str, b: str) -> None:
    assert not same_facts(a, b)
    assert not same_facts(b, a)


@pytest.mark.parametrize(("a", "b"), SAME)
def test_true_duplicates_are_the_same_facts(a: str, b: str) -> None:
    assert same_facts(a, b)
    assert same_facts(b, a)


@pytest.mark.parametrize(("a", "b"), [
    ("Order 4411 shipped.", "ORDER  4411 SHIPPED"), ("The user can't swim!", "the user can't swim"),
    ("Costs $5.00 (net).", "costs $5.00 (net)"), ("I like C++.", "i like c++"),
    ("Ask Bob about v1.2.3?!", "ask bob about v1.2.3")])
def test_texts_of_the_same_plain_form_read_as_the_same_facts(a: str, b: str) -> None:
    assert plain(a) == plain(b)
    assert facts_of(a).same_as(facts_of(b))


def test_numbers_are_normalised_and_identifiers_kept_whole() -> None:
    assert facts_of("Paid $4,411.50 (-3%) for #12 on 2024-03-05 at 10:30, v1.2.3.").tokens == (
        "$4411.5", "-3%", "12", "2024-03-05", "10:30", "v1.2.3")


def test_negations_number_words_and_dates_are_fact_tokens_in_order() -> None:
    assert facts_of("No, she won't come on Friday without two tickets").tokens == (
        "no", "not", "friday", "without", "two")


def test_a_name_is_a_capitalised_word_other_than_a_common_one() -> None:
    assert facts_of("The report for Alice's team. Berlin wants it.").names == {
        "alice", "berlin"}


def test_a_summary_carries_the_texts_whose_facts_it_states() -> None:
    summary = facts_of("Order 4411 and order 4412 shipped to Alice; the refund was not paid.")
    assert carries(summary, ["Order 4411 shipped", "Order 4412 shipped to alice",
                             "The refund was not paid", "Order 4413 shipped",
                             "Order 4411 shipped to Bob", "Order 4411 and 4411 shipped",
                             "The refund was not not paid", "the team met"]) == [
        True, True, True, False, False, False, False, True]
