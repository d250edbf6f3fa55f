"""Answer-type hints (memsys.answer.hints) on real LoCoMo questions.

The sample below was read by hand (question, gold answer, the form it takes); the aggregate checks
hold the rules to every LoCoMo question of a kind.
"""

from __future__ import annotations

import re

import pytest

from benchmarks.datasets.locomo import load_locomo
from memsys.answer.hints import ANSWER_TYPES, TYPE_HINTS, answer_type, restates_hint, type_hint

#: LoCoMo question id -> the answer form, read by hand from the question and its gold answer
HAND_CHECKED = {
    "conv-26:q0": "date",     # When did Caroline go to the LGBTQ support group? -> 7 May 2023
    "conv-30:q19": "date",    # When did Gina interview for a design internship? -> 10 May, 2023
    "conv-42:q26": "date",    # When did Nate win his third tourney? -> The week before 3June, 2022
    "conv-43:q55": "date",    # When did John start playing professionally? -> May, 2023
    "conv-48:q101": "date",   # When did Jolene buy her pet snake? -> A year ago
    "conv-43:q49": "count",   # How many times has John injured his ankle? -> two times
    "conv-49:q6": "count",    # How many roadtrips did Evan take in May 2023? -> two
    "conv-26:q101": "yes_no",  # Did Melanie make the black and white bowl in the photo? -> Yes
    "conv-26:q178": "yes_no",  # Is Oscar Melanie's pet? -> No
    "conv-30:q18": "yes_no",   # Do Jon and Gina start businesses out of what they love? -> Yes
    "conv-43:q40": "yes_no",   # Has Tim been to North Carolina and/or Tennesee states in the US? -> Yes
    "conv-48:q11": "yes_no",   # Is Deborah married? -> yes
    "conv-50:q24": "yes_no",   # Can Dave work with engines? -> yes
    "conv-47:q104": "span",   # Where did James plan to visit after Toronto? -> Vancouver
    "conv-48:q54": "span",    # Which pet did Jolene adopt first - Susie or Seraphim? -> Susie
    "conv-50:q1": "span",     # What items did Calvin buy in March 2023? -> mansion in Japan, luxury car ...
    "conv-49:q68": "span",    # What was Sam doing on December 4, 2023? -> Attending a Weight Watchers meeting
    "conv-41:q25": "span",    # What European countries has Maria been to? -> Spain, England
    "conv-50:q49": "span",    # When Dave was a child, what did he and his father do in the garage? -> tinkering ...
    "conv-50:q79": "span",    # What does Dave do when he feels his creativity is frozen? -> immerse himself ...
}


@pytest.fixture(scope="module")
def questions(locomo_path) -> dict[str, str]:
    ds = load_locomo(locomo_path)
    return {q.id: q.question for c in ds.conversations for q in c.questions}


def test_a_hand_checked_sample_of_locomo_questions(questions):
    got = {qid: answer_type(questions[qid]) for qid in HAND_CHECKED}
    assert got == HAND_CHECKED


def test_the_rules_over_every_locomo_question_of_a_kind(questions):
    texts = list(questions.values())
    assert {answer_type(q) for q in texts} == set(ANSWER_TYPES) - {"image"}  # LoCoMo never asks which image
    for q in texts:
        kind = answer_type(q)
        if re.match(r"how (many|much|long|often)\b", q, re.IGNORECASE):
            assert kind == "count", q
        if re.match(r"(what|which) (year|month)\b", q, re.IGNORECASE):
            assert kind == "date", q
        if re.search(r"\S.*\bwhen\b", q, re.IGNORECASE) and not q.lower().startswith("when"):
            assert kind != "date", q  # "What did John say when ...": a conjunction
        if kind == "yes_no":
            assert re.match(r"(is|are|was|were|do|does|did|has|have|can|could|will|would)\b", q, re.IGNORECASE), q


def test_each_type_has_one_prompt_line():
    assert set(TYPE_HINTS) == set(ANSWER_TYPES)
    assert all("\n" not in line and line.startswith("Expected answer: ") for line in TYPE_HINTS.values())
    assert type_hint("How many pets does Andrew have?") == TYPE_HINTS["count"]


def test_which_image_asks_for_an_id_and_every_mem_gallery_such_question_has_one():
    from benchmarks.datasets import load_benchmark
    from harness.paths import data_dir

    if not (data_dir() / "mem-gallery").is_dir():
        pytest.skip("Mem-Gallery data absent")

    assert answer_type("which picture is related to the computational power?") == "image"
    assert answer_type("What picture did Jolene share related to feeling overwhelmed?") == "span"  # a description
    asked = [q for c in load_benchmark("memgallery").conversations for q in c.questions
             if answer_type(q.question) == "image"]
    assert len(asked) > 150 and {q.category for q in asked} >= {"VS"}
    ids = [q for q in asked if re.fullmatch(r"(D\d+:IMG_\d+[,; ]*)+", q.answer.strip())]
    assert len(ids) >= 0.95 * len(asked), [q.answer for q in asked if q not in ids][:5]


@pytest.mark.parametrize("reply", ["a short phrase of a few words (or a short list), not a sentence.",
                                   "a short phrase of a few words (or a short list)",  # the two replies seen
                                   "Expected answer: a number or amount with its unit",
                                   "yes or no"])
def test_a_run_of_the_hints_own_words_is_a_restatement(reply):
    assert any(restates_hint(reply, hint) for hint in TYPE_HINTS.values())


@pytest.mark.parametrize("reply, kind", [("twice a week", "count"), ("4 years", "count"), ("7 May 2023", "date"),
                                         ("a dog and a cat", "span"), ("a date", "date"), ("no", "yes_no"),
                                         ("", "span")])
def test_answers_of_the_hinted_form_are_not_restatements(reply, kind):
    """The hint's own examples and short runs ("a date") are answers of that form, not echoes."""
    assert not restates_hint(reply, TYPE_HINTS[kind])


def test_no_locomo_gold_answer_restates_its_questions_hint(locomo_path):
    """Were the reader to give the gold answer word for word, the check must keep it: nor the trap answer of a category 5
    question: over all of them."""
    ds = load_locomo(locomo_path)
    golds = [(q.question, a) for c in ds.conversations for q in c.questions
             for a in (q.answer, q.adversarial_answer) if a]
    assert len(golds) > 1900
    assert [g for q, g in golds if restates_hint(g, type_hint(q))] == []
