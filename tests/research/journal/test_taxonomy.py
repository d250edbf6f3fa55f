"""research.journal.taxonomy: the tables behind the report, hand-computed on a small trajectory."""

from __future__ import annotations

import math

import pytest

from research.failures import POLICIES, PRE_EVALUATION_REJECTIONS, Failure, FailureClass, _failure
from research.journal.frames import taxonomy_table
from research.journal.taxonomy import (
    REJECTION_LABELS,
    UNCLASSIFIED,
    UNTAGGED,
    best_so_far,
    category_keys,
    cost_time_row,
    delta_of,
    failure_table,
    is_healed,
    number,
    paired_test_text,
    rejection_kind,
    rejection_table,
    run_summary,
    start_value,
)
from research.journal.trajectory import DISCOVERY_TYPES, ExperimentRecord
from tests.support.records import make_record


def rec(index: int, decision: str, value: float | None, dtype: str | None = None, best_before: float | None = None,
        **kw) -> ExperimentRecord:
    return make_record(index, decision, value, dtype, best_before, run_id="run-t", proposer="llm", objective="all_honest",
                       **kw)


@pytest.fixture
def records() -> list[ExperimentRecord]:
    return [
        rec(0, "baseline", 0.40, metrics={"all_honest": 0.40, "f1_cat1": 0.3, "f1_cat10": 0.1, "f1_cat2": 0.5,
                                          "f1_cat1_4": 0.4, "n_cat1": 10}),
        rec(1, "proceed", 0.50, "bug_fix", 0.40),
        rec(2, "proceed", 0.56, "prompt_engineering", 0.50),
        rec(3, "iterate", 0.561, "prompt_engineering", 0.56),
        rec(4, "proceed", 0.60, "bug_fix", 0.56),
        rec(5, "rejected", 0.55, "architectural_change", 0.60),
        rec(6, "pivot", 0.52, "architectural_change", 0.60),
        rec(7, "failed", None, "hyperparameter_tuning", 0.60,
            failure={"class": "runtime_error", "severity": "medium", "message": "KeyError: 'x'"},
            healing=[{"action": "repair_edit", "ok": False}, {"action": "repair_edit", "ok": False}]),
        rec(8, "proceed", 0.62, "hyperparameter_tuning", 0.60,
            failure={"cls": "auth", "severity": "high", "message": "403 Forbidden: key expired"},
            healing=[{"action": "switch_backend", "ok": True}]),
        rec(9, "failed", None, "evaluation_format_alignment", 0.62),
        rec(10, "iterate", 0.615, None, 0.62),
    ]


def test_taxonomy_rows_are_hand_computed(records):
    rows = {r.discovery_type: r for r in taxonomy_table(records)}
    assert [r.discovery_type for r in taxonomy_table(records)] == [*DISCOVERY_TYPES, UNTAGGED]
    bf = rows["bug_fix"]
    assert (bf.count, bf.accepted) == (2, 2)
    assert bf.cumulative_delta == pytest.approx(0.14) and bf.mean_delta == pytest.approx(0.07)
    assert bf.cumulative_delta_rel == pytest.approx(0.35)
    pe = rows["prompt_engineering"]
    assert (pe.count, pe.accepted, pe.experiments) == (2, 1, ["exp-002", "exp-003"])
    assert pe.cumulative_delta == pytest.approx(0.06) and pe.mean_delta == pytest.approx(0.06)
    ac = rows["architectural_change"]
    assert (ac.count, ac.accepted, ac.cumulative_delta, ac.mean_delta) == (2, 0, 0.0, None)
    hp = rows["hyperparameter_tuning"]
    assert (hp.count, hp.accepted) == (2, 1) and hp.cumulative_delta == pytest.approx(0.02)
    assert (rows["data_pipeline_repair"].count, rows["evaluation_format_alignment"].count) == (0, 1)
    assert rows[UNTAGGED].count == 1
    assert sum(r.count for r in rows.values()) == len(records) - 1  # baseline excluded


def test_taxonomy_uses_value_minus_best_before_when_delta_missing():
    r1 = rec(1, "proceed", 0.6, "bug_fix", 0.5, delta=None)
    assert r1.delta is None and delta_of(r1) == pytest.approx(0.1)
    rows = {r.discovery_type: r for r in taxonomy_table([rec(0, "baseline", 0.5), r1])}
    assert rows["bug_fix"].cumulative_delta == pytest.approx(0.1)


def test_taxonomy_of_nothing_has_six_empty_rows():
    rows = taxonomy_table([])
    assert len(rows) == 6 and all(r.count == 0 and r.cumulative_delta_rel is None for r in rows)


