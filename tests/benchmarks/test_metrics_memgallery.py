"""Mem-Gallery scoring: hand-computed cases and the rules of Mem-Gallery's own evaluation."""

from __future__ import annotations

import math

import pytest

from benchmarks.datasets.schema import Question
from benchmarks.metrics.memgallery import (
    aggregate_memgallery,
    bleu,
    exact_match,
    memgallery_f1,
    normalize_memgallery,
    score_memgallery,
    score_memgallery_question,
)
from benchmarks.metrics.text import PredictionTypeError
from harness.errors import InputError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("D1:IMG_001", "d1 img_001"),  # underscores survive, the colon becomes a space
        ("It costs 3.14 dollars.", "it costs 3.14 dollars"),  # decimal point kept, final period dropped
        ("The end, and a start", "end start"),  # a/an/the/and dropped
        ("rock-and-roll", "rock roll"),
        ("a_b", "a_b"),  # an article glued by an underscore is not a word
        ("2024-09-10", "2024 09 10"),
        ("Not mentioned.", "not mentioned"),
    ],
)
def test_normalize(text, expected):
    assert normalize_memgallery(text) == expected


def test_f1_and_em_by_hand():
    assert memgallery_f1("D1:IMG_002", "D1:IMG_002") == 1.0
    assert memgallery_f1("D1:IMG_001", "D1:IMG_002") == pytest.approx(0.5)  # d1 common: P=R=1/2
    assert memgallery_f1("He likes painting", "paintings") == pytest.approx(0.5)  # stemmed: P=1/3, R=1
    assert memgallery_f1("", "x") == 0.0
    assert exact_match("Not mentioned", "not mentioned.") == 1.0
    assert exact_match("paint", "painting") == 0.0  # EM is not stemmed


def test_bleu_by_hand():
    # one token, exact: p1 = 1, p2..p4 smoothed to 0.1 (method 1, epsilon 0.1)
    assert bleu("Paris", "paris", (1, 0, 0, 0)) == pytest.approx(1.0)
    assert bleu("Paris", "paris", (0.5, 0.5, 0, 0)) == pytest.approx(math.sqrt(0.1))
    assert bleu("Paris", "paris") == pytest.approx(0.1 ** 0.75)
    # brevity penalty: 3 of 4 reference tokens length, 2 unigram matches
    assert bleu("red green blue", "red green yellow purple", (1, 0, 0, 0)) == pytest.approx(
        (2 / 3) * math.exp(1 - 4 / 3)
    )
    assert bleu("", "x") == 0.0 and bleu("x", "") == 0.0


def test_score_returns_all_five_metrics():
    s = score_memgallery("D1:IMG_002", "D1:IMG_002")
    assert s["f1"] == 1.0 and s["em"] == 1.0 and s["bleu1"] == 1.0 and s["bleu2"] == 1.0
    assert s["bleu"] == pytest.approx(math.sqrt(0.1))  # 2 tokens: p3, p4 smoothed to 0.1
    assert set(s) == {"f1", "em", "bleu", "bleu1", "bleu2"}
    assert score_memgallery(None, "x") == {"f1": 0.0, "em": 0.0, "bleu": 0.0, "bleu1": 0.0, "bleu2": 0.0}
    assert score_memgallery(3, 3)["em"] == 1.0
    question = Question(id="T:q1", conversation_id="T", question="?", answer="2024-09-10", category="VR")
    assert score_memgallery_question("2024-09-10", question)["f1"] == 1.0
    with pytest.raises(PredictionTypeError, match="prediction for question T:q1 is not a string"):
        score_memgallery_question({"a": 1}, question)


def test_aggregate_by_hand():
    rows = [
        ("VS", score_memgallery("D1:IMG_002", "D1:IMG_002")),
        ("VS", score_memgallery("D1:IMG_001", "D1:IMG_002")),
        ("AR", score_memgallery("not mentioned", "Not mentioned.")),
    ]
    out = aggregate_memgallery(rows)
    assert out["n"] == 3 and out["n_VS"] == 2 and out["n_AR"] == 1 and out["n_TTL"] == 0
    assert out["f1_VS"] == pytest.approx(0.75) and out["em_VS"] == pytest.approx(0.5)
    assert out["f1"] == pytest.approx((1 + 0.5 + 1) / 3)
    assert "f1_TTL" not in out
    with pytest.raises(InputError):
        aggregate_memgallery([("ZZ", rows[0][1])])
    with pytest.raises(InputError):
        aggregate_memgallery([("VS", {"f1": 1.0})])
