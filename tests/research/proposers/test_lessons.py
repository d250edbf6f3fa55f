"""research.proposers.lessons: one deterministic line per experiment and the rolling summary, from real records."""

from __future__ import annotations

import pytest

from harness.tokens import count_tokens
from research.evaluation.stats import paired_test
from research.failures import FailureClass, _failure
from research.journal.trajectory import ExperimentRecord
from research.loop.outcomes import Screen
from research.proposers.lessons import lesson_for, significance, summarize_lessons, withheld_levers


def rec(index: int, decision: str, overrides=(), edits=(), parent: str = "c0", proposer: str = "llm",
        **kw) -> ExperimentRecord:
    return ExperimentRecord("r", index, f"exp-{index:03d}", proposer, parent, decision=decision,
                            config_overrides=list(overrides), edits=[dict(e) for e in edits],
                            objective=kw.pop("objective", "all_honest"), **kw)


def failure(cls: FailureClass, message: str, stage: str) -> dict:
    return _failure(cls, message, code_changed=True).to_dict() | {"stage": stage}


def paired(mean: float, lo: float, hi: float, p_better: float, p_worse: float, n: int = 50) -> dict:
    return {"n": n, "mean_delta": mean, "ci_low": lo, "ci_high": hi, "p_better": p_better, "p_worse": p_worse,
            "confidence": 0.95, "method": "exact", "seed": 0}


EDIT = {"path": "memsys/retrieve/merge.py", "search": "a", "replace": "b"}


def test_lines_for_every_decision() -> None:
    assert lesson_for(rec(0, "baseline", objective_value=0.3125), "all_honest") == "baseline: all_honest 0.3125"
    widened = rec(1, "proceed", ["retrieval.dense_k=20"], delta=0.081, test=paired(0.081, 0.05, 0.11, 0.001, 0.999))
    assert lesson_for(widened, "context_recall") == \
        "retrieval.dense_k=20: context_recall +0.081 [0.05, 0.11] over 50 questions, p=0.001: accepted"
    rrf = rec(2, "iterate", ["retrieval.merge=rrf"], delta=-0.012, test=paired(-0.012, -0.04, 0.01, 0.8, 0.2))
    assert lesson_for(rrf, "all_honest") == \
        "retrieval.merge=rrf: all_honest -0.012 [-0.04, 0.01] over 50 questions, not significant: not accepted, iterate"
    worse = rec(3, "pivot", ["retrieval.top_k=2"], delta=-0.1, test=paired(-0.1, -0.15, -0.05, 0.999, 0.002))
    assert lesson_for(worse, "all_honest").endswith("p=0.002: not accepted, pivot")
    untested = rec(4, "iterate", edits=[EDIT, EDIT], delta=0.0042)
    assert lesson_for(untested, "f1") == \
        "2 code edits to memsys/retrieve/merge.py: f1 +0.0042 (no paired test): not accepted, iterate"


def test_rejections_and_failures_say_why() -> None:
    screen = Screen(questions=12, changed=0, comparable=True).to_dict()
    dead = rec(1, "rejected", ["retrieval.dense_k=10"], screen=screen,
               failure=failure(FailureClass.NO_EFFECT, "no effect: identical reader inputs", "screen"))
    assert lesson_for(dead, "all_honest") == ("retrieval.dense_k=10: no effect on the reader's input "
                                              "(0 of 12 reader inputs changed, rejected before evaluation)")
    static = rec(2, "rejected", ["graph.hops=3"], failure=failure(FailureClass.NO_EFFECT, "graph is off", "propose"))
    assert lesson_for(static, "all_honest") == \
        "graph.hops=3: no effect on the reader's input (rejected before evaluation)"
    repeat = rec(3, "rejected", ["retrieval.merge=rrf"],
                 failure=failure(FailureClass.IDENTICAL_CONDITIONS, "proposal repeats exp-002", "propose"))
    assert "repeats a change already evaluated" in lesson_for(repeat, "all_honest")
    forbidden = rec(4, "rejected", edits=[{"path": "benchmarks/metrics/locomo.py", "search": "", "replace": "x"}],
                    failure=failure(FailureClass.FORBIDDEN_EDIT, "edit outside the mutable surface", "apply"))
    assert lesson_for(forbidden, "all_honest") == ("1 code edit to benchmarks/metrics/locomo.py: edits outside the "
                                                   "mutable surface (rejected: edit outside the mutable surface)")
    crashed = rec(5, "failed", edits=[EDIT], failure=failure(FailureClass.RUNTIME_ERROR, "KeyError: 'dense'\n", "evaluate"))
    assert lesson_for(crashed, "all_honest") == \
        "1 code edit to memsys/retrieve/merge.py: failed at evaluate (runtime_error: KeyError: 'dense')"


def test_significance_from_a_real_paired_test() -> None:
    parent = {f"q{i}": 0.0 for i in range(12)}
    better = paired_test({q: 1.0 for q in parent}, parent).to_dict()
    mixed = paired_test({q: float(i % 2) for i, q in enumerate(parent)}, {q: float((i + 1) % 2) for i, q in enumerate(parent)})
    assert significance(rec(1, "proceed", test=better)) == "better"
    assert significance(rec(2, "iterate", test=mixed.to_dict())) == "none"
    assert significance(rec(3, "iterate")) == ""
    assert "p=0.00024" in lesson_for(rec(1, "proceed", ["x=1"], test=better), "f1")


