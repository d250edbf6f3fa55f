"""research.evaluation.stats: per-question contributions that average to the scorer's aggregates, and the paired test."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from benchmarks.datasets import load_benchmark
from benchmarks.datasets.schema import Benchmark
from benchmarks.runner import aggregate
from benchmarks.scoring import score_answers
from benchmarks.splits import select
from harness.errors import ConfigError, InputError
from harness.paths import data_dir
from harness.views import Answer
from research.evaluation.stats import EXACT_MAX_NONZERO, PairedTest, paired_test, per_question

needs_gallery = pytest.mark.skipif(not (data_dir() / "mem-gallery").is_dir(), reason="Mem-Gallery data absent")


def _answers(bench: Benchmark) -> dict[str, Answer]:
    """Varied, deterministic answers: exact gold, refusals, partial words, noise; retrieval hits, misses, repeats."""
    out = {}
    for i, q in enumerate(bench.questions):
        conv = bench.conversation(q.conversation_id)
        turns = [t.id for s in conv.sessions for t in s.turns]
        gold = str(q.answer or "")
        answer = [gold, "Not mentioned in the conversation", " ".join(gold.split()[:2]) + " maybe", "unknown",
                  "blue, 7 May 2023"][i % 5]
        evidence = list(q.evidence)
        noise = turns[i % len(turns): i % len(turns) + 1 + i % 7]
        retrieved = [*noise[: i % 3], *evidence[: 1 + i % 2], *noise, *evidence] if i % 4 else noise
        context = [*evidence[i % 2:], *turns[::-1]][: 3 + 10 * (i % 6)]  # long contexts get cut at the budget
        out[q.id] = Answer(q.id, answer=answer, retrieved_ids=tuple(retrieved), context_ids=tuple(context),
                           latency_s=0.1)
    return out


@pytest.fixture(scope="module")
def locomo_rows(locomo_path) -> list[dict]:
    bench = select(load_benchmark("locomo"), "dev", "small")
    return score_answers(bench, _answers(bench), with_reader=True, context_budget_tokens=400)


LOCOMO_OBJECTIVES = ["all_honest", "all_honest_lenient", "all_paper_protocol", "f1_cat1_4", "f1_cat1", "f1_cat2",
                     "f1_cat3", "f1_cat4", "f1_cat5", "f1_cat5_lenient", "context_recall", "recall_at_1",
                     "recall_at_5", "recall_at_10", "recall_at_20", "hit_at_5", "precision", "mrr", "recall_at_10/2",
                     "hit_at_1/4"]


@pytest.mark.parametrize("objective", LOCOMO_OBJECTIVES)
def test_locomo_contributions_average_to_the_aggregate(locomo_rows, objective):
    metrics = aggregate("locomo", locomo_rows, with_reader=True)
    values = per_question(objective, locomo_rows)
    assert values, objective
    assert np.mean(list(values.values())) == pytest.approx(metrics[objective], abs=1e-12)


def test_the_rows_exercise_the_interesting_cases(locomo_rows):
    m = aggregate("locomo", locomo_rows, with_reader=True)
    assert 0 < m["all_honest"] < 1 and 0 < m["f1_cat5"] < 1 and m["f1_cat5_lenient"] > m["f1_cat5"]
    assert 0 < m["context_recall"] < 1 and 0 < m["recall_at_10"] < 1
    assert any(r["context_ids_claimed"] > len(r["context_ids"]) for r in locomo_rows)  # the budget cut bites
    # a question without evidence does not count towards recall; every question counts towards all_honest
    rows = [*locomo_rows, {**locomo_rows[0], "question_id": "conv-26:no-evidence", "evidence": []}]
    assert len(per_question("context_recall", rows)) == aggregate("locomo", rows, True)["n_with_evidence"] == len(locomo_rows)
    assert len(per_question("recall_at_10", rows)) == len(locomo_rows) and len(per_question("all_honest", rows)) == len(rows)
    assert len(per_question("f1_cat3", locomo_rows)) == m["n_cat3"]
    assert per_question("f1", locomo_rows) == per_question("all_honest", locomo_rows)


@needs_gallery
@pytest.mark.parametrize("objective", ["f1", "em", "bleu", "bleu1", "bleu2", "f1_VS", "em_AR", "bleu1_TTL",
                                       "context_recall", "recall_at_10", "recall_at_5/FR"])
def test_memgallery_contributions_average_to_the_aggregate(objective):
    bench = select(load_benchmark("memgallery"), "dev", "tiny")
    rows = score_answers(bench, _answers(bench), with_reader=True, context_budget_tokens=400)
    values = per_question(objective, rows)
    assert np.mean(list(values.values())) == pytest.approx(aggregate("memgallery", rows, True)[objective], abs=1e-12)


def test_retrieval_only_rows(locomo_path):
    bench = select(load_benchmark("locomo"), "dev", "tiny")
    rows = score_answers(bench, _answers(bench), with_reader=False, context_budget_tokens=400)
    m = aggregate("locomo", rows, with_reader=False)
    assert np.mean(list(per_question("context_recall", rows).values())) == pytest.approx(m["context_recall"])
    with pytest.raises(InputError, match="no reader score 'f1'"):
        per_question("all_honest", rows)


@pytest.mark.parametrize("objective", ["cost_usd", "seconds_per_question", "n_errors", "prompt_tokens", "n",
                                       "context_tokens", "recall_at_0", "f1_cat9", "f1_XX", "recall_at_10/"])
def test_objectives_without_a_per_question_form_are_config_errors(locomo_rows, objective):
    with pytest.raises(ConfigError, match="no per-question form") as info:
        per_question(objective, locomo_rows)
    assert "\n" not in str(info.value)


def test_repeated_question_ids_are_refused(locomo_rows):
    with pytest.raises(InputError, match="appears twice"):
        per_question("all_honest", [locomo_rows[0], locomo_rows[1], locomo_rows[0]])


# --- the paired test ----------------------------------------------------------------
def _pair(diffs: list[float], base: float = 0.5) -> tuple[dict[str, float], dict[str, float]]:
    parent = {f"q{i}": base for i in range(len(diffs))}
    return {q: base + d for q, d in zip(parent, diffs)}, parent


def test_identical_scores_are_not_evidence_either_way():
    cand, par = _pair([0.0] * 12)
    t = paired_test(cand, par)
    assert (t.n, t.mean_delta, t.ci_low, t.ci_high, t.p_better, t.p_worse) == (12, 0.0, 0.0, 0.0, 1.0, 1.0)


def test_one_flipped_question_is_not_significant():
    """+1 question out of 12 is +8 % relative on a 0.5 objective, and a coin flip."""
    cand, par = _pair([0.5] + [0.0] * 11)
    t = paired_test(cand, par)
    assert t.p_better == pytest.approx(0.5) and t.p_worse == pytest.approx(1.0)
    assert t.mean_delta == pytest.approx(0.5 / 12) and t.ci_low == 0.0 < t.ci_high
    assert "exact over 2^1" in t.method


def test_consistent_gains_are_significant_and_the_exact_p_is_right():
    cand, par = _pair([0.2] * 10 + [0.0] * 5)
    t = paired_test(cand, par)
    assert t.p_better == pytest.approx(1 / 2**10) and t.p_worse == pytest.approx(1.0)
    assert 0 < t.ci_low <= t.mean_delta <= t.ci_high
    worse = paired_test(par, cand)
    assert worse.p_worse == pytest.approx(1 / 2**10) and worse.ci_high < 0


def test_exact_p_values_match_scipy():
    rng = np.random.default_rng(3)
    diffs = list(np.round(rng.normal(0.05, 0.2, size=14), 3))
    cand, par = _pair(diffs)
    t = paired_test(cand, par)
    x, y = np.array([cand[q] for q in par]), np.array([par[q] for q in par])
    for alternative, ours in (("greater", t.p_better), ("less", t.p_worse)):
        ref = sps.permutation_test((x, y), lambda a, b: np.mean(a - b), permutation_type="samples",
                                   alternative=alternative, n_resamples=math.inf)
        assert ours == pytest.approx(ref.pvalue, rel=1e-9)


def test_monte_carlo_p_values_are_seeded_and_close_to_scipy():
    rng = np.random.default_rng(5)
    diffs = list(rng.normal(0.03, 0.25, size=EXACT_MAX_NONZERO + 30))
    cand, par = _pair(diffs)
    t = paired_test(cand, par, seed=1)
    assert "Monte Carlo over 10000" in t.method and t.seed == 1
    assert paired_test(cand, par, seed=1) == t
    x, y = np.array([cand[q] for q in par]), np.array([par[q] for q in par])
    ref = sps.permutation_test((x, y), lambda a, b, axis: np.mean(a - b, axis=axis),
                               permutation_type="samples", alternative="greater", n_resamples=20000, vectorized=True,
                               rng=np.random.default_rng(0))
    assert t.p_better == pytest.approx(ref.pvalue, abs=0.02)
    assert t.p_better + t.p_worse == pytest.approx(1.0, abs=0.01)  # continuous differences: no ties


def test_bootstrap_interval_matches_scipy_percentile():
    rng = np.random.default_rng(7)
    cand, par = _pair(list(rng.normal(0.05, 0.2, size=60)))
    t = paired_test(cand, par, confidence=0.9)
    d = np.array([cand[q] - par[q] for q in par])
    ref = sps.bootstrap((d,), np.mean, confidence_level=0.9, n_resamples=10000, method="percentile",
                        rng=np.random.default_rng(0)).confidence_interval
    assert t.ci_low == pytest.approx(ref.low, abs=0.01) and t.ci_high == pytest.approx(ref.high, abs=0.01)
    assert t.confidence == 0.9 and t.ci_low < d.mean() < t.ci_high


def test_only_common_questions_are_compared():
    cand = {"a": 1.0, "b": 1.0, "c": 0.0}
    par = {"b": 0.0, "c": 0.0, "d": 1.0}
    t = paired_test(cand, par)
    assert t.n == 2 and t.mean_delta == pytest.approx(0.5)
    with pytest.raises(InputError, match="no common questions") as info:
        paired_test({"a": 1.0}, {"b": 1.0})
    assert isinstance(info.value, ValueError)  # callers may catch it as either


def test_to_dict_round_trips():
    t = paired_test(*_pair([0.1, -0.2, 0.3, 0.0]))
    assert PairedTest(**t.to_dict()) == t
    assert set(t.to_dict()) == {"n", "mean_delta", "ci_low", "ci_high", "p_better", "p_worse", "confidence",
                                "method", "seed"}
