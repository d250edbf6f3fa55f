"""research.decide: the proceed / iterate / pivot rule, pure functions over loop state."""

from __future__ import annotations

import pytest

from research.decide import (
    Decision,
    DecisionState,
    apply_decision,
    ceiling_reached,
    decide,
    failed,
    relative_delta,
)


def test_relative_delta_guards_zero_best() -> None:
    assert relative_delta(0.55, 0.5) == pytest.approx(0.1)
    assert relative_delta(0.1, 0.0) == pytest.approx(0.1 / 1e-9)


def test_proceed_at_and_above_half_percent_relative() -> None:
    s = DecisionState(best_value=0.5)
    d = decide(s, 0.5 * 1.006)  # +0.6 % relative
    assert d.kind == "proceed"
    assert d.delta == pytest.approx(0.003)
    assert d.delta_rel == pytest.approx(0.006)
    # just below the threshold: not a proceed, and not a degradation either
    d = decide(s, 0.5 * 1.004)
    assert d.kind == "iterate"
    assert "ambiguous" in d.reason


def test_proceed_threshold_is_relative_not_absolute() -> None:
    # +0.004 absolute is +1 % of 0.4 (proceed) but +0.2 % of 2.0 (not)
    assert decide(DecisionState(0.4), 0.404).kind == "proceed"
    assert decide(DecisionState(2.0), 2.004).kind == "iterate"


def test_noise_floor_blocks_proceed_and_masks_small_degradations() -> None:
    s = DecisionState(best_value=0.5)
    # +2 % relative but only +0.01 absolute, inside a noise floor of 0.02
    d = decide(s, 0.51, noise_floor=0.02)
    assert d.kind == "iterate" and "ambiguous" in d.reason
    assert decide(s, 0.51, noise_floor=0.005).kind == "proceed"
    # a drop smaller than the noise is not a degradation: no pivot even with one on record
    s2 = DecisionState(0.5, consecutive_degradations=1)
    assert decide(s2, 0.49, noise_floor=0.02).kind == "iterate"
    assert decide(s2, 0.49, noise_floor=0.0).kind == "pivot"


def test_iterate_then_pivot_after_two_degradations() -> None:
    s = DecisionState(best_value=0.6)
    d1 = decide(s, 0.5)
    assert d1.kind == "iterate" and "degraded" in d1.reason
    s = apply_decision(s, d1, 0.5)
    assert (s.best_value, s.consecutive_degradations, s.iterations_on_hypothesis, s.pivots) == (0.6, 1, 1, 0)
    d2 = decide(s, 0.55)
    assert d2.kind == "pivot" and "2 consecutive degradations" in d2.reason
    s = apply_decision(s, d2, 0.55)
    assert (s.best_value, s.consecutive_degradations, s.iterations_on_hypothesis, s.pivots) == (0.6, 0, 0, 1)


def test_non_degrading_result_resets_the_degradation_streak() -> None:
    s = DecisionState(best_value=0.6, consecutive_degradations=1, iterations_on_hypothesis=1)
    d = decide(s, 0.6, max_iterations=5)  # equal: ambiguous, not degraded
    assert d.kind == "iterate"
    s = apply_decision(s, d, 0.6)
    assert s.consecutive_degradations == 0 and s.iterations_on_hypothesis == 2
    assert decide(s, 0.5, max_iterations=5).kind == "iterate"  # first degradation again


def test_degradations_to_pivot_is_configurable() -> None:
    s = DecisionState(best_value=0.6, consecutive_degradations=1)
    assert decide(s, 0.5, degradations_to_pivot=3).kind == "iterate"
    s = DecisionState(best_value=0.6, consecutive_degradations=2, iterations_on_hypothesis=2)
    assert decide(s, 0.5, degradations_to_pivot=3, max_iterations=10).kind == "pivot"


def test_iteration_cap_pivots_without_progress() -> None:
    s = DecisionState(best_value=0.6)
    kinds = []
    for _ in range(3):
        d = decide(s, 0.6, max_iterations=3)  # ambiguous every time
        kinds.append(d.kind)
        s = apply_decision(s, d, 0.6)
    assert kinds == ["iterate", "iterate", "pivot"]
    assert s.pivots == 1 and s.iterations_on_hypothesis == 0
    assert "3 attempts" in decide(DecisionState(0.6, iterations_on_hypothesis=2), 0.6, max_iterations=3).reason


def test_proceed_beats_iteration_cap_and_resets_counters() -> None:
    s = DecisionState(best_value=0.6, consecutive_degradations=1, iterations_on_hypothesis=2, pivots=3)
    d = decide(s, 0.7, max_iterations=3)
    assert d.kind == "proceed"
    ns = apply_decision(s, d, 0.7)
    assert ns == DecisionState(0.7, 0, 0, 3)


def test_failed_experiment_counts_as_degradation() -> None:
    s = failed(DecisionState(0.5, consecutive_degradations=0, iterations_on_hypothesis=1, pivots=2))
    assert s == DecisionState(0.5, 1, 2, 2)
    # after a failure, one real degradation pivots
    assert decide(s, 0.4).kind == "pivot"


def test_decision_is_immutable() -> None:
    d = Decision("iterate", 0.0, 0.0, "x")
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