def history() -> list[ExperimentRecord]:
    return [
        rec(0, "baseline", objective_value=0.30),
        rec(1, "proceed", ["retrieval.dense_k=20"], delta=0.04, test=paired(0.04, 0.01, 0.07, 0.004, 0.99)),
        rec(2, "iterate", ["retrieval.merge=rrf"], delta=-0.01, test=paired(-0.01, -0.04, 0.02, 0.7, 0.3)),
        rec(3, "pivot", ["retrieval.top_k=2"], delta=-0.1, degraded=True, test=paired(-0.1, -0.15, -0.05, 0.99, 0.002)),
        rec(4, "rejected", ["retrieval.sparse_k=10"], failure=failure(FailureClass.NO_EFFECT, "same inputs", "screen")),
        rec(5, "iterate", ["retrieval.merge=rrf"], delta=0.002, lesson="rrf ties the dense order at best",
            test=paired(0.002, -0.02, 0.03, 0.4, 0.6)),
        rec(6, "proceed", ["answer.context_text=both"], delta=0.03, test=paired(0.03, 0.01, 0.05, 0.01, 0.99)),
    ]


def test_summary_sections_newest_first_deduplicated() -> None:
    text = summarize_lessons(history(), 1000)
    assert text.splitlines()[0] == "What worked:"
    worked = text.split("No effect / dead ends:")[0]
    assert worked.index("answer.context_text=both") < worked.index("retrieval.dense_k=20")  # newest first
    dead = text.split("No effect / dead ends:")[1].split("What hurt:")[0]
    assert dead.count("retrieval.merge=rrf") == 1 and "rrf ties the dense order at best" in dead  # the newer one
    assert "retrieval.sparse_k=10: no effect" in dead
    assert "What hurt:\n- retrieval.top_k=2: all_honest -0.100" in text
    assert "baseline" not in text


@pytest.mark.parametrize("limit", [0, 20, 40, 80, 120, 1000])
def test_summary_fits_its_budget_and_keeps_the_newest(limit: int) -> None:
    text = summarize_lessons(history(), limit)
    assert count_tokens(text) <= limit
    if text:  # the newest lesson is the first one to get in
        assert "answer.context_text=both" in text


def test_withheld_levers_are_those_refused_before_evaluation_from_the_same_commit() -> None:
    no_effect = failure(FailureClass.NO_EFFECT, "no effect: identical reader inputs", "screen")
    repeat = failure(FailureClass.IDENTICAL_CONDITIONS, "repeats exp-001", "propose")
    history = [
        rec(0, "baseline"),
        rec(1, "iterate", ["retrieval.top_k=9"], delta=0.0),  # evaluated: stays offered
        rec(2, "rejected", ["retrieval.sparse_k=50"], failure=no_effect),
        rec(3, "rejected", ["retrieval.dense_k=8", "retrieval.top_k=8"], failure=repeat),
        rec(4, "rejected", ["graph.hops=3"], failure=no_effect, parent="c1"),  # another start commit
        rec(5, "rejected", ["retrieval.rrf_k=30"], edits=[EDIT], failure=no_effect),  # code too
        rec(6, "failed", ["retrieval.merge=rrf"], failure=failure(FailureClass.RUNTIME_ERROR, "boom", "evaluate")),
        rec(7, "rejected", ["retrieval.sparse_k=40"], failure=no_effect),  # the newest reason wins
    ]
    assert withheld_levers(history, "c0") == {
        "retrieval.sparse_k": "refused before evaluation: retrieval.sparse_k=40, no effect, exp-007",
        "retrieval.dense_k": "refused before evaluation: retrieval.dense_k=8, retrieval.top_k=8, a repeat, exp-003",
        "retrieval.top_k": "refused before evaluation: retrieval.dense_k=8, retrieval.top_k=8, a repeat, exp-003",
        "widen_dense": "refused before evaluation: retrieval.dense_k=8, retrieval.top_k=8, a repeat, exp-003",
    }  # widen_dense: the macro writing both
    assert withheld_levers(history, "c1") == {"graph.hops": "refused before evaluation: graph.hops=3, no effect, exp-004"}
    assert withheld_levers(history, None) == {} and withheld_levers(history, "c9") == {}


def test_a_pivot_also_withholds_the_levers_the_abandoned_direction_moved() -> None:
    history = [
        rec(0, "baseline", objective_value=0.2),
        rec(1, "iterate", ["retrieval.graph_k=4"], objective_value=0.19, delta=-0.01),  # before the best moved
        rec(2, "proceed", ["retrieval.sparse_k=25"], objective_value=0.6, delta=0.4),
        rec(3, "iterate", ["retrieval.sparse_k=30"], objective_value=0.6, delta=0.003),
        rec(4, "failed", ["retrieval.merge=rrf"]),  # never measured: says nothing about the direction
        rec(5, "iterate", ["retrieval.top_k=9"], objective_value=0.59, delta=-0.01,
            proposer="optuna"),  # a sampler's draw, not the model's direction
        rec(6, "pivot", ["retrieval.sparse_k=35", "retrieval.speaker_first=true"], objective_value=0.6, delta=0.007),
        rec(7, "rejected", ["retrieval.dense_k=12"], parent="c0",
            failure=failure(FailureClass.NO_EFFECT, "no effect", "screen")),
    ]
    assert withheld_levers(history, "c0", pivot=True) == {
        "retrieval.sparse_k": "moved by exp-003, exp-006 since the best last moved, no supported gain",
        "retrieval.speaker_first": "moved by exp-006 since the best last moved, no supported gain",
        "retrieval.dense_k": "refused before evaluation: retrieval.dense_k=12, no effect, exp-007",
    }
    assert withheld_levers(history, "c0") == {
        "retrieval.dense_k": "refused before evaluation: retrieval.dense_k=12, no effect, exp-007"}
