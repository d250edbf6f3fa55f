"""research.loop.decide: the proceed / iterate / pivot rule, pure functions over loop state and a paired test."""

from __future__ import annotations

import pytest

from research.config import LoopConfig
from research.evaluation.stats import PairedTest, paired_test
from research.loop.decide import (
    Decision,
    DecisionState,
    apply_decision,
    ceiling_reached,
    decide,
    failed,
    is_degradation,
    relative_delta,
)

LC = LoopConfig()  # the run's defaults: 0.5 % relative bar, alpha 0.05, pivot after 2 degradations, 3 attempts


def rule(state: DecisionState, value: float, test: PairedTest | None, **kw) -> Decision:
    args = {"min_rel_improvement": LC.min_rel_improvement, "alpha": LC.alpha,
            "max_iterations": LC.max_iterations_per_hypothesis, "degradations_to_pivot": LC.degradations_to_pivot} | kw
    return decide(state, value, test, **args)


def paired(better: int, worse: int = 0, same: int = 40, step: float = 1.0) -> PairedTest:
    """A real paired test of per-question scores: ``better`` questions gained ``step``, ``worse`` lost it."""
    parent = {f"q{i}": 0.5 for i in range(better + worse + same)}
    cand = dict(parent)
    for i in range(better):
        cand[f"q{i}"] = 0.5 + step / 2
    for i in range(better, better + worse):
        cand[f"q{i}"] = 0.5 - step / 2
    return paired_test(cand, parent)


SIGNIFICANT_GAIN = paired(better=8)  # 8 of 48 questions better, none worse: p = 1/256
ONE_LUCKY_QUESTION = paired(better=1)  # p = 0.5
SIGNIFICANT_LOSS = paired(better=0, worse=8)
ONE_UNLUCKY_QUESTION = paired(better=0, worse=1)
NO_CHANGE = paired(better=0)


def test_relative_delta_guards_zero_best() -> None:
    assert relative_delta(0.55, 0.5) == pytest.approx(0.1)
    assert relative_delta(0.1, 0.0) == pytest.approx(0.1 / 1e-9)


def test_the_helper_tests_say_what_their_names_say() -> None:
    assert SIGNIFICANT_GAIN.p_better < LC.alpha <= ONE_LUCKY_QUESTION.p_better
    assert SIGNIFICANT_LOSS.p_worse < LC.alpha <= ONE_UNLUCKY_QUESTION.p_worse
    assert NO_CHANGE.p_better == NO_CHANGE.p_worse == 1.0


def test_proceed_needs_the_bar_and_the_test() -> None:
    s = DecisionState(best_value=0.5)
    d = rule(s, 0.6, SIGNIFICANT_GAIN)
    assert (d.kind, d.value, d.supported, d.degraded) == ("proceed", 0.6, True, False)
    assert d.delta == pytest.approx(0.1) and d.delta_rel == pytest.approx(0.2)
    assert d.reason == f"proceed: +20.0% >= 0.5% and p={SIGNIFICANT_GAIN.p_better:.3g} < 0.05"


def test_a_large_gain_on_one_lucky_question_only_iterates() -> None:
    """The motivating case: +2 % relative from one flipped question of 48 is the luck of the draw."""
    d = rule(DecisionState(best_value=0.5), 0.51, ONE_LUCKY_QUESTION)
    assert (d.kind, d.supported, d.degraded) == ("iterate", False, False)
    assert d.reason == "iterate: +2.0% not supported (p=0.5 >= 0.05)"


def test_a_significant_gain_below_the_relative_bar_only_iterates() -> None:
    d = rule(DecisionState(best_value=2.0), 2.004, SIGNIFICANT_GAIN)  # +0.2 % relative
    assert d.kind == "iterate" and d.supported and d.reason.startswith("iterate: +0.2% < 0.5%")


