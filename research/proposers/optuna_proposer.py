"""TPE over the lever catalogue: the "traditional AutoML" baseline the paper compares against.

It samples every field lever (the whole config space) from the shared study, which holds every
evaluated experiment of the run, whoever proposed it (research.levers.study). With
``research.objectives=[quality, context_tokens]`` that study is multi-objective and the same TPE sampler
draws towards its Pareto front (quality up, counted context tokens down); nothing here changes with it.
"""

from __future__ import annotations

from typing import Any

from research.levers.study import SharedStudy, overrides_of
from research.proposers.base import WARM_HYPOTHESIS, Proposal, Proposer, ResearchContext


def whole_space_draw(study: SharedStudy, ctx: ResearchContext) -> tuple[dict[str, Any], str | None]:
    """TPE's values for every lever at this step, and None; or, while a preset of ``research.study.warm_start``
    is untried, that preset's lever values (enqueued in the study, so TPE counts them as its own trial) and
    its name. Why: a run from ``naive`` with the reader affords a dozen candidates, and a random first draw of
    43 levers gains a few points that 12 or 50 questions cannot support (docs/results.md, "Research loop");
    a preset chosen on dev is a known-good point to start from, and the report names such a gain apart."""
    warm = study.untried(ctx.warm)
    if warm is None:
        return study.suggest(None, ctx.seed, absent=ctx.absent), None
    name, point = warm
    values = study.suggest(None, ctx.seed, absent=ctx.absent, enqueue=point)
    return values | point, name  # the point has no absent lever (ResearchLoop.warm_points)


class OptunaProposer(Proposer):
    name = "optuna"

    def __init__(self, study: SharedStudy):
        self.study = study

    def propose(self, ctx: ResearchContext) -> Proposal:
        values, warm = whole_space_draw(self.study, ctx)
        what = "multi-objective TPE" if len(self.study.objectives) > 1 else "TPE"
        hypothesis = (f"{WARM_HYPOTHESIS} {warm} (step seed {ctx.seed})" if warm else
                      f"{what} sample of the config space (step seed {ctx.seed})")
        return Proposal(hypothesis, "hyperparameter_tuning", "", [], overrides_of(values), seed=ctx.seed)
