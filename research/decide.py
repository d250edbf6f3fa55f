"""The decision rule (DESIGN.md section 4). Pure functions over loop state.

proceed: the objective improved by >= min_rel_improvement (relative) AND by more
than the measured noise floor -> the best ref moves.
iterate: anything else that is not a second consecutive degradation (refine the
same hypothesis from the best commit), until the per-hypothesis cap.
pivot: two consecutive degradations (or the iteration cap) -> back to the best
commit and a new direction.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DecisionState:
    best_value: float
    consecutive_degradations: int = 0
    iterations_on_hypothesis: int = 0
    pivots: int = 0


@dataclass(frozen=True)
class Decision:
    kind: str  # proceed | iterate | pivot
    delta: float
    delta_rel: float
    reason: str


def relative_delta(new: float, best: float) -> float:
    return (new - best) / max(abs(best), 1e-9)


def decide(state: DecisionState, new_value: float, *, min_rel_improvement: float = 0.005,
           noise_floor: float = 0.0, max_iterations: int = 3, degradations_to_pivot: int = 2) -> Decision:
    delta = new_value - state.best_value
    rel = relative_delta(new_value, state.best_value)
    if rel >= min_rel_improvement and delta > noise_floor:
        return Decision("proceed", delta, rel, f"+{rel:.1%} >= {min_rel_improvement:.1%} and > noise {noise_floor:.4f}")
    degraded = delta < -noise_floor and rel < 0
    degs = state.consecutive_degradations + (1 if degraded else 0)
    if degraded and degs >= degradations_to_pivot:
        return Decision("pivot", delta, rel, f"{degs} consecutive degradations")
    if state.iterations_on_hypothesis + 1 >= max_iterations:
        return Decision("pivot", delta, rel, f"{max_iterations} attempts on this hypothesis without progress")
    why = "degraded" if degraded else "ambiguous (within threshold/noise)"
    return Decision("iterate", delta, rel, f"{why}: {rel:+.1%}")


def apply_decision(state: DecisionState, d: Decision, new_value: float) -> DecisionState:
    if d.kind == "proceed":
        return DecisionState(new_value, 0, 0, state.pivots)
    if d.kind == "pivot":
        return DecisionState(state.best_value, 0, 0, state.pivots + 1)
    degraded = d.delta < 0
    return DecisionState(state.best_value, state.consecutive_degradations + 1 if degraded else 0,
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
