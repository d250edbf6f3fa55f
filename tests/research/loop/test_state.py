"""LoopState as a fold over the journal: the loop, resume and replay rebuild the same state."""

from __future__ import annotations

from pathlib import Path

import pytest

from research.errors import RunStateError
from research.journal.trajectory import ExperimentRecord
from research.loop.state import FOLDED, LoopState


def rec(i: int, decision: str, value: float | None = None, *, commit: str | None = None, degraded: bool = False,
        failure: dict | None = None, hyp: str = "h", tokens: int = 0, healing: list | None = None) -> ExperimentRecord:
    r = ExperimentRecord("run", i, f"exp-{i:03d}", "llm" if i else "baseline", "p", commit=commit or f"c{i}",
                         hypothesis=hyp, decision=decision, objective_value=value, degraded=degraded,
                         failure=failure, tokens=tokens, healing=healing or [])
    r.eval_dir = f"evals/exp-{i:03d}" if value is not None else ""
    return r


def fold(records: list[ExperimentRecord], pivot_after: int = 2) -> LoopState:
    st = LoopState("run", "/repo", "c0", "c0")
    for r in records:
        st.apply(r, degradations_to_pivot=pivot_after, eval_dir=r.eval_dir or None)
    return st


def test_best_moves_on_baseline_and_proceed_only() -> None:
    st = fold([rec(0, "baseline", 0.2), rec(1, "iterate", 0.25), rec(2, "proceed", 0.4), rec(3, "iterate", 0.3, degraded=True)])
    assert (st.best_value, st.best_commit, st.best_eval_dir) == (0.4, "c2", "evals/exp-002")
    assert st.next_index == 4 and st.evaluated == 3 and st.proposals == 3


def test_iterate_refines_the_attempt_unless_it_was_worse() -> None:
    st = fold([rec(0, "baseline", 0.2), rec(1, "iterate", 0.21)])
    assert st.mode == "iterate" and st.start_commit == "c1" and st.start_eval_dir == "evals/exp-001"
    st = fold([rec(0, "baseline", 0.2), rec(1, "iterate", 0.1, degraded=True)])
    assert st.start_commit == "c0" and st.consecutive_degradations == 1


def test_two_degradations_or_failures_pivot_and_infrastructure_does_not_count() -> None:
    agent = {"cls": "runtime_error", "is_infrastructure": False}
    infra = {"cls": "timeout", "is_infrastructure": True}
    st = fold([rec(0, "baseline", 0.2), rec(1, "failed", failure=agent), rec(2, "failed", failure=infra)])
    assert st.consecutive_degradations == 1 and st.mode == "new"
    st = fold([rec(0, "baseline", 0.2), rec(1, "failed", failure=agent), rec(2, "rejected", failure={"cls": "no_effect"})])
    assert st.mode == "pivot" and st.pivots == 1 and "pivot" in st.last_rule
    assert st.evaluated == 0 and st.proposals == 2


def test_tokens_and_the_local_switch_come_back_from_the_journal() -> None:
    switch = [{"action": "switch_local_llm", "result": "switched reader and researcher from m to local"}]
    r1 = rec(1, "iterate", 0.2, tokens=100, healing=switch)
    r1.reader = {"billed_tokens": 50, "cost_usd": 0.01}
    st = fold([rec(0, "baseline", 0.2), r1])
    assert st.tokens == 150 and st.cost_usd == pytest.approx(0.01) and st.local_switched


def test_reset_then_refold_equals_the_live_state(tmp_path: Path) -> None:
    records = [rec(0, "baseline", 0.2), rec(1, "proceed", 0.3), rec(2, "iterate", 0.31), rec(3, "pivot", 0.1, degraded=True)]
    live = fold(records)
    live.status, live.elapsed_s = "finished", 12.0
    live.save(tmp_path)
    back = LoopState.load(tmp_path)
    back.best_value, back.pivots, back.mode = None, 9, "garbage"  # a state file out of step with the journal
    back.reset_folded()
    for r in records:
        back.apply(r, degradations_to_pivot=2, eval_dir=r.eval_dir or None)
    assert all(getattr(back, f) == getattr(live, f) for f in FOLDED)
    assert back.best_commit == live.best_commit and back.elapsed_s == 12.0  # not folded: kept from the file


def test_corrupt_or_missing_state_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RunStateError, match="no loop state"):
        LoopState.load(tmp_path)
    (tmp_path / "state.json").write_text("{not json")
    with pytest.raises(RunStateError, match="corrupt"):
        LoopState.load(tmp_path)
