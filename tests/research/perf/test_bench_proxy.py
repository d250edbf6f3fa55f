"""bench_proxy's rank agreement, on rows scored by the real LoCoMo scorer."""

from __future__ import annotations

import numpy as np

from benchmarks.datasets.schema import Question
from benchmarks.scoring import score_question
from research.perf.bench_proxy import rank_agreement, render, score_matrix, shared_questions

QUESTIONS = [
    Question(f"l:{i}", "l", f"What did Mel paint on day {i}?", f"a sunset {i}", "4", (f"D1:{i}",)) for i in range(1, 9)
] + [Question("l:9", "l", "What did Mel's brother paint?", "", "5", ("D1:9",), adversarial_answer="a lake")]


def rows(found: int, right: int) -> list[dict]:
    """A config that has the evidence of the first ``found`` questions in its context and answers the first
    ``right`` correctly."""
    out = []
    for i, q in enumerate(QUESTIONS):
        ctx = list(q.evidence) if i < found else ["D9:99"]
        pred = q.answer if i < right else "no idea"
        out.append({"question_id": q.id, "category": q.category, "evidence": list(q.evidence), "retrieved_ids": ctx,
                    "context_ids": ctx, "context_tokens": 100, "prediction": pred,
                    "scores": score_question("locomo", pred, q), "context_budget_tokens": 1000})
    return out


def test_a_proxy_that_orders_configs_as_the_reader_does_reaches_rho_one_and_the_category_5_question_is_left_out():
    runs = {f"c{k}": rows(found=k, right=max(k - 1, 0)) for k in range(1, 9)}
    questions = shared_questions(runs)
    assert questions == sorted(q.id for q in QUESTIONS[:8])  # category 5 does not count towards F1 1-4
    proxy, target = score_matrix(runs, "context_recall", questions), score_matrix(runs, "f1_cat1_4", questions)
    assert proxy.shape == target.shape == (8, 8)
    got = rank_agreement(proxy, target, n_resamples=300)
    assert got["spearman"] == 1.0 and got["kendall"] == 1.0 and got["meets_bar"]
    assert 0.5 < got["spearman_ci"][0] <= got["spearman_ci"][1] <= 1.0


def test_a_proxy_that_reverses_the_reader_fails_the_bar_with_a_ci_that_says_so():
    runs = {f"c{k}": rows(found=k, right=8 - k) for k in range(1, 8)}
    questions = shared_questions(runs)
    proxy, target = score_matrix(runs, "context_recall", questions), score_matrix(runs, "f1_cat1_4", questions)
    got = rank_agreement(proxy, target, n_resamples=300)
    assert got["spearman"] == -1.0 and not got["meets_bar"] and got["spearman_ci"][1] < 0.8
    text = render({"budget": 1000, "questions": len(questions), "sample": "tiny", "agreement": got,
                   "configs": {n: {"proxy": 0.5, "f1": 0.5, "context_tokens": 100, "prompt_tokens": 300} for n in runs}})
    assert "does NOT meet the bar rho >= 0.8" in text and len(text.splitlines()) == 2 + len(runs) + 1


def test_resamples_without_spread_are_counted_not_hidden():
    proxy = np.array([[1.0, 0.0], [1.0, 0.5], [1.0, 1.0]])  # question 1 alone: every config 1.0
    target = np.array([[1.0, 0.0], [1.0, 0.5], [1.0, 1.0]])
    got = rank_agreement(proxy, target, n_resamples=200)
    assert got["undefined_resamples"] > 0  # question 1 drawn twice: no spread, no rank
