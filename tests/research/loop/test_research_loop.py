"""research/loop/research_loop.py: the study a run rebuilds from its journal on every start and resume.

Real git (a scratch copy of the project with one commit per candidate config) and a real Optuna study;
the records are the journal's, as ``resume_journal`` returns them.
"""

from __future__ import annotations

from pathlib import Path

import optuna

from research.levers.study import INFEASIBLE
from research.loop.research_loop import ResearchLoop
from tests.support.loop import commit_overrides, git, journal_record, scripted_setup


def test_a_resumed_run_rebuilds_failed_configs_as_infeasible_trials(repo: Path, runs: Path) -> None:
    base = git(repo, "rev-parse", "HEAD")
    confident = commit_overrides(repo, ["answer.abstain=confidence"], "confidence abstention")
    edited = commit_overrides(repo, ["answer.abstain=or_confidence"], "or_confidence")
    outage = commit_overrides(repo, ["answer.abstain=and_confidence"], "and_confidence")
    own = {"cls": "runtime_error", "is_infrastructure": False, "message": "config: needs llm.local.logprobs=true"}
    loop = ResearchLoop(scripted_setup(repo, 4), "study")
    loop.records = [
        journal_record(0, base, "baseline", 0.28),
        journal_record(1, confident, "failed", failure=own),  # TPE's draw failed on its own account: infeasible
        journal_record(2, edited, "failed", failure=own, edits=[{"path": "memsys/answer/generate.py"}]),  # the code's fault
        journal_record(3, outage, "failed", failure={"cls": "api_error", "is_infrastructure": True}),  # our side's fault
    ]
    study = loop.rebuild_study()
    trials = study.study.trials
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED]
    assert trials[1].params["answer.abstain"] == "confidence" and trials[1].constraints == {INFEASIBLE: 1.0}
    assert trials[1].user_attrs["memsys_origin"] == "study/1"
    assert loop.rebuild_study().study.trials[1].params == trials[1].params  # the same study on every resume
