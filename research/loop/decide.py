"""The decision rule (docs/design.md section 4). Pure functions over loop state.

A gain counts only when it is both large enough and more than the luck of which
questions were drawn (``research.evaluation.stats.paired_test`` against the best, per question):

- proceed: relative gain >= ``min_rel_improvement`` AND supported (p_better < alpha)
  -> the best ref moves. Without a per-question test (an objective that is not a mean
  over questions) the relative bar alone decides, and the reason says so.
- pivot: ``degradations_to_pivot`` consecutive degradations, or the per-hypothesis
  iteration cap -> back to the best commit and a new direction.
- iterate: anything else (refine the same hypothesis from the best commit).

A degradation (one definition, ``is_degradation``, for ``decide`` and ``apply_decision``):
the value fell AND the fall is significant (p_worse < alpha), or there is no test.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from research.evaluation.stats import PairedTest


@dataclass
class DecisionState:
    best_value: float
    consecutive_degradations: int = 0
    iterations_on_hypothesis: int = 0
    pivots: int = 0


@dataclass(frozen=True)
class Decision:
    kind: str  # proceed | iterate | pivot | not_taken
    value: float  # the candidate's objective value (the new best on proceed)
    delta: float  # value - best
    delta_rel: float
    degraded: bool  # is_degradation: counts towards a pivot
    supported: bool  # the paired test says better (p_better < alpha); False without a test
    reason: str  # names the rule that fired


def relative_delta(new: float, best: float) -> float:
    return (new - best) / max(abs(best), 1e-9)


def is_degradation(delta: float, test: PairedTest | None, alpha: float) -> bool:
    """The one definition: a fall that the paired test calls significant (any fall without a test)."""
    return delta < 0 and (test is None or test.p_worse < alpha)


def _p(p: float) -> str:
    return f"{p:.3g}"


def decide(state: DecisionState, new_value: float, test: PairedTest | None, *, min_rel_improvement: float,
           alpha: float = 0.05, max_iterations: int, degradations_to_pivot: int) -> Decision:
    delta = new_value - state.best_value
    rel = relative_delta(new_value, state.best_value)
    supported = test is not None and test.p_better < alpha
    degraded = is_degradation(delta, test, alpha)

    def decision(kind: str, reason: str) -> Decision:
        return Decision(kind, new_value, delta, rel, degraded, supported, f"{kind}: {reason}")

    big_enough = rel >= min_rel_improvement
    if big_enough and test is None:
        return decision("proceed", f"{rel:+.1%} >= {min_rel_improvement:.1%} (relative bar only: "
                                   "the objective has no per-question form)")
    if big_enough and test is not None and supported:
        return decision("proceed", f"{rel:+.1%} >= {min_rel_improvement:.1%} and p={_p(test.p_better)} < {alpha:g}")
    degradations = state.consecutive_degradations + (1 if degraded else 0)
    if degraded and degradations >= degradations_to_pivot:
        kind_of = "significant degradations" if test is not None else "degradations (no per-question test)"
        return decision("pivot", f"{degradations} consecutive {kind_of}")
    if state.iterations_on_hypothesis + 1 >= max_iterations:
        return decision("pivot", f"{max_iterations} attempts on this hypothesis without progress ({rel:+.1%})")
    if test is None:  # without a test every fall is a degradation and every gain >= the bar proceeded
        return decision("iterate", f"degraded {rel:+.1%} (no per-question test)" if degraded
                        else f"{rel:+.1%} < {min_rel_improvement:.1%}")
    if big_enough:
        return decision("iterate", f"{rel:+.1%} not supported (p={_p(test.p_better)} >= {alpha:g})")
    if degraded:
        return decision("iterate", f"degraded {rel:+.1%} (p_worse={_p(test.p_worse)} < {alpha:g})")
    if delta < 0:
        return decision("iterate", f"{rel:+.1%} not a significant degradation (p_worse={_p(test.p_worse)} >= {alpha:g})")
    return decision("iterate", f"{rel:+.1%} < {min_rel_improvement:.1%} (p={_p(test.p_better)})")


def never_shown_verdict(d: Decision, test: PairedTest | None, *, shown: int, alpha: float) -> Decision:
    """A proceed stands only when its gain is also supported on the run's questions whose gold the researcher
    was never shown (``test``: the paired test restricted to them; ``shown``: how many were left out).

    Why: the researcher's diagnosis shows gold for a few questions of the run's own sample. A candidate that
    hard-codes what it saw gains exactly there; on the questions it never saw it gains nothing, and the
    decision's own test, over the whole sample, cannot tell the two apart. Such a candidate is
    ``not_taken``: measured and spent, the best ref does not move (docs/design.md section 6)."""
    if d.kind != "proceed" or shown == 0:
        return d
    if test is None:
        return replace(d, kind="not_taken", degraded=False,
                       reason=f"not taken: the researcher was shown the gold of all {shown} questions that count toward "
                              "the objective; no never-shown question is left to support the gain")
    if test.mean_delta > 0 and test.p_better < alpha:
        return replace(d, reason=f"{d.reason}; supported on the {test.n} never-shown questions "
                                 f"({test.mean_delta:+.4f}, p={_p(test.p_better)})")
    why = (f"not taken: the gain is not supported on the {test.n} questions whose gold the researcher never saw "
           f"({test.mean_delta:+.4f}, p={_p(test.p_better)} >= {alpha:g}; {shown} shown questions left out): a gain "
           "that only shows on the questions it was shown")
    return replace(d, kind="not_taken", degraded=False, reason=why)


def apply_decision(state: DecisionState, d: Decision) -> DecisionState:
    if d.kind == "proceed":
        return DecisionState(d.value, 0, 0, state.pivots)
    if d.kind == "pivot":
        return DecisionState(state.best_value, 0, 0, state.pivots + 1)
    return DecisionState(state.best_value, state.consecutive_degradations + 1 if d.degraded else 0,
                         state.iterations_on_hypothesis + 1, state.pivots)


def failed(state: DecisionState) -> DecisionState:
    """A failed experiment (agent's code) counts as a degradation; infrastructure failures do not."""
    return DecisionState(state.best_value, state.consecutive_degradations + 1,
                         state.iterations_on_hypothesis + 1, state.pivots)


def ceiling_reached(values: list[float], window: int, band: float) -> bool:
    """The last ``window`` evaluations all within ``band`` (relative) of each other."""
    if window <= 1 or len(values) < window:
        return False
    last = values[-window:]
    hi, lo = max(last), min(last)
    return (hi - lo) <= band * max(abs(hi), 1e-9)
