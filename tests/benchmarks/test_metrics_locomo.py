"""LoCoMo scoring: hand-computed cases and the rules of LoCoMo's own evaluation.py."""

from __future__ import annotations

import pytest

from benchmarks.datasets.schema import Question
from benchmarks.metrics.locomo import (
    ABSTENTION_PHRASES,
    OFFICIAL_ABSTENTION_PHRASES,
    aggregate_locomo,
    is_abstention,
    is_official_abstention,
    locomo_f1,
    multi_answer_f1,
    normalize_locomo,
    score_locomo,
    score_locomo_answer,
    score_locomo_scores,
)
from benchmarks.metrics.text import PredictionTypeError, token_f1
from harness.errors import InputError


def q(answer: str, category: str, qid: str = "conv-x:q0") -> Question:
    return Question(id=qid, conversation_id="conv-x", question="?", answer=answer, category=category)


# --- normalization (LoCoMo's normalize_answer) -----------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Cat, and a Dog!", "cat dog"),  # lowercase, commas and punctuation deleted, a/the/and dropped
        ("D1:3", "d13"),  # punctuation is deleted, not replaced by a space
        ("  New   York.  ", "new york"),
        ("Anderson and Andy", "anderson andy"),  # only whole words
        ("an", ""),
    ],
)
def test_normalize(text, expected):
    assert normalize_locomo(text) == expected


# --- token F1 -----------------------------------------------------------------
def test_token_f1_by_hand():
    assert token_f1(["cat", "sat"], ["cat", "sat", "down"]) == pytest.approx(0.8)  # P=1, R=2/3
    assert token_f1(["a", "a", "b"], ["a", "c"]) == pytest.approx(0.4)  # multiset: 1 common; P=1/3, R=1/2
    assert token_f1([], []) == 0.0
    assert token_f1(["x"], []) == 0.0


def test_f1_is_stemmed_after_normalizing():
    assert locomo_f1("The cat sat", "a cat sat down") == pytest.approx(0.8)
    assert locomo_f1("adoption agency", "Adoption agencies") == 1.0  # adopt / agenc
    assert locomo_f1("She was painting", "paintings") == pytest.approx(0.5)  # P=1/3 ("wa" is a token), R=1
    assert locomo_f1("", "Paris") == 0.0


# --- per-category rules ---------------------------------------------------------
def test_category_1_averages_best_match_per_gold_part():
    # gold parts London (best 1.0) and Berlin (0.0) -> 0.5
    assert multi_answer_f1("Paris, London", "London, Berlin") == pytest.approx(0.5)
    # real gold from conv-26: "pottery, camping, painting, swimming"
    assert score_locomo(
        "She does pottery and camping", q("pottery, camping, painting, swimming", "1")
    ) == pytest.approx((0.4 + 0.4 + 0 + 0) / 4)  # 4 predicted tokens; pottery, camping: P=1/4, R=1 -> 0.4


def test_category_1_prediction_is_split_too():
    # prediction parts "pottery" and "camping": each gold part finds its exact match
    assert score_locomo("pottery, camping", q("pottery, camping, painting, swimming", "1")) == pytest.approx(0.5)
    # unsplit prediction "pottery camping" vs "pottery": P=1/2, R=1 -> 2/3 for each of the two hits
    assert score_locomo("pottery camping", q("pottery, camping", "1")) == pytest.approx(2 / 3)


def test_category_3_cuts_gold_at_semicolon():
    gold = "Likely no; since this one went badly"  # conv-26 qa 77
    assert score_locomo("likely no", q(gold, "3")) == 1.0
    assert score_locomo("no", q(gold, "3")) == pytest.approx(2 / 3)  # P=1, R=1/2
    # the same text as category 4 is scored on the whole gold
    assert score_locomo("likely no", q(gold, "4")) < 0.5


def test_categories_2_and_4_are_plain_f1():
    assert score_locomo("7 May 2023", q("7 May 2023", "2")) == 1.0
    assert score_locomo("In 2022", q("2022", "2")) == pytest.approx(2 / 3)
    assert score_locomo_answer("Sweden", "Sweden", 4) == 1.0


def test_category_5_scores_abstention_by_the_official_rule_by_default():
    assert score_locomo("Not mentioned in the conversation.", q("", "5")) == 1.0
    assert score_locomo("No information available", q("", "5")) == 1.0
    assert score_locomo("Yes, she did.", q("", "5")) == 0.0
    assert score_locomo("", q("", "5")) == 0.0
    # refusals in other words count only under the lenient list
    for refusal in ("Unknown.", "I don\u2019t know", "Not enough information.", "It is not specified."):
        assert score_locomo(refusal, q("", "5")) == 0.0
        assert score_locomo_answer(refusal, "", 5) == 0.0
        assert score_locomo(refusal, q("", "5"), abstention_phrases=ABSTENTION_PHRASES) == 1.0
    assert set(OFFICIAL_ABSTENTION_PHRASES) <= set(ABSTENTION_PHRASES)
    assert OFFICIAL_ABSTENTION_PHRASES == ("no information available", "not mentioned")


