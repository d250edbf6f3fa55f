"""What one step of a run may use: the narrow, typed context an experiment, a round, the baseline, the
check slice and the held-out confirmation receive instead of the whole loop.

Why: these steps used to take ``ResearchLoop`` itself and reach into it (its proposers, its study, its
MLflow run), which tied five modules into an import cycle and hid what a step depends on. A step now
sees the run's settings, its state and journal, the workspace, the commit view, the evaluations and
the few loop actions it must call back (ask the researcher, evaluate through the run's gateway,
record a finished experiment). ``ResearchLoop.run_context`` builds one per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Protocol

from research.config import RunSetup
from research.evaluation.commit_evals import Evaluations
from research.evaluation.two_half import EvalOutcome
from research.journal.trajectory import ExperimentRecord, measured_with_key
from research.levers.scope import Held
from research.loop.commits import CommitView
from research.loop.state import LoopState
from research.proposers.base import Proposal, Proposer, ResearchContext
from research.workspace.repo import Workspace, Worktree


@dataclass
class LoopHooks:
    """The loop's own actions a step calls back: each needs what only the loop holds (the proposers'
    403 fallback, the run's gateway, the journal-then-state commit point)."""

    researcher_context: Callable[[], ResearchContext]
    propose: Callable[[Proposer, ResearchContext, ExperimentRecord], Proposal]
    propose_batch: Callable[[Proposer, ResearchContext, int, ExperimentRecord], list[Proposal]]
    run_eval: Callable[..., EvalOutcome]
    finish: Callable[[ExperimentRecord, "Proposal | None", "Proposer | None"], None]
    switch_to_local: Callable[[], str]
    screen_leakage: Callable[[str, str], dict[str, Any]]  # (parent, commit) -> the screen's verdict
    on_event: Callable[[str, dict[str, Any]], None]


@dataclass
class RunContext:
    """One run, as its steps see it."""

    setup: RunSetup
    run_id: str
    run_dir: Path
    preset: str
    state: LoopState
    records: list[ExperimentRecord]
    ws: Workspace
    commits: CommitView
    evals: Evaluations
    held: Held
    round_keys: dict[str, str]  # effective key -> candidate of the round in progress
    hooks: LoopHooks

    @staticmethod
    def now() -> str:
        return datetime.now().isoformat(timespec="seconds")

    def stage(self, rec: ExperimentRecord, stage: str, detail: str = "") -> None:
        self.hooks.on_event("stage", {"experiment": rec.experiment_id, "stage": stage, "detail": detail})

    def evaluated_with_key(self, key: str) -> ExperimentRecord | None:
        return measured_with_key(self.records, key)

    def relative(self, path: str | Path | None) -> str:
        """A path inside the run folder as the journal stores it (relative, so a moved run still reads)."""
        if not path:
            return ""
        try:
            return str(Path(path).relative_to(self.run_dir))
        except ValueError:
            return str(path)


class Trial(Protocol):
    """One candidate as the screen-evaluate-heal cascade (research/loop/measure.py) sees it: its run, its
    record, its worktree, the researcher that may repair it and the files its edits changed."""

    run_ctx: RunContext
    rec: ExperimentRecord
    wt: Worktree | None
    proposer: Proposer
    ctx: ResearchContext | None
    edited: list[str]

    def leakage(self) -> Any: ...
