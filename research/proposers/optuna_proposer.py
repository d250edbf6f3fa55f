"""TPE over the lever catalogue: the "traditional AutoML" baseline the paper compares against.

It samples every field lever (the whole config space) from the shared study, which holds every
evaluated experiment of the run, whoever proposed it (research.study).
"""

from __future__ import annotations

from research.proposers.base import Proposal, Proposer, ResearchContext
from research.study import SharedStudy, overrides_of


class OptunaProposer(Proposer):
    name = "optuna"

    def __init__(self, study: SharedStudy):
        self.study = study

    def propose(self, ctx: ResearchContext) -> Proposal:
        values = self.study.suggest(None, ctx.seed, absent=ctx.absent)
        return Proposal(f"TPE sample of the config space (step seed {ctx.seed})", "hyperparameter_tuning", "",
                        [], overrides_of(values), seed=ctx.seed)