def test_the_bar_is_relative_not_absolute() -> None:
    # +0.004 absolute is +1 % of 0.4 (proceed) but +0.2 % of 2.0 (not)
    assert rule(DecisionState(0.4), 0.404, SIGNIFICANT_GAIN).kind == "proceed"
    assert rule(DecisionState(2.0), 2.004, SIGNIFICANT_GAIN).kind == "iterate"


def test_alpha_is_the_significance_level() -> None:
    s = DecisionState(best_value=0.5)
    assert rule(s, 0.51, ONE_LUCKY_QUESTION, alpha=0.6).kind == "proceed"
    assert rule(s, 0.6, SIGNIFICANT_GAIN, alpha=SIGNIFICANT_GAIN.p_better).kind == "iterate"  # p < alpha, strictly


def test_without_a_test_the_relative_bar_decides_and_says_so() -> None:
    s = DecisionState(best_value=0.5)
    d = rule(s, 0.5 * 1.006, None)
    assert (d.kind, d.supported) == ("proceed", False)
    assert d.reason == "proceed: +0.6% >= 0.5% (relative bar only: the objective has no per-question form)"
    d = rule(s, 0.5 * 1.004, None)
    assert (d.kind, d.degraded, d.reason) == ("iterate", False, "iterate: +0.4% < 0.5%")
    d = rule(s, 0.49, None)
    assert (d.kind, d.degraded, d.reason) == ("iterate", True, "iterate: degraded -2.0% (no per-question test)")


def test_degradation_is_one_definition() -> None:
    assert is_degradation(-0.01, SIGNIFICANT_LOSS, 0.05)
    assert not is_degradation(-0.01, ONE_UNLUCKY_QUESTION, 0.05)  # a fall within the luck of the draw
    assert is_degradation(-0.01, None, 0.05)  # nothing to judge it by: every fall counts
    assert not is_degradation(0.0, None, 0.05) and not is_degradation(0.01, SIGNIFICANT_LOSS, 0.05)
    for value, test in ((0.4, SIGNIFICANT_LOSS), (0.49, ONE_UNLUCKY_QUESTION), (0.4, None), (0.5, NO_CHANGE)):
        d = rule(DecisionState(0.5), value, test)
        assert d.degraded == is_degradation(value - 0.5, test, LC.alpha)
        after = apply_decision(DecisionState(0.5), d)
        assert after.consecutive_degradations == (1 if d.degraded else 0)


def test_an_insignificant_fall_neither_counts_nor_pivots() -> None:
    s = DecisionState(0.5, consecutive_degradations=1)
    d = rule(s, 0.49, ONE_UNLUCKY_QUESTION)
    assert (d.kind, d.degraded) == ("iterate", False)
    assert d.reason == f"iterate: -2.0% not a significant degradation (p_worse={ONE_UNLUCKY_QUESTION.p_worse:.3g} >= 0.05)"
    assert apply_decision(s, d).consecutive_degradations == 0
    assert rule(s, 0.4, SIGNIFICANT_LOSS).kind == "pivot"


def test_iterate_then_pivot_after_two_significant_degradations() -> None:
    s = DecisionState(best_value=0.6)
    d1 = rule(s, 0.5, SIGNIFICANT_LOSS)
    assert d1.kind == "iterate" and d1.degraded and d1.reason.startswith("iterate: degraded -16.7% (p_worse=")
    s = apply_decision(s, d1)
    assert (s.best_value, s.consecutive_degradations, s.iterations_on_hypothesis, s.pivots) == (0.6, 1, 1, 0)
    d2 = rule(s, 0.55, SIGNIFICANT_LOSS)
    assert d2.kind == "pivot" and d2.reason == "pivot: 2 consecutive significant degradations"
    s = apply_decision(s, d2)
    assert (s.best_value, s.consecutive_degradations, s.iterations_on_hypothesis, s.pivots) == (0.6, 0, 0, 1)
    untested = rule(DecisionState(0.6, consecutive_degradations=1), 0.5, None)
    assert untested.reason == "pivot: 2 consecutive degradations (no per-question test)"