def test_official_rule_is_locomos_substring_check():
    # LoCoMo: `'no information available' in output.lower() or 'not mentioned' in output.lower()`
    assert is_official_abstention("NOT MENTIONED")
    assert is_official_abstention("it was not mentionedd")  # a substring, not a whole word
    assert not is_official_abstention("not  mentioned")  # no whitespace folding
    assert not is_official_abstention("unknown")
    assert is_abstention("not mentioned anywhere") and not is_abstention("unknown")  # default = official
    assert is_abstention("unknown", ABSTENTION_PHRASES)
    assert is_abstention("I don\u2019t know", ABSTENTION_PHRASES)  # curly apostrophe, lenient only
    assert not is_abstention("She knows everyone", ABSTENTION_PHRASES)  # "know" inside words does not count
    assert not is_abstention("the unknownst", ABSTENTION_PHRASES)


def test_score_locomo_scores_gives_both_values():
    assert score_locomo_scores("Unknown.", q("", "5")) == {"f1": 0.0, "f1_lenient": 1.0}
    assert score_locomo_scores("Not mentioned.", q("", "5")) == {"f1": 1.0, "f1_lenient": 1.0}
    assert score_locomo_scores("Yes.", q("", "5")) == {"f1": 0.0, "f1_lenient": 0.0}
    both = score_locomo_scores("In 2022", q("2022", "2"))
    assert both["f1"] == both["f1_lenient"] == pytest.approx(2 / 3)  # answerable: the same under both rules
    assert score_locomo_scores("unknown", q("unknown", "4")) == {"f1": 1.0, "f1_lenient": 1.0}


# --- robust inputs --------------------------------------------------------------
def test_predictions_that_are_not_strings():
    assert score_locomo(None, q("Paris", "4")) == 0.0
    assert score_locomo(2022, q("2022", "2")) == 1.0
    assert score_locomo(3.5, q("3.5", "4")) == 1.0  # "35" both sides
    with pytest.raises(PredictionTypeError, match=r"prediction for question conv-x:q7 is not a string \(got dict\)"):
        score_locomo({"answer": "Paris"}, q("Paris", "4", qid="conv-x:q7"))
    with pytest.raises(ValueError):  # also a ValueError, for callers that only know builtins
        score_locomo(["Paris"], q("Paris", "4"))
    with pytest.raises(InputError):
        score_locomo(["Paris"], q("Paris", "4"))


def test_empty_or_integer_gold():
    assert score_locomo("anything", q("", "4")) == 0.0
    assert score_locomo_answer("2", 2, "1") == 1.0
    with pytest.raises(InputError, match="unknown LoCoMo category '6'"):
        score_locomo("x", q("x", "6"))


# --- aggregation ----------------------------------------------------------------
def test_aggregate_by_hand():
    out = aggregate_locomo([("1", 1.0), (2, 0.5), ("5", 0.0), ("5", 1.0)])
    assert out["f1_cat1"] == 1.0 and out["f1_cat2"] == 0.5
    assert out["n_cat1"] == 1 and out["n_cat3"] == 0 and "f1_cat3" not in out
    assert out["f1_cat1_4"] == pytest.approx(0.75)
    assert out["f1_cat5"] == pytest.approx(0.5)
    assert out["all_honest"] == pytest.approx((1 + 0.5 + 0 + 1) / 4)
    assert out["all_paper_protocol"] == pytest.approx((1 + 0.5 + 1 + 1) / 4)
    assert out["n"] == 4


def test_aggregate_edge_cases():
    assert aggregate_locomo([]) == {"n_cat1": 0, "n_cat2": 0, "n_cat3": 0, "n_cat4": 0, "n_cat5": 0, "n": 0}
    only_adv = aggregate_locomo([("5", 0.0)])
    assert "f1_cat1_4" not in only_adv and only_adv["all_paper_protocol"] == 1.0 and only_adv["all_honest"] == 0.0
    with pytest.raises(InputError):
        aggregate_locomo([("7", 1.0)])
    with pytest.raises(InputError):
        aggregate_locomo([("1", 1.5)])


def test_aggregate_reports_lenient_separately():
    preds = [("pottery", q("pottery", "4")), ("Unknown.", q("", "5")), ("Not mentioned.", q("", "5")),
             ("Yes.", q("", "5"))]
    rows = [(qq.category, *score_locomo_scores(p, qq).values()) for p, qq in preds]
    out = aggregate_locomo(rows)
    assert out["f1_cat5"] == pytest.approx(1 / 3)  # official: only "Not mentioned."
    assert out["f1_cat5_lenient"] == pytest.approx(2 / 3)
    assert out["all_honest"] == pytest.approx((1 + 1) / 4)
    assert out["all_honest_lenient"] == pytest.approx((1 + 2) / 4)
    assert out["all_paper_protocol"] == 1.0 and out["f1_cat1_4"] == 1.0
    # the official keys do not depend on whether lenient values are passed
    official = aggregate_locomo([(c, f) for c, f, _ in rows])
    assert {k: v for k, v in out.items() if not k.endswith("_lenient")} == official
    assert "f1_cat5_lenient" not in official and "all_honest_lenient" not in official
    # a category-5 row without its lenient value: the lenient aggregates are left out, not guessed
    partial = aggregate_locomo([("5", 1.0, 1.0), ("5", 0.0, None)])
    assert "f1_cat5_lenient" not in partial and "all_honest_lenient" not in partial
    with pytest.raises(InputError):
        aggregate_locomo([("5", 0.0, 1.5)])
    with pytest.raises(InputError):
        aggregate_locomo([("5",)])
