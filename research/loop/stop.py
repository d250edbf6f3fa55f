"""When a research run stops, and how many candidates its next round may hold.

Pure functions of the folded state, the journal and the run's settings: a resumed run folds the same
journal and so stops at the same point, and each rule can be tested without a repo or a sandbox.
"""

from __future__ import annotations

from typing import Sequence

from research.config import ResearchConfig
from research.journal.trajectory import ExperimentRecord
from research.loop import decide as D
from research.loop.state import LoopState


def stop_reason(st: LoopState, records: Sequence[ExperimentRecord], rc: ResearchConfig) -> str | None:
    """Why the run stops now, or None to go on. Budgets first, then a refused key, then the search's own
    limits (pivots, a ceiling without recent progress)."""
    b, lc = rc.budget, rc.loop
    if st.next_index > 0 and st.best_value is None:
        return "the baseline evaluation failed; fix it before optimizing"
    if st.evaluated >= b.experiments:
        return f"experiment budget spent ({st.evaluated}/{b.experiments} evaluated)"
    if st.proposals >= lc.max_proposals_factor * b.experiments:
        return f"proposal cap reached ({st.proposals} proposals, {st.evaluated} evaluated)"
    if st.elapsed_s >= b.wall_time_s:
        return f"wall-time budget spent ({st.elapsed_s:.0f}s)"
    if st.tokens >= b.tokens:
        return f"token budget spent ({st.tokens})"
    if st.cost_usd >= b.usd:
        return f"USD budget spent ({st.cost_usd:.2f})"
    last = records[-1] if records else None
    if last is not None and (last.failure or {}).get("cls") == "auth" and last.decision == "failed":
        return (f"the endpoint refused the key ({last.failure.get('message', '')[:120]}); "
                "fix the key or allow research.loop.local_fallback")
    if st.pivots > lc.max_pivots:
        return f"pivot cap reached ({st.pivots})"
    vals = [r.objective_value for r in records
            if r.index > 0 and r.objective_value is not None and r.decision in ("proceed", "iterate", "pivot")]
    recent_proceeds = any(r.decision == "proceed" for r in records[-lc.ceiling_window:])
    if not recent_proceeds and D.ceiling_reached(vals, lc.ceiling_window, lc.ceiling_band):
        return f"ceiling: last {lc.ceiling_window} evaluations within {lc.ceiling_band:.1%}"
    return None


def round_size(st: LoopState, rc: ResearchConfig) -> int:
    """Candidates this round: research.parallel, never past the experiment budget nor the proposal cap."""
    b = rc.budget
    cap = rc.loop.max_proposals_factor * b.experiments
    return max(1, min(rc.parallel, b.experiments - st.evaluated, cap - st.proposals))
