"""Where an accepted gain came from (research.proposers.base.gain_source), as the report attributes it."""

from __future__ import annotations

from research.proposers.base import EXPLORE_HYPOTHESIS, gain_source, gains_by_source
from research.report.html import gains_html
from research.report.terminal import gains_line
from tests.support.records import make_record


def rec(index: int, decision: str, value: float, best_before: float, proposer: str, **kw):
    return make_record(index, decision, value, "hyperparameter_tuning", best_before, run_id="r", proposer=proposer,
                       objective="context_recall", **kw)


RECORDS = [
    make_record(0, "baseline", 0.2, None, run_id="r", proposer="baseline", objective="context_recall"),
    rec(1, "proceed", 0.5, 0.2, "hybrid", hypothesis=EXPLORE_HYPOTHESIS),  # an exploration draw
    rec(2, "proceed", 0.55, 0.5, "llm", hypothesis="rank dated turns first"),
    rec(3, "proceed", 0.6, 0.55, "llm", hypothesis="fix the merge",
        healing=[{"attempt": 1, "failure": "code_error", "action": "repair_edit", "reason": "NameError"}]),
    rec(4, "proceed", 0.62, 0.6, "hybrid", hypothesis="widen BM25", subspace=["retrieval.sparse_k"]),
    rec(5, "iterate", 0.7, 0.62, "optuna"),  # not accepted: attributed nothing
    rec(6, "proceed", 0.63, 0.62, "optuna"),
]


def test_each_accepted_gain_goes_to_the_researcher_a_sampler_or_a_repair():
    assert [gain_source(r) for r in RECORDS[1:]] == [
        "sampler draw", "researcher", "repair", "researcher's levers, sampler's values", "sampler draw", "sampler draw"]
    got = {s: (n, round(g, 4)) for s, n, g in gains_by_source(RECORDS)}
    assert got == {"researcher": (1, 0.05), "researcher's levers, sampler's values": (1, 0.02),
                   "sampler draw": (2, 0.31), "repair": (1, 0.05)}


def test_the_run_summary_and_the_report_show_the_attribution_and_say_so_when_nothing_was_accepted():
    line = gains_line(RECORDS)
    assert line.startswith("gains by source: researcher +0.0500 (1);") and "repair +0.0500 (1)" in line
    assert gains_line(RECORDS[:1]) == "" and "No accepted gain" in gains_html(RECORDS[:1])
    html = gains_html(RECORDS)
    assert html.count("<tr>") >= 4 and "sampler draw" in html and "+0.3100" in html
