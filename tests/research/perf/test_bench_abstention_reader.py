"""Abstention (retrieval margin, reader confidence) composed onto a measured reader run, scored by the
real LoCoMo scorer."""

from __future__ import annotations

import pytest

from benchmarks.datasets.schema import Question
from benchmarks.scoring import score_question
from research.perf.bench_abstention_reader import ABSTAIN_TEXT, by_margin, compose, sweep, sweep_both

QUESTIONS = {
    "c:q1": Question("c:q1", "c", "When did Mel paint the lake?", "7 May 2023", "2", ("D1:1",)),
    "c:q2": Question("c:q2", "c", "What did Caroline adopt?", "a dog", "4", ("D2:3",)),
    "c:q3": Question("c:q3", "c", "What is Mel's sister's job?", "", "5", ("D3:1",), adversarial_answer="nurse"),
    "c:q4": Question("c:q4", "c", "Where did Caroline's brother move?", "", "5", ("D4:2",), adversarial_answer="Ohio"),
}


def _row(qid: str, prediction: str) -> dict:
    q = QUESTIONS[qid]
    return {"question_id": qid, "category": q.category, "prediction": prediction, "context_ids": ["D1:1"],
            "context_tokens": 50, "scores": score_question("locomo", prediction, q)}


def _score_abstain(qid: str) -> dict:
    return score_question("locomo", ABSTAIN_TEXT, QUESTIONS[qid])


ROWS = [_row("c:q1", "7 May 2023"), _row("c:q2", "a small dog"), _row("c:q3", "a nurse"), _row("c:q4", "Ohio")]
# speaker margins: q2 and q3 trail another speaker's turn by 0.1, q4 by 0.03; q1 names no single speaker
MARGINS = {"c:q1": None, "c:q2": -0.1, "c:q3": -0.1, "c:q4": -0.03}


def test_a_question_below_the_margin_gets_the_abstention_text_as_the_scorer_scores_it():
    c = compose(ROWS, by_margin(MARGINS, 0.05), 0.05, _score_abstain)
    by_id = {r["question_id"]: r for r in c.rows}
    assert c.abstained == {"cat5": 1, "cat1_4": 1} and c.ids == ["c:q2", "c:q3"]
    assert by_id["c:q3"]["prediction"] == ABSTAIN_TEXT and by_id["c:q3"]["scores"]["f1"] == 1.0
    assert by_id["c:q3"]["context_ids"] == [] and by_id["c:q3"]["context_tokens"] == 0
    assert by_id["c:q2"]["prediction"] == ABSTAIN_TEXT and by_id["c:q2"]["scores"]["f1"] == 0.0
    assert by_id["c:q1"] == ROWS[0] and by_id["c:q4"] == ROWS[3]  # no single speaker / above the margin: kept
    assert ROWS[1]["prediction"] == "a small dog"  # the run's rows are not changed in place


def test_the_sweep_reports_each_margin_against_the_run_on_the_same_questions():
    before = [r["scores"]["f1"] for r in ROWS]
    assert before[0] == 1.0 and 0 < before[1] < 1 and before[2] == before[3] == 0.0  # both traps taken
    tight, loose, none = sweep(ROWS, MARGINS, [0.0, 0.05, 0.5], _score_abstain)
    assert tight["abstained"] == {"cat5": 2, "cat1_4": 1} and tight["f1_cat5"] == 1.0
    assert tight["all_honest"] == pytest.approx((1.0 + 0.0 + 1.0 + 1.0) / 4, abs=1e-4)
    assert tight["all_honest_vs_base"]["delta"] == pytest.approx(tight["all_honest"] - sum(before) / 4, abs=1e-4)
    assert tight["all_honest_vs_base"]["n"] == 4 and tight["f1_cat1_4_vs_base"]["n"] == 2
    assert loose["abstained"] == {"cat5": 1, "cat1_4": 1} and loose["f1_cat5"] == 0.5
    assert none["abstained"] == {"cat5": 0, "cat1_4": 0} and none["all_honest_vs_base"]["delta"] == 0.0
    # q2's own measured F1 is what abstaining on it loses, not a mean charged to every abstention
    assert tight["f1_cat1_4_vs_base"]["delta"] == pytest.approx(-before[1] / 2, abs=1e-4)


def test_confidence_abstains_on_the_answers_below_the_threshold_as_the_reader_would():
    """Rows carry the answer tokens' log-probabilities (answer.record_logprobs); the mean decides."""
    logprobs = {"c:q1": [-0.1, -0.2], "c:q2": [-1.5, -0.5], "c:q3": [-2.0], "c:q4": None}
    rows = [{**r, "answer_logprobs": logprobs[r["question_id"]]} for r in ROWS]
    strict, lax = sweep(rows, None, [-0.5, -1.5], _score_abstain)
    assert strict["abstained_ids"] == ["c:q2", "c:q3"] and strict["threshold"] == -0.5  # means -1.0 and -2.0
    assert lax["abstained_ids"] == ["c:q3"]  # -1.0 is not below -1.5; q4 has no signal and keeps its answer
    assert lax["f1_cat5"] == 0.5 and lax["all_honest_vs_base"]["delta"] == pytest.approx(0.25, abs=1e-4)


def test_both_signals_abstain_on_either_or_only_on_both():
    """q2 and q3 trail by 0.1 (q4 by 0.03); q3 and q4 have low confidence. At margin 0.05 and
    logprob -1.5: either doubts on q2, q3, q4; both doubt only on q3."""
    logprobs = {"c:q1": [-0.1], "c:q2": [-0.2], "c:q3": [-2.0], "c:q4": [-3.0]}
    rows = [{**r, "answer_logprobs": logprobs[r["question_id"]]} for r in ROWS]
    grid = sweep_both(rows, MARGINS, [0.05], [-1.5], _score_abstain)
    by_rule = {g["threshold"]: g["abstained_ids"] for g in grid}
    assert by_rule == {"0.05 / -1.50 / or": ["c:q2", "c:q3", "c:q4"], "0.05 / -1.50 / and": ["c:q3"]}