def test_failure_table_classes_healing_and_order(records):
    rows = failure_table(records)
    assert [r.failure_class for r in rows] == ["auth", "runtime_error", UNCLASSIFIED]
    auth, runtime, unclassified = rows
    assert (auth.count, auth.healed, auth.actions, auth.severity) == (1, 1, [("switch_backend", 1)], "high")
    assert auth.message == "403 Forbidden: key expired" and auth.experiments == ["exp-008"]
    assert (runtime.count, runtime.healed, runtime.actions) == (1, 0, [("repair_edit", 2)])
    assert (unclassified.count, unclassified.healed, unclassified.experiments) == (1, 0, ["exp-009"])


def test_healed_means_the_experiment_still_got_a_value():
    # entries as research/loop/research_loop.py writes them
    ok = rec(1, "proceed", 0.5, "bug_fix", 0.4, failure={"cls": "rate_limit"},
             healing=[{"attempt": 1, "failure": "rate_limit", "action": "fewer_workers", "result": "retrying"}])
    bad = rec(2, "failed", None, "bug_fix", 0.4, failure={"cls": "timeout"},
              healing=[{"attempt": 1, "action": "smaller_sample", "result": "retrying"},
                       {"attempt": 2, "action": "give_up", "reason": "still failing"}])
    rejected = rec(3, "rejected", 0.3, "bug_fix", 0.4, healing=[{"attempt": 1, "action": "resend_edit", "result": "ok"}])
    assert is_healed(ok) and not is_healed(bad) and not is_healed(rejected)
    assert not is_healed(rec(4, "proceed", 0.5, "bug_fix", 0.4))
    assert failure_table([bad])[0].actions == [("smaller_sample", 1), ("give_up", 1)]
    # no failure dict: the class comes from the first healing entry
    no_dict = rec(5, "iterate", 0.45, "bug_fix", 0.4,
                  healing=[{"attempt": 1, "failure": "format_mismatch", "action": "retry", "fix": "x"}])
    assert [(r.failure_class, r.healed, r.actions) for r in failure_table([no_dict])] == [("format_mismatch", 1, [("retry", 1)])]


def test_best_so_far_counts_only_accepted(records):
    assert best_so_far(records) == [0.40, 0.50, 0.56, 0.56, 0.60, 0.60, 0.60, 0.60, 0.62, 0.62, 0.62]
    assert best_so_far([rec(0, "failed", None), rec(1, "iterate", 0.9)]) == [None, None]


def test_run_summary(records):
    for r in records:
        r.durations = {"propose_s": 10.0, "eval_s": 50.0, "total_s": 70.0}
        r.tokens, r.cost_usd = 100, 0.01
    s = run_summary(records)
    assert (s.experiments, s.start, s.best, s.best_experiment) == (11, 0.40, 0.62, "exp-008")
    assert s.decisions == {"baseline": 1, "proceed": 4, "iterate": 2, "rejected": 1, "pivot": 1, "failed": 2}
    assert s.improvement == pytest.approx(0.22) and s.improvement_rel == pytest.approx(0.55)
    assert (s.total_s, s.tokens) == (770.0, 1100) and s.cost_usd == pytest.approx(0.11)
    empty = run_summary([])
    assert (empty.experiments, empty.start, empty.best, empty.improvement) == (0, None, None, None)


def test_cost_time_row_overhead():
    r = rec(1, "proceed", 0.5, durations={"propose_s": 5.0, "eval_s": 20.0, "total_s": 30.0})
    assert cost_time_row(r).overhead_s == pytest.approx(5.0)
    r = rec(1, "proceed", 0.5, durations={"propose_s": 5.0, "eval_s": 20.0, "apply_s": 1.0, "overhead_s": 2.0})
    row = cost_time_row(r)
    assert (row.overhead_s, row.total_s) == (3.0, 28.0)
    r = rec(1, "failed", None, durations={"eval_s": None}, cost_usd=None)  # missing / null fields
    assert (cost_time_row(r).total_s, cost_time_row(r).cost_usd) == (0.0, 0.0)


def test_category_keys_locomo_memgallery_retrieval(records):
    assert category_keys(records) == ["f1_cat1", "f1_cat2", "f1_cat10"]
    mg = [rec(0, "baseline", 0.3, metrics={"f1": 0.3, "f1_VS": 0.2, "f1_FR": 0.4, "em_FR": 0.1, "n_FR": 3})]
    assert category_keys(mg) == ["f1_FR", "f1_VS"]
    rt = [rec(0, "baseline", 0.5, metrics={"recall_at_10": 0.5, "recall_at_10/2": 0.6, "recall_at_10/1": 0.4,
                                           "recall_at_5/1": 0.3})]
    for r in rt:
        r.objective = "recall_at_10"
    assert category_keys(rt) == ["recall_at_10/1", "recall_at_10/2"]


