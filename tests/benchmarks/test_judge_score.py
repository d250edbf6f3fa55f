"""J from judged rows: per-question means over runs, categories 1-4, the category-5 rule, length, agreement."""

from __future__ import annotations

import math

import pytest
from sklearn.metrics import cohen_kappa_score

from benchmarks.datasets.locomo import load_locomo
from benchmarks.datasets.schema import Question
from benchmarks.judge.config import JudgeConfig
from benchmarks.judge.protocol import LENIENT, MEMGALLERY, Verdict
from benchmarks.judge.score import (
    JudgedRow,
    _formula_kappa,
    agreement,
    cohen_kappa,
    judge_items,
    judged_rows,
    length_stats,
    length_warnings,
    mean_scores,
    summarize,
    verdict_scores,
)
from benchmarks.metrics.locomo import score_locomo
from harness.errors import InputError


def verdicts_for(item_id: str, *scores: float) -> list[Verdict]:
    return [Verdict(item_id, run, s, "{}", False, f"{item_id}:{run}") for run, s in enumerate(scores)]


def q(qid: str, category: str, answer: str = "7 May 2023") -> Question:
    return Question(id=qid, conversation_id="c", question=f"question {qid}?", answer=answer, category=category)


def test_a_questions_j_is_the_mean_of_its_runs():
    verdicts = verdicts_for("a", 1, 0, 1) + verdicts_for("b", 0, 0, 0)
    assert verdict_scores(reversed(verdicts)) == {"a": (1, 0, 1), "b": (0, 0, 0)}  # back in run order
    assert mean_scores(verdicts) == {"a": pytest.approx(2 / 3), "b": 0.0}


def test_j_over_categories_1_to_4_with_category_5_by_its_refusal_rule():
    questions = [q("a", "1"), q("b", "2"), q("c", "4"), q("d", "5", ""), q("e", "5", "")]
    answers = {"a": "7 May 2023", "b": "May", "c": "no idea", "d": "No information available.", "e": "In Paris."}
    assert [i.id for i in judge_items(questions, answers, LENIENT)] == ["a", "b", "c"]
    verdicts = verdicts_for("a", 1, 1, 1) + verdicts_for("b", 1, 0, 0) + verdicts_for("c", 0, 0, 0)
    rows = judged_rows(questions, answers, verdicts, LENIENT)
    summary = summarize(rows, LENIENT.name)
    assert summary.n == 3 and summary.j == pytest.approx((1 + 1 / 3 + 0) / 3)
    assert summary.j_by_category == {"1": 1.0, "2": pytest.approx(1 / 3), "4": 0.0}
    assert summary.n_by_category == {"1": 1, "2": 1, "4": 1}
    assert summary.unjudged == {"5": 0.5} and summary.n_unjudged == {"5": 2}  # one refusal of two
    metrics = summary.metrics()
    assert metrics["judge_j"] == summary.j and metrics["judge_rule_cat5"] == 0.5 and "judge_j_cat5" not in metrics
    assert not any(isinstance(v, float) and math.isnan(v) for v in metrics.values())


def test_memgallery_half_marks_and_every_category_judged():
    questions = [q("a", "AR", "Not mentioned."), q("b", "VS", "D1:IMG_001")]
    answers = {"a": "Not mentioned.", "b": "D1:IMG_002"}
    rows = judged_rows(questions, answers, verdicts_for("a", 1, 1, 0.5) + verdicts_for("b", 0.5, 0, 0), MEMGALLERY)
    summary = summarize(rows, MEMGALLERY.name)
    assert summary.j_by_category == {"AR": pytest.approx(5 / 6), "VS": pytest.approx(1 / 6)}
    assert summary.j == pytest.approx(0.5) and summary.unjudged == {}


def test_a_judged_question_without_a_verdict_is_an_error():
    with pytest.raises(InputError, match="b .*no judge verdict"):
        judged_rows([q("a", "1"), q("b", "2")], {"a": "x", "b": "y"}, verdicts_for("a", 1), LENIENT)
    with pytest.raises(InputError, match="no answer for question b"):
        judge_items([q("a", "1"), q("b", "2")], {"a": "x"}, LENIENT)


def row(answer: str, gold: str, scores: tuple[float, ...], f1: float | None = None, judged: bool = True) -> JudgedRow:
    return JudgedRow("x", "1", gold, answer, scores, f1, judged)


def test_length_in_words_against_the_gold():
    rows = [row("one two three four", "one two", (1,)), row("a b", "a", (1,)), row("ignored " * 9, "", (1,)),
            row("not judged at all here", "g", (1,), judged=False)]
    stats = length_stats(rows)
    assert (stats.n, stats.answer_words, stats.gold_words) == (2, 3.0, 1.5)
    assert stats.ratio == 2.0 and stats.mean_ratio == 2.0
    assert length_stats([row("a", "", (1,))]) is None


def test_length_warning_above_the_configured_ratio():
    rows = [row("w " * 10, "gold answer", (1,))]
    summary = summarize(rows, "lenient")
    (line,) = length_warnings(summary, max_length_ratio=3.0)
    assert line.startswith("WARNING: answers average 10.0 words, 5.0x the gold answers' 2.0")
    assert length_warnings(summary, max_length_ratio=5.0) == []


def test_agreement_with_f1_and_kappa():
    rows = [row("a", "a", (1, 1, 1), 1.0), row("b", "b", (1, 1, 0), 0.2), row("c", "c", (0, 0, 0), 0.0),
            row("d", "d", (0, 0, 1), 0.8), row("e", "e", (1,), None)]
    result = agreement(rows, pass_score=0.5, f1_pass=0.5)
    judge, by_f1 = [True, True, False, False], [True, False, False, True]
    assert result.n == 4 and result.agreement == 0.5
    assert result.kappa == pytest.approx(cohen_kappa_score(judge, by_f1))
    assert _formula_kappa(judge, by_f1) == pytest.approx(cohen_kappa_score(judge, by_f1))
    assert cohen_kappa([True, True], [True, True]) is None  # undefined, not NaN
    assert cohen_kappa([True, True], [False, False]) == 0.0
    assert agreement([row("a", "a", (1,))]) is None


def test_on_real_locomo_gold_answers_a_perfect_judge_agrees_with_f1(locomo_path):
    questions = load_locomo(locomo_path).conversation("conv-30").questions
    answers = {x.id: x.answer if x.category != "5" else "No information available." for x in questions}
    f1 = {x.id: score_locomo(answers[x.id], x) for x in questions}
    items = judge_items(questions, answers, LENIENT)
    verdicts = [v for i in items for v in verdicts_for(i.id, 1, 1, 1)]
    summary = summarize(judged_rows(questions, answers, verdicts, LENIENT, f1), LENIENT.name, JudgeConfig())
    assert summary.j == 1.0 and summary.n == len(items)
    assert summary.length.ratio == 1.0 and summary.agreement.agreement == 1.0 and summary.agreement.kappa is None
    assert summary.unjudged == ({"5": 1.0} if any(x.category == "5" for x in questions) else {})
