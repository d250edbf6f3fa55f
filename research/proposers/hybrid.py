"""LLM hypothesis, TPE values: ``research.proposer=hybrid``.

The LLM reads the diagnosis and picks a hypothesis and the levers it is about (a subspace);
TPE, fed by every evaluated experiment of the run (research.study), then tunes the values of those
levers for ``trials`` experiments; with ``coupled`` > 0 also of up to that many levers they are
coupled to (``research.levers.catalogue.coupled_levers``: dead until the chosen levers move, so the menu could
not offer them, or capping them). Off by default: in the quickstart it let TPE move the merge away
from a good one while refining (docs/history.md, "Researcher (issue #13)"). The model does what a small model can (say which knob
addresses which failure) and the sampler what it does well (pick numbers).

A new hypothesis is not offered the levers already tuned from the current best without a gain
(``untried_levers``): a small model otherwise names the same pair again and again (in the 20-experiment
runs the 1.5B model chose dense_k and top_k for every hypothesis), so a pivot would change nothing.

Exploration (``explore_first``, ``explore_on_pivot``): TPE samples the whole space for the run's first
experiments and once after each pivot, before the model names a new subspace. Every hypothesis moves 1-3
levers from its parent, so the model alone climbs lever by lever, while one draw that moves all of them
at once reached a wide context within two experiments in TPE's own runs (docs/history.md, "Researcher (issue #13)": hybrid without
exploration 0.808 against TPE's 0.903 on three seeds). The two halves then do what each does well: the
sampler jumps, the model refines from where it landed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from research.errors import ProposalFormatError
from research.journal.trajectory import ExperimentRecord
from research.levers.catalogue import coupled_levers, offered_levers
from research.levers.menu import FAILURE_TARGETS
from research.levers.study import SharedStudy, field_levers, overrides_of
from research.proposers.base import EXPLORE_HYPOTHESIS, WARM_HYPOTHESIS, Proposal, Proposer, ResearchContext, is_sampler_draw
from research.proposers.llm import LLMProposer, batch_items, batch_line, batch_schema, share_reply, step_prompt
from research.proposers.optuna_proposer import whole_space_draw


def is_exploration(rec: ExperimentRecord) -> bool:
    return rec.proposer == "hybrid" and is_sampler_draw(rec)


def explores(ctx: ResearchContext, first: int, on_pivot: bool) -> bool:
    """Whether this step is an exploration draw: the run's first ``first`` experiments, and the step
    after a pivot unless the pivot came right after an exploration (then the model gets its turn)."""
    done: Sequence[ExperimentRecord] = [r for r in ctx.history if r.index > 0]
    if len(done) < first:
        return True
    return on_pivot and ctx.mode == "pivot" and bool(done) and not is_exploration(done[-1])


def subspace_schema(lever_ids: list[str]) -> dict[str, Any]:
    return {"type": "object",
            "properties": {"hypothesis": {"type": "string"},
                           "targets": {"type": "string", "enum": list(FAILURE_TARGETS)},
                           "why": {"type": "string"},
                           "levers": {"type": "array", "items": {"type": "string", "enum": lever_ids},
                                      "minItems": 1, "maxItems": 3}},
            "required": ["hypothesis", "targets", "why", "levers"]}


class HybridProposer(Proposer):
    name = "hybrid"

    def __init__(self, llm: Any, study: SharedStudy, *, trials: int = 3, max_tokens: int = 384,
                 temperature: float | None = None, batch: bool = True, coupled: int = 0, explore_first: int = 0,
                 explore_on_pivot: bool = False):
        self.researcher = LLMProposer(llm, mode="menu", max_tokens=max_tokens, temperature=temperature, batch=batch)
        self.study, self.trials, self.coupled = study, trials, coupled
        self.explore_first, self.explore_on_pivot = explore_first, explore_on_pivot

    @property
    def llm(self) -> Any:
        return self.researcher.llm

    @llm.setter
    def llm(self, value: Any) -> None:  # the loop's local fallback swaps the client
        self.researcher.llm = value

    def _live_ids(self, ctx: ResearchContext) -> tuple[list[str], str]:
        """The levers a new hypothesis may name, and the line that tells the model which were left out."""
        tunable = {lv.id for lv in field_levers()}
        ids = [lv.id for lv in offered_levers(ctx.memory, reader_free=ctx.reader_free, withheld=ctx.withheld,
                                              absent=ctx.absent)
               if lv.id in tunable]
        if not ids:
            raise ProposalFormatError("no live field lever to tune in the best config")
        offered, spent = untried_levers(ids, ctx.history)
        note = (f"\n\nTuned from the current best without a gain, so not offered now: {', '.join(spent)}. "
                "Name other levers.") if spent else ""
        return offered, note

    def _hypothesis(self, ctx: ResearchContext) -> Proposal:
        ctx = after_draw(ctx)
        ids, note = self._live_ids(ctx)
        reply = self.researcher._chat(self.researcher._messages(step_prompt(ctx, "researcher_subspace.txt") + note),
                                      subspace_schema(ids), seed=ctx.seed * 100, temperature=None)
        prop = _subspace_proposal(reply.parsed or {}, ids, ctx.seed * 100)
        prop.tokens, prop.cost_usd = reply.prompt_tokens + reply.completion_tokens, reply.cost_usd
        return prop

    def _hypotheses(self, ctx: ResearchContext, k: int) -> list[Proposal]:
        """K hypotheses with their subspaces in one request; items naming no live lever are dropped."""
        ctx = after_draw(ctx)
        ids, note = self._live_ids(ctx)
        user = f"{step_prompt(ctx, 'researcher_subspace.txt')}{note}\n\n{batch_line(k)}"
        r = self.researcher
        reply = r._chat(r._messages(user), batch_schema(subspace_schema(ids), k), seed=ctx.seed * 100,
                        temperature=None, max_tokens=r.max_tokens * k)
        out = batch_items(reply, k, lambda item: _subspace_proposal(item, ids, ctx.seed * 100))
        share_reply(out, reply, ctx.seed * 100)
        return out

    def propose(self, ctx: ResearchContext) -> Proposal:
        """An exploration draw when one is due; else a new hypothesis when the journal's current one has
        had its trials (or on a pivot / a new start), else the next TPE trial inside the current subspace."""
        if explores(ctx, self.explore_first, self.explore_on_pivot):
            return self._explore(ctx)
        current = _current_subspace(ctx, self.trials)
        head = self._hypothesis(ctx) if current is None else None
        return self._tuned(ctx, head, current)

    def propose_batch(self, ctx: ResearchContext, k: int) -> list[Proposal]:
        """The LLM part of a round in one request (K hypotheses, each with its subspace), the TPE part
        per candidate (its own step seed). While the current hypothesis is being tuned there is no LLM
        part: K TPE trials in its subspace, as the default does."""
        if explores(ctx, self.explore_first, self.explore_on_pivot):
            return [self._explore(replace(ctx, seed=ctx.seed + i)) for i in range(k)]
        current = _current_subspace(ctx, self.trials)
        if current is not None or not self.researcher.batch or k < 2:
            return super().propose_batch(ctx, k)
        return [self._tuned(replace(ctx, seed=ctx.seed + i), head, None)
                for i, head in enumerate(self._hypotheses(ctx, k))]

    def _explore(self, ctx: ResearchContext) -> Proposal:
        """TPE over every field lever (what research.proposer=optuna asks for at this step seed), or an untried
        warm-start preset's values."""
        values, warm = whole_space_draw(self.study, ctx)
        hypothesis = f"{WARM_HYPOTHESIS} {warm}" if warm else EXPLORE_HYPOTHESIS
        return Proposal(f"{hypothesis} (step seed {ctx.seed})", "hyperparameter_tuning",
                        "a jump the lever-by-lever hypotheses cannot make", [], overrides_of(values), seed=ctx.seed)

    def _tuned(self, ctx: ResearchContext, head: Proposal | None, current: tuple[str, list[str], str] | None) -> Proposal:
        """TPE values inside the subspace of ``head`` (a new hypothesis) or of ``current``."""
        if head is not None:  # a new hypothesis: its levers, closed over their coupled ones (recorded so)
            hyp, tokens, cost, expected = head.hypothesis, head.tokens, head.cost_usd, head.expected_effect
            space = list(head.subspace)
            if self.coupled > 0 and ctx.memory is not None:
                space += coupled_levers(ctx.memory, space, reader_free=ctx.reader_free, most=self.coupled,
                                        absent=ctx.absent)
        else:
            hyp, space, expected = current
            tokens, cost = 0, 0.0
        values = self.study.suggest(space, ctx.seed, absent=ctx.absent)
        return Proposal(hyp, "hyperparameter_tuning", expected, [], overrides_of(values), tokens=tokens,
                        cost_usd=cost, seed=ctx.seed, subspace=list(space))


