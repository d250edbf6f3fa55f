"""Optuna ask/tell over the memory config's numeric/categorical knobs.

The "traditional AutoML" baseline the paper compares against. Storage is SQLite in
the run folder, so a resumed run continues the same study (hydra-optuna-sweeper is
incompatible with optuna 5, so we drive the study directly).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from research.proposers.base import Proposal, Proposer, ResearchContext

log = logging.getLogger(__name__)

# name -> (kind, spec); ranges bracket the paper's defaults
SEARCH_SPACE: dict[str, tuple[str, Any]] = {
    "retrieval.top_k": ("int", (5, 40)),
    "retrieval.merge": ("cat", ["set_union", "rrf", "linear", "dense_only", "bm25_only"]),
    "retrieval.dense_k": ("int", (5, 40)),
    "retrieval.sparse_k": ("int", (5, 40)),
    "pyramid.enabled": ("cat", [True, False]),
    "pyramid.theta": ("float", (0.2, 0.7)),
    "pyramid.budget_tokens": ("int", (1000, 8000)),
    "answer.response_format": ("cat", [True, False]),
    "answer.context_text": ("cat", ["summary", "full_text", "both"]),
}


class OptunaProposer(Proposer):
    name = "optuna"

    def __init__(self, storage_path: Path, study_name: str, seed: int = 0):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._optuna = optuna
        self.study = optuna.create_study(
            study_name=study_name, storage=f"sqlite:///{storage_path}", direction="maximize",
            load_if_exists=True, sampler=optuna.samplers.TPESampler(seed=seed),
        )
        self._trials: dict[int, Any] = {}
        # trials asked before a crash and never told would block nothing, but keep the study tidy
        for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            self.study.tell(t.number, state=optuna.trial.TrialState.FAIL)

    def propose(self, ctx: ResearchContext) -> Proposal:
        trial = self.study.ask()
        overrides = []
        for name, (kind, spec) in SEARCH_SPACE.items():
            if kind == "int":
                v = trial.suggest_int(name, *spec)
            elif kind == "float":
                v = round(trial.suggest_float(name, *spec), 3)
            else:
                v = trial.suggest_categorical(name, spec)
            overrides.append(f"{name}={str(v).lower() if isinstance(v, bool) else v}")
        self._trials[trial.number] = trial
        return Proposal(f"optuna trial {trial.number}: TPE sample of the config space", "hyperparameter_tuning",
                        "", [], overrides, trial_number=trial.number)

    def observe(self, proposal: Proposal, value: float | None) -> None:
        if proposal.trial_number is None:
            return
        if value is None:
            self.study.tell(proposal.trial_number, state=self._optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(proposal.trial_number, value)
