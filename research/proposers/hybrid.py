"""LLM hypothesis, TPE values: ``research.proposer=hybrid``.

The LLM reads the diagnosis and picks a hypothesis and the levers it is about (a subspace);
TPE, fed by every evaluated experiment of the run (research.study), then tunes the values of just
those levers for ``trials`` experiments. The model does what a small model can (say which knob
addresses which failure) and the sampler what it does well (pick numbers).
"""

from __future__ import annotations

from typing import Any

from research.errors import ProposalFormatError
from research.proposers.base import Proposal, Proposer, ResearchContext
from research.proposers.llm import LLMProposer, step_prompt
from research.study import SharedStudy, field_levers, overrides_of


def subspace_schema(lever_ids: list[str]) -> dict[str, Any]:
    return {"type": "object",
            "properties": {"hypothesis": {"type": "string"},
                           "targets": {"type": "string", "enum": ["retrieval_miss", "reader_miss", "abstention", "other"]},
                           "why": {"type": "string"},
                           "levers": {"type": "array", "items": {"type": "string", "enum": lever_ids},
                                      "minItems": 1, "maxItems": 3}},
            "required": ["hypothesis", "targets", "why", "levers"]}


class HybridProposer(Proposer):
    name = "hybrid"

    def __init__(self, llm: Any, study: SharedStudy, *, trials: int = 3, max_tokens: int = 384,
                 temperature: float | None = None):
        self.researcher = LLMProposer(llm, mode="menu", max_tokens=max_tokens, temperature=temperature)
        self.study, self.trials = study, trials

    @property
    def llm(self) -> Any:
        return self.researcher.llm

    @llm.setter
    def llm(self, value: Any) -> None:  # the loop's local fallback swaps the client
        self.researcher.llm = value

    def _hypothesis(self, ctx: ResearchContext) -> Proposal:
        from research.levers import live_levers

        tunable = {lv.id for lv in field_levers()}
        ids = [lv.id for lv in live_levers(ctx.memory, reader_free=ctx.reader_free) if lv.id in tunable]
        if not ids:
            raise ProposalFormatError("no live field lever to tune in the best config")
        reply = self.researcher._chat(self.researcher._messages(step_prompt(ctx, "researcher_subspace.txt")),
                                      subspace_schema(ids), seed=ctx.seed * 100, temperature=None)
        data = reply.parsed or {}
        chosen = [i for i in dict.fromkeys(data.get("levers") or []) if i in ids]
        if not chosen:
            raise ProposalFormatError(f"the reply names no live lever (got {data.get('levers')!r})")
        prop = Proposal(str(data.get("hypothesis", "")).strip() or "(no hypothesis)", "hyperparameter_tuning",
                        f"targets {data.get('targets', 'other')}: {str(data.get('why', '')).strip()}"[:300],
                        subspace=chosen, seed=ctx.seed * 100)
        prop.tokens, prop.cost_usd = reply.prompt_tokens + reply.completion_tokens, reply.cost_usd
        return prop

    def propose(self, ctx: ResearchContext) -> Proposal:
        """A new hypothesis when the journal's current one has had its trials (or on a pivot / a
        new start), else the next TPE trial inside the current subspace."""
        current = _current_subspace(ctx, self.trials)
        if current is None:
            head = self._hypothesis(ctx)
            hyp, space, tokens, cost = head.hypothesis, head.subspace, head.tokens, head.cost_usd
            expected = head.expected_effect
        else:
            hyp, space, expected = current
            tokens, cost = 0, 0.0
        values = self.study.suggest(space, ctx.seed)
        return Proposal(hyp, "hyperparameter_tuning", expected, [], overrides_of(values), tokens=tokens,
                        cost_usd=cost, seed=ctx.seed, subspace=list(space))


def _current_subspace(ctx: ResearchContext, trials: int) -> tuple[str, list[str], str] | None:
    """The hypothesis still being tuned: the last hybrid record's subspace, while it has had fewer
    than ``trials`` experiments and the loop is not pivoting or starting afresh after a win."""
    if ctx.mode != "iterate" or not ctx.current_hypothesis:
        return None
    same = [r for r in ctx.history if r.proposer == "hybrid" and r.hypothesis == ctx.current_hypothesis]
    if not same or len(same) >= trials:
        return None
    space = same[-1].subspace
    return (ctx.current_hypothesis, list(space), same[-1].expected_effect) if space else None