def after_draw(ctx: ResearchContext) -> ResearchContext:
    """The model is asked for a new hypothesis after an exploration draw, not to "refine" the draw (asked
    so, the 1.5B model wrote the draw's own words as its hypothesis, step after step)."""
    if ctx.mode == "iterate" and any(is_exploration(r) and r.hypothesis == ctx.current_hypothesis for r in ctx.history):
        return replace(ctx, mode="new", current_hypothesis=None)
    return ctx


def _subspace_proposal(data: Any, ids: list[str], seed: int) -> Proposal:
    """A hypothesis and the live levers it is about, from one subspace reply (no values yet)."""
    if not isinstance(data, dict):
        raise ProposalFormatError(f"a hypothesis must be a JSON object, got {type(data).__name__}")
    chosen = [i for i in dict.fromkeys(data.get("levers") or []) if i in ids]
    if not chosen:
        raise ProposalFormatError(f"the reply names no live lever (got {data.get('levers')!r})")
    return Proposal(str(data.get("hypothesis", "")).strip() or "(no hypothesis)", "hyperparameter_tuning",
                    f"targets {data.get('targets', 'other')}: {str(data.get('why', '')).strip()}"[:300],
                    subspace=chosen, seed=seed)


def _current_subspace(ctx: ResearchContext, trials: int) -> tuple[str, list[str], str] | None:
    """The hypothesis still being tuned: the last hybrid record's subspace, while it has had fewer
    than ``trials`` experiments and the loop is not pivoting or starting afresh after a win."""
    if ctx.mode != "iterate" or not ctx.current_hypothesis:
        return None
    same = [r for r in ctx.history if r.proposer == "hybrid" and r.hypothesis == ctx.current_hypothesis
            and not is_exploration(r)]
    if not same or len(same) >= trials:
        return None
    space = same[-1].subspace
    return (ctx.current_hypothesis, list(space), same[-1].expected_effect) if space else None


def untried_levers(ids: list[str], history: list[ExperimentRecord]) -> tuple[list[str], list[str]]:
    """``ids`` split into those a new hypothesis is offered and those it is not: the levers of every
    hybrid hypothesis tuned since the best last moved (tried from the current best, no supported gain).
    When that would leave nothing, everything is offered again (and nothing is said to be left out)."""
    spent: set[str] = set()
    for rec in reversed(history):
        if rec.decision in ("proceed", "baseline"):
            break
        if rec.proposer == "hybrid":
            spent.update(rec.subspace or [])
    offered = [i for i in ids if i not in spent]
    if not offered:
        return list(ids), []
    return offered, [i for i in ids if i in spent]