def test_number_and_start_value():
    assert number(True) is None and number("1") is None and number(math.nan) is None and number(2) == 2.0
    assert start_value([rec(0, "failed", None), rec(1, "iterate", 0.3)]) == 0.3
    assert start_value([rec(0, "iterate", 0.3), rec(1, "baseline", 0.2)]) == 0.2


# --- rejections before evaluation ----------------------------------------------------------------
def failure(cls: FailureClass, message: str, stage: str) -> dict:
    """A failure dict as research/loop/research_loop.py writes it (Failure.to_dict() plus the stage)."""
    p = POLICIES[cls]
    return Failure(cls, p.severity, p.is_infrastructure, message, suggested_fix=p.suggested_fix).to_dict() | {"stage": stage}


@pytest.fixture
def screened() -> list[ExperimentRecord]:
    return [
        rec(0, "baseline", 0.40),
        rec(1, "rejected", None, "hyperparameter_tuning",
            failure=failure(FailureClass.IDENTICAL_CONDITIONS, "proposal repeats exp-000; skipped without evaluating", "propose"),
            healing=[{"attempt": 1, "action": "resend_edit", "result": "repeats exp-000"}]),
        rec(2, "rejected", None, "prompt_engineering",
            failure=failure(FailureClass.NO_EFFECT, "no effect: the reader's input is identical", "screen")),
        rec(3, "rejected", None, "bug_fix",
            failure=failure(FailureClass.IDENTICAL_CONDITIONS, "the edits leave the best commit unchanged", "apply")),
        rec(4, "rejected", None, "bug_fix",
            failure=failure(FailureClass.FORBIDDEN_EDIT, "edit touches read-only paths: benchmarks/scoring.py", "commit")),
        rec(5, "failed", None, "bug_fix", failure=failure(FailureClass.RUNTIME_ERROR, "KeyError: 'x'", "evaluate")),
    ]


def test_rejections_are_named_and_kept_out_of_the_failure_table(screened):
    assert [rejection_kind(r) for r in screened] == [None, "repeat", "no effect (screened)", "repeat", None, None]
    classes = [r.failure_class for r in failure_table(screened)]
    assert classes == ["forbidden_edit", "runtime_error"]  # a forbidden edit is refused, but it is a failure
    assert UNCLASSIFIED not in classes and "identical_conditions" not in classes and "no_effect" not in classes
    repeat, no_effect = rejection_table(screened)
    assert (repeat.kind, repeat.failure_class, repeat.count, repeat.experiments) == (
        "repeat", "identical_conditions", 2, ["exp-001", "exp-003"])
    assert repeat.message == "proposal repeats exp-000; skipped without evaluating"
    assert (no_effect.kind, no_effect.failure_class, no_effect.count) == ("no effect (screened)", "no_effect", 1)
    assert run_summary(screened).rejections == {"repeat": 2, "no effect (screened)": 1}
    assert rejection_table(screened[:1]) == [] and run_summary(screened[:1]).rejections == {}
    # still experiments of their discovery type (what the researcher tried), never accepted
    rows = {r.discovery_type: r for r in taxonomy_table(screened)}
    assert (rows["bug_fix"].count, rows["bug_fix"].accepted) == (3, 0)


def test_rejection_labels_cover_the_pre_evaluation_classes():
    assert set(REJECTION_LABELS) == {c.value for c in PRE_EVALUATION_REJECTIONS}


def test_no_effect_is_a_low_agent_side_class_even_without_code_changes():
    policy = POLICIES[FailureClass.NO_EFFECT]
    assert (policy.severity, policy.is_infrastructure) == ("low", False)
    # a config-only proposal changes no code: it was never run, so it says nothing about the base code
    f = _failure(FailureClass.NO_EFFECT, "no effect: the reader's input is identical", code_changed=False)
    assert (f.severity, f.is_infrastructure) == ("low", False)
    assert _failure(FailureClass.RUNTIME_ERROR, "boom", code_changed=False).is_infrastructure  # unchanged rule


def test_paired_test_text():
    test = {"n": 152, "mean_delta": 0.031, "ci_low": 0.012, "ci_high": 0.049, "p_better": 0.002, "p_worse": 0.998}
    assert paired_test_text(test) == "CI [+0.0120, +0.0490]; p 0.002; n 152"
    assert paired_test_text({}) == "" and paired_test_text(None) == "" and paired_test_text({"n": 10}) == ""
    assert paired_test_text({"ci_low": -0.01, "ci_high": float("nan"), "p_better": 0.4}) == "p 0.4"
