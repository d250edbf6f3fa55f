"""Hand-made trajectory rows for tests that read journals (taxonomy, frames, report)."""

from __future__ import annotations

from research.journal.trajectory import ExperimentRecord


def make_record(index: int, decision: str, value: float | None, dtype: str | None = None,
                best_before: float | None = None, *, run_id: str, proposer: str, objective: str,
                **kw) -> ExperimentRecord:
    """One experiment row; ``delta`` follows from value and best_before unless given."""
    delta = None if value is None or best_before is None else value - best_before
    return ExperimentRecord(run_id=run_id, index=index, experiment_id=f"exp-{index:03d}", proposer=proposer,
                            parent_commit="c0", decision=decision, discovery_type=dtype, objective=objective,
                            objective_value=value, best_before=best_before, delta=kw.pop("delta", delta), **kw)