def test_a_non_degrading_result_resets_the_streak() -> None:
    s = DecisionState(best_value=0.6, consecutive_degradations=1, iterations_on_hypothesis=1)
    d = rule(s, 0.6, NO_CHANGE, max_iterations=5)
    assert d.kind == "iterate" and d.reason == "iterate: +0.0% < 0.5% (p=1)"
    s = apply_decision(s, d)
    assert s.consecutive_degradations == 0 and s.iterations_on_hypothesis == 2
    assert rule(s, 0.5, SIGNIFICANT_LOSS, max_iterations=5).kind == "iterate"  # the first degradation again


def test_degradations_to_pivot_is_configurable() -> None:
    s = DecisionState(best_value=0.6, consecutive_degradations=1)
    assert rule(s, 0.5, SIGNIFICANT_LOSS, degradations_to_pivot=3).kind == "iterate"
    s = DecisionState(best_value=0.6, consecutive_degradations=2, iterations_on_hypothesis=2)
    assert rule(s, 0.5, SIGNIFICANT_LOSS, degradations_to_pivot=3, max_iterations=10).kind == "pivot"


def test_iteration_cap_pivots_without_progress() -> None:
    s = DecisionState(best_value=0.6)
    kinds = []
    for _ in range(3):
        d = rule(s, 0.61, ONE_LUCKY_QUESTION, max_iterations=3)  # unsupported every time
        kinds.append(d.kind)
        s = apply_decision(s, d)
    assert kinds == ["iterate", "iterate", "pivot"]
    assert s.pivots == 1 and s.iterations_on_hypothesis == 0
    d = rule(DecisionState(0.6, iterations_on_hypothesis=2), 0.6, NO_CHANGE, max_iterations=3)
    assert d.reason == "pivot: 3 attempts on this hypothesis without progress (+0.0%)"


def test_proceed_beats_the_iteration_cap_and_resets_counters() -> None:
    s = DecisionState(best_value=0.6, consecutive_degradations=1, iterations_on_hypothesis=2, pivots=3)
    d = rule(s, 0.7, SIGNIFICANT_GAIN, max_iterations=3)
    assert d.kind == "proceed"
    assert apply_decision(s, d) == DecisionState(0.7, 0, 0, 3)


def test_failed_experiment_counts_as_degradation() -> None:
    s = failed(DecisionState(0.5, consecutive_degradations=0, iterations_on_hypothesis=1, pivots=2))
    assert s == DecisionState(0.5, 1, 2, 2)
    assert rule(s, 0.4, SIGNIFICANT_LOSS).kind == "pivot"  # after a failure, one real degradation pivots
    assert rule(s, 0.49, ONE_UNLUCKY_QUESTION, max_iterations=10).kind == "iterate"  # an insignificant fall does not


def test_decision_is_immutable() -> None:
    d = rule(DecisionState(0.5), 0.5, NO_CHANGE)
    with pytest.raises(AttributeError):
        d.kind = "proceed"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("values", "window", "band", "expected"),
    [
        ([0.5, 0.5, 0.5, 0.5], 4, 0.002, True),
        ([0.5, 0.5005, 0.5, 0.5009], 4, 0.002, True),  # spread 0.0009 <= 0.2 % of 0.5009
        ([0.5, 0.5, 0.5, 0.502], 4, 0.002, False),  # spread 0.002 > 0.2 % of 0.502
        ([0.5, 0.5, 0.5], 4, 0.002, False),  # not enough evaluations yet
        ([0.1, 0.9, 0.5, 0.5, 0.5, 0.5], 4, 0.002, True),  # only the last window counts
        ([0.5, 0.5], 1, 0.002, False),  # a window of one never triggers
        ([0.0, 0.0, 0.0], 3, 0.002, True),
    ],
)
def test_ceiling(values: list[float], window: int, band: float, expected: bool) -> None:
    assert ceiling_reached(values, window, band) is expected
