"""research/perf/bench_infeasible.py on a journal with failed confidence-abstention draws (real git, real Optuna)."""

from __future__ import annotations

from pathlib import Path

from research.loop.research_loop import ResearchLoop
from research.perf.bench_infeasible import NEEDS_LOGPROBS, measure, render
from tests.support.loop import commit_overrides, git, journal_record, scripted_setup

OWN = {"cls": "runtime_error", "is_infrastructure": False, "message": "config: needs llm.local.logprobs=true"}


def test_each_failure_gets_a_row_with_both_studies_asked_the_same_draws(repo: Path, runs: Path) -> None:
    base = git(repo, "rev-parse", "HEAD")
    retrieval = commit_overrides(repo, ["answer.abstain=retrieval", "retrieval.top_k=9"], "retrieval abstention")
    confident = commit_overrides(repo, ["answer.abstain=or_confidence", "retrieval.top_k=7"], "or_confidence")
    loop = ResearchLoop(scripted_setup(repo, 4), "bench")
    loop.records = [journal_record(0, base, "baseline", 0.2), journal_record(1, retrieval, "iterate", 0.3),
                    journal_record(2, confident, "failed", failure=OWN)]
    rows = measure(loop, "answer.abstain", NEEDS_LOGPROBS, draws=6)
    assert [(r["records"], r["infeasible_trials"], r["draws"]) for r in rows] == [(3, 1, 6)]
    assert all(0 <= r["hits_with"] <= 6 and 0 <= r["hits_without"] <= 6 for r in rows)
    assert measure(loop, "answer.abstain", NEEDS_LOGPROBS, draws=6) == rows  # seeded: the same figures again
    table = render({"run": "bench", "draws": 6, "lever": "answer.abstain", "values": list(NEEDS_LOGPROBS), "rows": rows})
    assert f"| 3 | 1 | {rows[0]['hits_without']}/6 | {rows[0]['hits_with']}/6 |" in table
