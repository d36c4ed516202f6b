"""The judges of supersession: the offline pattern judge, the LLM judge's one-line-per-pair
reply, and how the two combine. Pure: no database, and the only LLM is a scripted fake."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from memoryd.errors import LLMError, LLMUnavailable
from memoryd.memory import judging
from memoryd.memory.judging import (
    SUPERSEDE_AT,
    Judgement,
    combine,
    judge_offline,
    judge_with_llm,
    parse_judgements,
    subjects,
)
from memoryd.memory.llm import ExtractiveLLM


def applied(judged: Judgement) -> bool:
    """Whether the decision would mark the old memory superseded without a person."""
    return judged.verdict in ("replaces", "conflicts") and judged.confidence >= SUPERSEDE_AT


# (new, old, attribute): the new memory makes the old one no longer true.
REPLACES = [
    ("Dana Whitfield now lives in Vancouver.", "Dana Whitfield lives in Toronto.", "residence"),
    ("Dana relocated from Toronto to Vancouver in May.", "Dana lives in Toronto.", "residence"),
    ("Dana doesn't live in Toronto any more.", "Dana lives in Toronto.", "residence"),
    ("Dana has been living in Vancouver since March.", "Dana lives in Toronto.", "residence"),
    ("Dana is now working for Shopify.", "Dana works at Deloitte.", "employer"),
    ("Dana quit Deloitte.", "Dana works at Deloitte.", "employer"),
    ("Dana got a job at Shopify.", "Dana works for Deloitte.", "employer"),
    ("Dana works remotely for Stripe now.", "Dana works at Deloitte.", "employer"),
    ("Dana moved to Vancouver. She now works at Shopify.", "Dana works at Deloitte.",
     "employer"),
    ("Dana is now a Principal Engineer.", "Dana is a Staff Engineer.", "role"),
    ("Dana became head of marketing.", "Dana works as a marketing analyst.", "role"),
    ("Dana was appointed chief technology officer.", "Dana is the head of engineering.", "role"),
    ("Dana's boss is now Priya Nair.", "Dana reports to Tom Baker.", "manager"),
    ("Tom Baker is no longer Dana's manager.", "Dana reports to Tom Baker.", "manager"),
    ("Dana's new email is dana@newmail.example.", "Dana's email is dana.w@oldmail.example.",
     "email"),
    ("Reach Dana at dana@studio.example from now on.", "Dana's email is dw@firm.example.",
     "email"),
    ("Dana's number is now 555-867-5309.", "Dana's phone is 555-123-4567.", "phone"),
    ("My new phone number is +49 151 2345 6789.", "User's phone number is +49 170 1111 2222.",
     "phone"),
    ("Dana's new address is 14 Elm Street.", "Dana's address is 3 Oak Road.", "address"),
    ("Dana bought a Tesla Model Y.", "Dana drives a Honda Civic.", "vehicle"),
    ("Dana no longer drives the Civic.", "Dana drives a Honda Civic.", "vehicle"),
    ("Dana adopted a kitten called Pip.", "Dana has a golden retriever named Max.", "pet"),
    ("Dana's cat Luna passed away; she adopted a puppy named Rocco.",
     "Dana has a cat called Luna.", "pet"),
    ("Dana broke up with Sam.", "Dana is dating Sam Ortiz.", "relationship"),
    ("Dana and Sam split up last month.", "Dana is seeing Sam Ortiz.", "relationship"),
    ("Dana is single again.", "Dana is dating Sam Ortiz.", "relationship"),
    ("Dana switched from coffee to green tea.", "Dana's favourite drink is coffee.",
     "preference"),
    ("Dana can't stand coffee any more.", "Dana loves coffee.", "preference"),
    ("Dana doesn't drink espresso anymore; she has switched to decaf.",
     "Dana's favourite drink is espresso.", "preference"),
    ("Dana's favourite colour is green now.", "Dana's favourite colour is blue.", "preference"),
    ("We decided against Postgres.", "We decided to use Postgres for the billing service.",
     "preference"),
    ("The user moved to Berlin.", "The user lives in Munich.", "residence"),
    ("I moved to Berlin last month.", "User lives in Munich.", "residence"),
    ("Dana's parents moved to Florida.", "Dana's parents live in Ohio.", "residence"),
    ("Dana's mum moved to Florida.", "Dana's mother lives in Ohio.", "residence"),
]


@pytest.mark.parametrize(("new", "old", "attribute"), REPLACES, ids=[r[0] for r in REPLACES])
def test_a_new_value_with_a_cue_replaces_the_old_one(new: str, old: str, attribute: str) -> None:
    judged = judge_offline(new, old)
    assert (judged.verdict, judged.attribute, judged.judge) == ("replaces", attribute, "offline")
    assert judged.confidence >= SUPERSEDE_AT


# (new, old): same subject and attribute, different values, nothing says which is newer.
CONFLICTS = [
    ("Dana is based in Vancouver.", "Dana lives in Toronto."),
    ("Dana's employer is Shopify.", "Dana works for Deloitte."),
    ("Priya Nair manages Dana.", "Dana reports to Tom Baker."),
    ("Dana's girlfriend is Lee Park.", "Dana is dating Sam Ortiz."),
    # the cue is in the old text: the caller orders the two by time
    ("Dana lives in Vancouver.", "Dana moved to Toronto last year."),
    ("Marco Bellini lives in Turin and works at Fiat.", "Marco Bellini moved to Milan."),
]


@pytest.mark.parametrize(("new", "old"), CONFLICTS, ids=[c[0] for c in CONFLICTS])
def test_two_values_without_a_cue_in_the_new_text_conflict(new: str, old: str) -> None:
    judged = judge_offline(new, old)
    assert judged.verdict == "conflicts"
    assert judged.confidence >= SUPERSEDE_AT


# (new, old, verdict): the old memory stays true.
KEEPS = [
    # another subject: a relative, a colleague, another person
    ("Dana moved to Vancouver.", "Dana's brother lives in Toronto.", "unrelated"),
    ("Dana's brother moved to Vancouver.", "Dana lives in Toronto.", "unrelated"),
    ("Dana's husband works at Shopify.", "Dana works for Deloitte.", "unrelated"),
    ("Dana's sister's number is 555-867-5309.", "Dana's phone is 555-123-4567.", "unrelated"),
    ("Marco's daughter drives a Fiat Panda.", "Marco drives an Alfa Romeo Giulia.", "unrelated"),
    ("Marco's wife Giulia works at Pirelli.", "Marco works at Fiat.", "unrelated"),
    ("Anna Bellini works at Pirelli.", "Marco Bellini works at Fiat.", "unrelated"),
    ("Dana lives in Toronto.", "Ilvar lives in Oslo.", "unrelated"),
    # attributes that hold many values
    ("Dana has also adopted a kitten called Pip.", "Dana has a golden retriever named Max.",
     "additive"),
    ("Dana took up pottery.", "Dana plays chess.", "additive"),
    ("Dana spent two weeks in Lisbon.", "Dana visited Rome.", "additive"),
    ("Dana is allergic to cats.", "Dana is allergic to peanuts.", "additive"),
    ("Dana is learning German.", "Dana speaks English.", "additive"),
    ("Dana has a daughter.", "Dana has a son.", "additive"),
    ("Dana likes hiking.", "Dana likes coffee.", "additive"),
    # the same value restated
    ("Dana lives in Toronto.", "Dana moved to Toronto last year.", "additive"),
    ("Dana now lives in Toronto.", "Dana lives in Toronto.", "additive"),
    ("Dana is married to Sam Ortiz.", "Dana is dating Sam Ortiz.", "additive"),
    # another attribute, or nothing the patterns read
    ("Dana visited Vancouver in June.", "Dana lives in Toronto.", "unrelated"),
    ("Dana Whitfield lives in Toronto.", "Dana Whitfield works at Deloitte.", "unrelated"),
    ("Dana's favourite film is Alien.", "Dana's favourite drink is coffee.", "unrelated"),
    ("Dana is a vegetarian.", "Dana is a Staff Engineer.", "unrelated"),
    ("User prefers concise answers.", "User prefers dark mode.", "unrelated"),
    ("Dana spent the weekend in Oslo.", "Dana lives in Lisbon.", "unrelated"),
    ("Dana loves Oslo.", "Dana lives in Lisbon.", "unrelated"),
    ("Deployed v1.2.4 to production.", "Deployed v1.2.3 to production.", "unrelated"),
    # phrasings whose pattern words mean something else
    ("The meeting moved to Thursday.", "The meeting is on Wednesday.", "unrelated"),
    ("Dana moved to the backend team.", "Dana lives in Lisbon.", "unrelated"),
    ("Dana works at night.", "Dana works at Deloitte.", "unrelated"),
    ("Dana is seeing a therapist.", "Dana is dating Sam.", "unrelated"),
    ("Dana drives a hard bargain.", "Dana drives a Volvo.", "unrelated"),
    ("Dana joined a gym.", "Dana works at Deloitte.", "unrelated"),
    ("Order 4411234 shipped on 2024-03-05.", "Dana's phone number is 07911 123456.",
     "unrelated"),
]


@pytest.mark.parametrize(("new", "old", "verdict"), KEEPS, ids=[k[0] for k in KEEPS])
def test_the_old_memory_stays_when_the_new_one_does_not_replace_it(
        new: str, old: str, verdict: str) -> None:
    judged = judge_offline(new, old)
    assert judged.verdict == verdict
    assert not applied(judged)


def test_a_subject_the_text_does_not_name_is_never_applied() -> None:
    judged = judge_offline("She moved to Vancouver.", "Dana lives in Toronto.")
    assert judged.verdict == "replaces"
    assert judged.confidence < SUPERSEDE_AT


def test_a_relative_of_an_unnamed_subject_is_still_another_subject() -> None:
    judged = judge_offline("Her sister moved to Vancouver.", "Dana lives in Toronto.")
    assert judged.verdict == "unrelated"


def test_a_generic_left_is_sure_for_an_employer_but_not_for_a_city() -> None:
    assert applied(judge_offline("Dana left Deloitte.", "Dana works at Deloitte."))
    left_town = judge_offline("Dana left Toronto for a conference.", "Dana lives in Toronto.")
    assert left_town.verdict == "replaces" and not applied(left_town)


def test_a_switch_that_names_no_old_value_goes_to_review() -> None:
    judged = judge_offline("We switched to MySQL.", "We decided to use Postgres.")
    assert judged.verdict == "replaces" and judged.confidence < SUPERSEDE_AT


def test_a_preference_of_unknown_topic_goes_to_review() -> None:
    judged = judge_offline("User prefers light mode now.", "User prefers dark mode.")
    assert judged.verdict == "replaces" and judged.confidence < SUPERSEDE_AT


def test_only_the_start_of_a_long_memory_is_read() -> None:
    padding = "Notes from the planning call about the quarterly roadmap. " * 80
    old = "Dana lives in Toronto."
    assert judge_offline("Dana moved to Vancouver. " + padding, old).verdict == "replaces"
    assert judge_offline(padding + "Dana moved to Vancouver.", old).verdict == "unrelated"


def test_a_text_with_nothing_to_read_is_unrelated_with_low_confidence() -> None:
    judged = judge_offline("The report goes to Alice.", "The report goes to Bob.")
    assert judged == Judgement("unrelated", judged.confidence, None, "offline")
    assert judged.confidence < 0.5


# --- fresh phrasings ---------------------------------------------------------------------------
# Written after the patterns were finished and never tuned on: how the judge does on
# sentences nobody wrote the patterns for. Measured when written: 20 of 22 replacements
# applied (missed: "moved into a flat in", and "I've" read as no subject), none of the 16
# keeps applied. The thresholds leave room for two more misses, never a false application.

FRESH_REPLACES = [
    ("Kofi Mensah has just moved into a flat in Accra.", "Kofi Mensah lives in Kumasi."),
    ("Kofi is living in Accra these days.", "Kofi is based in Kumasi."),
    ("Kofi relocated to Cape Town for good.", "Kofi's home is in Kumasi."),
    ("Kofi now works at Ecobank.", "Kofi is employed by Stanbic."),
    ("Kofi resigned from Stanbic last Friday.", "Kofi works for Stanbic."),
    ("Kofi accepted a position at MTN Ghana.", "Kofi has a job at Stanbic."),
    ("Kofi's current role is Head of Risk.", "Kofi works as a credit analyst."),
    ("Kofi was promoted to regional director.", "Kofi is a branch manager."),
    ("Kofi now reports directly to Ama Owusu.", "Kofi's line manager is Yaw Boateng."),
    ("Kofi has a new boss: Ama Owusu.", "Kofi reports to Yaw Boateng."),
    ("Kofi's mobile number changed to +233 24 555 0199.", "Kofi's mobile is +233 20 111 2233."),
    ("Kofi no longer uses kofi@oldbank.example; his email is now kofi@mtn.example.",
     "Kofi's email is kofi@oldbank.example."),
    ("Kofi's address is now 9 Ring Road, Accra.", "Kofi's address is 41 Prempeh Street."),
    ("Kofi recently bought a Toyota Hilux.", "Kofi drives a Nissan Almera."),
    ("Kofi's car is now a grey Kia Sportage.", "Kofi's car is a white Honda Fit."),
    ("Kofi got a rescue greyhound named Dash after his parrot died.",
     "Kofi has an African grey parrot."),
    ("Kofi is now engaged to Efua Asante.", "Kofi is dating Abena Darko."),
    ("Kofi and Abena have separated.", "Kofi's wife is Abena Darko."),
    ("Kofi's favourite food these days is jollof rice.", "Kofi's favourite food is banku."),
    ("Kofi has given up sugary tea and now prefers black coffee.", "Kofi loves sugary tea."),
    ("Our team decided against Jenkins.", "Our team decided to use Jenkins for CI."),
    ("I've relocated to Lagos.", "The user lives in Accra."),
]
FRESH_KEEPS = [
    ("Kofi's nephew moved to Accra.", "Kofi lives in Kumasi."),
    ("Kofi's cousin Kwame works at Ecobank.", "Kofi works at Stanbic."),
    ("Kofi's daughter bought a Toyota Hilux.", "Kofi drives a Nissan Almera."),
    ("Kofi's neighbour has a beagle called Tito.", "Kofi has a parrot called Zazu."),
    ("Kofi's brother is engaged to Efua Asante.", "Kofi is dating Abena Darko."),
    ("Kofi also visited Lagos in April.", "Kofi lives in Kumasi."),
    ("Kofi has taken up tennis as well.", "Kofi plays golf."),
    ("Kofi went to Cape Town for a conference.", "Kofi lives in Kumasi."),
    ("Kofi is allergic to shellfish.", "Kofi is allergic to penicillin."),
    ("Kofi speaks Twi and French.", "Kofi speaks English."),
    ("Kofi still lives in Kumasi.", "Kofi lives in Kumasi."),
    ("Kofi's phone is +233 20 111 2233.", "Kofi's mobile is +233 20 111 2233."),
    ("Ama Owusu works at Ecobank.", "Kofi works at Stanbic."),
    ("Kofi works at Stanbic.", "Kofi lives in Kumasi."),
    ("Kofi met Abena at the market.", "Kofi is dating Abena Darko."),
    ("Kofi's assistant's email is ama@stanbic.example.", "Kofi's email is kofi@stanbic.example."),
]


def test_fresh_phrasings_are_mostly_judged_right_and_never_falsely_applied() -> None:
    hits = [n for n, o in FRESH_REPLACES if (j := judge_offline(n, o)).verdict == "replaces"
            and j.confidence >= SUPERSEDE_AT]
    false = [n for n, o in FRESH_KEEPS if applied(judge_offline(n, o))]
    assert len(hits) >= len(FRESH_REPLACES) - 4
    assert false == []


# --- subjects -------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "words"), [
    ("Ilvar Ostberg moved to Oslo last week.", {"ilvar", "ostberg"}),
    ("These days Ilvar's favourite drink is tea.", {"ilvar"}),
    ("Ilvar Ostberg's sister lives in Oslo.", {"ilvar", "ostberg"}),
    ("You can reach Mirren Quarrington at mirren@post.example.", {"mirren", "quarrington"}),
    ("Tovah Vellacott manages Osric's team.", {"osric"}),
    ("The user moved to Berlin.", {"user"}),
    ("We decided against Postgres.", {"postgres"}),
    ("Dana moved to Vancouver. She now works at Shopify.", {"dana"}),
])
def test_subjects_are_the_names_a_text_is_about_not_its_values(text: str, words: set[str]) -> None:
    assert subjects(text) == frozenset(words)


def test_subjects_of_a_text_the_patterns_do_not_read_are_all_its_names() -> None:
    assert subjects("Had lunch with Ilvar and Mirren at Noma.") == {"ilvar", "mirren", "noma"}


def test_a_text_without_names_has_no_subjects() -> None:
    assert subjects("the build failed again") == frozenset()


# --- the LLM judge ---------------------------------------------------------------------------

@dataclass
class ScriptedLLM:
    """The only fake allowed: answers each call with the next scripted reply."""

    replies: list[str]
    name: str = "scripted"
    calls: list[tuple[str, str, int]] = field(default_factory=list)

    def complete(self, system: str, prompt: str, max_tokens: int) -> str:
        self.calls.append((system, prompt, max_tokens))
        return self.replies.pop(0)


@dataclass
class FailingLLM:
    error: Exception
    name: str = "failing"

    def complete(self, system: str, prompt: str, max_tokens: int) -> str:
        raise self.error


PAIRS = [("Ilvar moved to Oslo.", "Ilvar lives in Lisbon."),
         ("Ilvar's sister lives in Oslo.", "Ilvar lives in Lisbon."),
         ("Ilvar took up chess.", "Ilvar plays the cello.")]


def test_one_llm_call_judges_a_whole_batch_one_line_per_pair() -> None:
    llm = ScriptedLLM(["1: replaces 0.92 residence\n2: unrelated 0.9 none\n3: additive 0.8 hobby"])
    judged = judge_with_llm(llm, PAIRS)
    assert judged == [Judgement("replaces", 0.92, "residence", "llm"),
                      Judgement("unrelated", 0.9, None, "llm"),
                      Judgement("additive", 0.8, "hobby", "llm")]
    assert len(llm.calls) == 1
    system, prompt, max_tokens = llm.calls[0]
    assert "replaces" in system and "conflicts" in system
    assert "1.\nNEW: Ilvar moved to Oslo.\nOLD: Ilvar lives in Lisbon." in prompt
    assert "3.\nNEW: Ilvar took up chess." in prompt
    assert max_tokens >= 3 * 12


def test_an_empty_batch_calls_no_llm() -> None:
    llm = ScriptedLLM([])
    assert judge_with_llm(llm, []) == []
    assert llm.calls == []


def test_a_long_memory_is_clipped_in_the_prompt() -> None:
    llm = ScriptedLLM(["1: unrelated 0.5 none"])
    judge_with_llm(llm, [("Ilvar " + "word " * 1000, "Ilvar lives in Lisbon.")])
    assert len(llm.calls[0][1]) < 1000


@pytest.mark.parametrize("error", [LLMUnavailable("rate limited", retry_after=3.0),
                                   LLMError("bad request")])
def test_llm_errors_propagate(error: Exception) -> None:
    with pytest.raises(type(error)):
        judge_with_llm(FailingLLM(error), PAIRS)


def test_the_offline_fallback_refuses_to_judge_instead_of_answering_unrelated() -> None:
    with pytest.raises(LLMError, match="judge_offline"):
        judge_with_llm(ExtractiveLLM(), PAIRS)


def test_the_parser_tolerates_bullets_backticks_preamble_and_case() -> None:
    reply = ("Here are my judgements:\n- 2) Unrelated 0.85 NONE\n`1: replaces 1 residence`\n"
             "3. additive .7 hobby.")
    assert parse_judgements(reply, 3) == [Judgement("replaces", 1.0, "residence", "llm"),
                                          Judgement("unrelated", 0.85, None, "llm"),
                                          Judgement("additive", 0.7, "hobby", "llm")]


BLANK = Judgement("unrelated", 0.0, None, "llm")


@pytest.mark.parametrize("line", [
    "1: replaces",  # no confidence
    "1: replaces high residence",  # not a number
    "1: replaces 1.5 residence",  # above 1
    "1: supersedes 0.9 residence",  # not a verdict
    "1: replaces 0.9 residence because she moved",  # trailing prose
    "replaces 0.9 residence",  # no pair number
    "7: replaces 0.9 residence",  # a pair that does not exist
    "0: replaces 0.9 residence",
    "",
])
def test_a_malformed_line_leaves_its_pair_unrelated_at_zero(line: str) -> None:
    assert parse_judgements(line, 1) == [BLANK]


def test_a_missing_line_leaves_only_its_own_pair_unrelated() -> None:
    judged = parse_judgements("1: replaces 0.9 residence\n3: conflicts 0.6 employer", 3)
    assert judged == [Judgement("replaces", 0.9, "residence", "llm"), BLANK,
                      Judgement("conflicts", 0.6, "employer", "llm")]


def test_a_pair_answered_twice_differently_is_not_guessed() -> None:
    reply = "1: replaces 0.9 residence\n1: unrelated 0.9 none\n2: additive 0.8 hobby"
    assert parse_judgements(reply, 2)[0] == BLANK
    same_twice = "1: replaces 0.9 residence\n1: replaces 0.9 residence"
    assert parse_judgements(same_twice, 1) == [Judgement("replaces", 0.9, "residence", "llm")]


def test_an_unknown_attribute_keeps_the_verdict_without_an_attribute() -> None:
    assert parse_judgements("1: conflicts 0.7 shoe_size", 1) == [
        Judgement("conflicts", 0.7, None, "llm")]


# --- combine ---------------------------------------------------------------------------------

def offline(verdict: str, confidence: float) -> Judgement:
    return Judgement(verdict, confidence, "residence", "offline")  # type: ignore[arg-type]


def llm(verdict: str, confidence: float) -> Judgement:
    return Judgement(verdict, confidence, "residence", "llm")  # type: ignore[arg-type]


def test_without_an_llm_the_offline_judgement_stands() -> None:
    assert combine(offline("conflicts", 0.65), None) == ("conflicts", 0.65, "offline")


def test_both_judges_superseding_gives_the_higher_confidence() -> None:
    assert combine(offline("replaces", 0.9), llm("replaces", 0.95)) == (
        "replaces", 0.95, "offline+llm")
    assert combine(offline("conflicts", 0.85), llm("conflicts", 0.8)) == (
        "conflicts", 0.85, "offline+llm")


def test_a_judge_that_saw_which_is_newer_makes_the_agreement_a_replacement() -> None:
    assert combine(offline("conflicts", 0.9), llm("replaces", 0.85))[0] == "replaces"
    assert combine(offline("replaces", 0.9), llm("conflicts", 0.85))[0] == "replaces"


@pytest.mark.parametrize(("first", "second"), [
    (offline("replaces", 0.95), llm("unrelated", 0.9)),
    (offline("additive", 0.8), llm("replaces", 0.99)),
    (offline("unrelated", 0.3), llm("conflicts", 0.9)),
])
def test_judges_that_disagree_send_the_pair_to_review(first: Judgement, second: Judgement) -> None:
    verdict, confidence, label = combine(first, second)
    assert (verdict, label) == ("conflicts", "offline+llm")
    assert confidence < SUPERSEDE_AT


def test_a_disagreement_keeps_a_low_confidence_low() -> None:
    assert combine(offline("unrelated", 0.9), llm("replaces", 0.2))[1] == 0.2


def test_when_neither_supersedes_the_llm_verdict_stands() -> None:
    assert combine(offline("unrelated", 0.3), llm("additive", 0.8)) == ("additive", 0.8, "llm")
    assert combine(offline("additive", 0.8), llm("additive", 0.9)) == (
        "additive", 0.9, "offline+llm")


def test_an_ended_value_replaces_a_present_statement_no_pattern_reads() -> None:
    judged = judging.judge_offline("Corin Vale sold the green Lada Niva and bought a bicycle.",
                                   "Corin Vale potters about town in a green Lada Niva.")
    assert judged.verdict == "replaces" and judged.confidence >= judging.SUPERSEDE_AT


def test_an_ended_value_does_not_apply_to_a_past_event_or_a_relative() -> None:
    event = judging.judge_offline("Corin Vale left Brightmoor Labs and joined Qwill.",
                                  "Corin Vale gave a talk at Brightmoor Labs.")
    assert event.confidence < judging.SUPERSEDE_AT
    relative = judging.judge_offline("Corin Vale left Brightmoor Labs and joined Qwill.",
                                     "Corin Vale's uncle potters about Brightmoor Labs.")
    assert relative.verdict == "unrelated"


def test_the_subject_is_the_name_nearest_the_statement_not_an_opening_phrase() -> None:
    judged = judge_offline("After the reshuffle of the team, Corin Vale's boss is Ada Lenz.",
                           "After the team offsite, Mara Quist's boss is Tom Reyes.")
    assert judged.verdict == "unrelated"
