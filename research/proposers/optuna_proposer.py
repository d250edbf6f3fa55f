"""TPE over the lever catalogue: the "traditional AutoML" baseline the paper compares against.

It samples every field lever (the whole config space) from the shared study, which holds every
evaluated experiment of the run, whoever proposed it (research.levers.study). With
``research.objectives=[quality, context_tokens]`` that study is multi-objective and the same TPE sampler
draws towards its Pareto front (quality up, counted context tokens down); nothing here changes with it.
"""

from __future__ import annotations

from research.levers.study import SharedStudy, overrides_of
from research.proposers.base import Proposal, Proposer, ResearchContext


class OptunaProposer(Proposer):
    name = "optuna"

    def __init__(self, study: SharedStudy):
        self.study = study

    def propose(self, ctx: ResearchContext) -> Proposal:
        values = self.study.suggest(None, ctx.seed, absent=ctx.absent)
        what = "multi-objective TPE" if len(self.study.objectives) > 1 else "TPE"
        return Proposal(f"{what} sample of the config space (step seed {ctx.seed})", "hyperparameter_tuning", "",
                        [], overrides_of(values), seed=ctx.seed)
