"""When a run stops (research.stop): each rule on a state and journal built by hand, in its order."""

from __future__ import annotations

import pytest

from research.config import ResearchConfig
from research.journal.trajectory import ExperimentRecord
from research.loop.state import LoopState
from research.loop.stop import round_size, stop_reason


def _state(**kw) -> LoopState:
    st = LoopState("r", "/repo", "base", "base", best_value=0.5, next_index=1)
    for k, v in kw.items():
        setattr(st, k, v)
    return st


def _rec(i: int, value: float | None, decision: str, failure: dict | None = None) -> ExperimentRecord:
    return ExperimentRecord("r", i, f"exp-{i:03d}", "llm", "base", objective_value=value, decision=decision,
                            failure=failure)


def test_a_fresh_run_within_every_budget_goes_on() -> None:
    assert stop_reason(_state(), [_rec(0, 0.5, "baseline")], ResearchConfig()) is None


def test_a_failed_baseline_stops_before_anything_is_proposed() -> None:
    assert "baseline evaluation failed" in stop_reason(_state(best_value=None), [_rec(0, None, "failed")], ResearchConfig())


@pytest.mark.parametrize("field,value,says", [
    ("evaluated", 8, "experiment budget spent (8/8"),
    ("proposals", 24, "proposal cap reached (24 proposals"),
    ("elapsed_s", 7200.0, "wall-time budget spent (7200s)"),
    ("tokens", 2_000_000, "token budget spent"),
    ("cost_usd", 5.0, "USD budget spent (5.00)"),
    ("pivots", 6, "pivot cap reached (6)"),
])
def test_each_budget_stops_the_run_at_its_limit_and_not_before(field: str, value: float, says: str) -> None:
    rc = ResearchConfig()
    assert says in stop_reason(_state(**{field: value}), [], rc)
    below = value - 1 if isinstance(value, int) else value - 0.01
    assert stop_reason(_state(**{field: below}), [], rc) is None


def test_budgets_are_checked_before_a_refused_key() -> None:
    recs = [_rec(1, None, "failed", {"cls": "auth", "message": "403 Forbidden"})]
    assert stop_reason(_state(evaluated=8), recs, ResearchConfig()).startswith("experiment budget")
    assert "refused the key (403 Forbidden)" in stop_reason(_state(), recs, ResearchConfig())


def test_an_auth_failure_that_was_healed_does_not_stop_the_run() -> None:
    recs = [_rec(1, 0.6, "iterate", {"cls": "auth", "message": "403"})]
    assert stop_reason(_state(), recs, ResearchConfig()) is None


def test_a_ceiling_stops_only_without_a_recent_proceed() -> None:
    rc = ResearchConfig()  # window 4, band 0.2%
    flat = [_rec(0, 0.5, "baseline")] + [_rec(i, 0.6, "iterate") for i in range(1, 5)]
    assert stop_reason(_state(), flat, rc).startswith("ceiling: last 4 evaluations")
    with_proceed = flat[:-1] + [_rec(4, 0.6, "proceed")]
    assert stop_reason(_state(), with_proceed, rc) is None
    spread = flat[:-1] + [_rec(4, 0.7, "iterate")]
    assert stop_reason(_state(), spread, rc) is None


def test_failed_and_rejected_experiments_do_not_count_toward_the_ceiling() -> None:
    recs = [_rec(i, 0.6, "iterate") for i in range(1, 4)] + [_rec(4, 0.6, "rejected")]
    assert stop_reason(_state(), recs, ResearchConfig()) is None


def test_a_round_never_passes_the_experiment_budget_nor_the_proposal_cap() -> None:
    rc = ResearchConfig(parallel=4)
    assert round_size(_state(), rc) == 4
    assert round_size(_state(evaluated=6), rc) == 2
    assert round_size(_state(proposals=23), rc) == 1
    assert round_size(_state(evaluated=8), rc) == 1  # never 0: the stop rule ends the run, not an empty round
