"""Random sampling of the live levers: the floor every other proposer has to beat.

One live lever (field or macro) per step, a uniformly drawn value different from the current one,
seeded per step so a resumed run draws the same proposal.
"""

from __future__ import annotations

import random
from typing import Any

from research.levers.catalogue import Lever, live_levers
from research.proposers.base import Proposal, Proposer, ResearchContext


def draw(lever: Lever, rng: random.Random) -> Any:
    if lever.kind == "bool":
        return rng.choice([True, False])
    if lever.kind == "choice":
        return rng.choice(list(lever.choices))
    if lever.kind == "int":
        return rng.randint(int(lever.low), int(lever.high))
    return round(rng.uniform(float(lever.low), float(lever.high)), 3)


class RandomProposer(Proposer):
    name = "random"

    def propose(self, ctx: ResearchContext) -> Proposal:
        rng = random.Random(ctx.seed)
        levers = live_levers(ctx.memory, reader_free=ctx.reader_free, absent=ctx.absent)
        for _ in range(50):  # a draw equal to the current value is no change: draw again
            lever = rng.choice(levers)
            value = draw(lever, rng)
            if value != lever.current(ctx.memory):
                break
        return Proposal(f"random: {lever.id}={value}", "hyperparameter_tuning", "", [], lever.overrides(value),
                        seed=ctx.seed)
