"""The proposer interface and the records that cross it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from harness.errors import MemsysError
from research.errors import ProposalFormatError
from research.evaluation.diagnosis import row_mean
from research.journal.trajectory import Edit, ExperimentRecord

#: the hypothesis of a hybrid run's exploration draw (its record has no subspace)
EXPLORE_HYPOTHESIS = "Explore: TPE samples the whole config space"
#: proposers whose every proposal is a sampler's draw, never a hypothesis
SAMPLERS = ("optuna", "random")
#: how a TPE draw that took a preset's lever values (``research.study.warm_start``) begins its hypothesis
WARM_HYPOTHESIS = "Warm start: TPE takes the lever values of preset"


def is_sampler_draw(rec: ExperimentRecord) -> bool:
    """A proposal a sampler made, not a hypothesis: optuna's and random's, and the hybrid's exploration
    draws, known by what they are rather than by their words (the small model copies hypotheses it reads
    in the journal, but a hypothesis of the model's always comes with the levers it chose)."""
    if rec.proposer in SAMPLERS:
        return True
    return rec.proposer == "hybrid" and not rec.subspace and rec.hypothesis.startswith(
        (EXPLORE_HYPOTHESIS, WARM_HYPOTHESIS))


def is_warm_start(rec: ExperimentRecord) -> bool:
    """A sampler draw that took a named preset's lever values instead of TPE's (research.study.warm_start)."""
    return is_sampler_draw(rec) and rec.hypothesis.startswith(WARM_HYPOTHESIS)


#: where an accepted gain came from (the report's attribution; issue #50)
GAIN_SOURCES = ("researcher", "researcher's levers, sampler's values", "sampler draw", "warm start (a preset's levers)",
                "repair")
REPAIR_ACTIONS = ("repair_edit", "revert_import_edit")


def gain_source(rec: ExperimentRecord) -> str:
    """Who made the change an experiment measured: a repair when a repair edit (or the revert of an edit's
    import) is what got it evaluated; else a preset's values the run started TPE from (named apart: a gain
    there was chosen before the run, on dev, not found by it), a sampler's draw, the hybrid's
    levers-by-the-model with values by TPE, or the researcher's own proposal."""
    if any(isinstance(h, dict) and h.get("action") in REPAIR_ACTIONS for h in rec.healing):
        return "repair"
    if is_warm_start(rec):
        return "warm start (a preset's levers)"
    if is_sampler_draw(rec):
        return "sampler draw"
    return "researcher's levers, sampler's values" if rec.proposer == "hybrid" else "researcher"


def gains_by_source(records: Sequence[ExperimentRecord]) -> list[tuple[str, int, float]]:
    """(source, accepted experiments, summed gain over the best before each) for every source with an
    accepted experiment, in GAIN_SOURCES order. Pure."""
    got: dict[str, tuple[int, float]] = {}
    for r in records:
        if r.decision != "proceed" or r.objective_value is None or r.best_before is None:
            continue
        n, gain = got.get(gain_source(r), (0, 0.0))
        got[gain_source(r)] = (n + 1, gain + float(r.objective_value) - float(r.best_before))
    return [(s, *got[s]) for s in GAIN_SOURCES if s in got]


@dataclass
class Proposal:
    hypothesis: str
    discovery_type: str
    expected_effect: str = ""
    edits: list[Edit] = field(default_factory=list)
    config_overrides: list[str] = field(default_factory=list)
    tokens: int = 0
    cost_usd: float = 0.0
    trial_number: int | None = None  # optuna (earlier runs)
    seed: int | None = None  # the sampling seed of the reply (LLM) or the sampler (TPE, random)
    subspace: list[str] = field(default_factory=list)  # hybrid: the levers the LLM chose for TPE to tune


@dataclass
class ResearchContext:
    """What the researcher sees at each step."""

    objective: str
    best_value: float
    history: list[ExperimentRecord]
    mode: str  # "new" | "iterate" | "pivot"
    current_hypothesis: str | None
    failed_questions: list[dict[str, Any]]
    files: dict[str, str]  # path -> content (selected within the context budget)
    knobs: str  # the levers live in the best config, with current values, ranges and effects
    preset: str  # configs/memory/<preset>.yaml is where config overrides land
    diagnosis: str = ""  # retrieval vs reader misses per category, with examples of the dominant kind
    goal: str = ""  # the metric, how many questions are scored and what one question is worth
    journal: str = ""  # recent experiments: changes, outcome, lesson
    lessons: str = ""  # rolling summary of what the loop has learned
    failure_kind: str = ""  # retrieval | reader | "" (which kind of miss dominates the best evaluation)
    rule: str = ""  # the decision rule that fired last (why iterate / why pivot)
    memory: Any = None  # the resolved MemoryConfig at the best commit (levers, menu schema)
    reader_free: bool = False  # the objective sees only the context: reader-only levers are dead
    seed: int = 0  # sampling seed of this step (recorded; replay goes through the reply cache)
    shown_questions: list[str] = field(default_factory=list)  # ids whose gold the diagnosis shows (never-shown check)
    withheld: dict[str, str] = field(default_factory=dict)  # lever id -> why the menu leaves it out now
    absent: frozenset[str] = frozenset()  # levers the evaluated memsys lacks (research.levers.scope.absent_levers)
    warm: tuple[tuple[str, dict[str, Any]], ...] = ()  # research.study.warm_start: (preset, its lever values)


@dataclass(frozen=True)
class Applied:
    """What is applied when a repair is asked, so the repair prompt can say it plainly.

    Why: after a failure the prompt showed "(no diff)" although an edit had been proposed (it had not
    applied, and the worktree was reset), so the researcher could not tell whether its edit was still
    there, nor which values the levers held. The loop fills this from git and the run's evaluations."""

    diff: str = ""  # the diff against the experiment's parent commit that is applied now ("" when none is)
    not_applied: str = ""  # why none of the attempt is applied (when ``diff`` is empty)
    memory: Any = None  # the memory config in effect now (the levers' current values); None when it does not resolve
    context_tokens: float | None = None  # mean context tokens per question of the last evaluation (None: unknown)
    context_of: str = ""  # which evaluation that mean comes from
    budget_tokens: int | None = None  # the scorer's context_budget_tokens (None: no budget)


def mean_context_tokens(rows: list[dict[str, Any]]) -> float | None:
    """Mean ``context_tokens`` (the scorer's recount, within its budget) of scored rows; None without any."""
    return row_mean(rows, "context_tokens")


class Proposer(ABC):
    name: str

    @abstractmethod
    def propose(self, ctx: ResearchContext) -> Proposal: ...

    def propose_batch(self, ctx: ResearchContext, k: int) -> list[Proposal]:
        """Up to ``k`` proposals for one round of ``research.parallel=k`` candidates.

        The default asks ``propose`` k times, candidate i with step seed ``ctx.seed + i`` (so TPE and a
        sampled LLM give different candidates). It stops at the first failure: the round asks the
        missing candidates one at a time, where a failure is recorded against its own candidate."""
        out: list[Proposal] = []
        for i in range(k):
            try:
                out.append(self.propose(replace(ctx, seed=ctx.seed + i)))
            except (ProposalFormatError, MemsysError):
                break
        return out

    def repair(self, ctx: ResearchContext, proposal: Proposal, error: str, applied: Applied) -> Proposal | None:
        """A repair edit for a failed attempt (``applied``: what is applied now); None when this proposer
        cannot repair."""
        return None

    def reconsider(self, ctx: ResearchContext, proposal: Proposal, dup: str, outcome: str,
                   tried: list[str], temperature: float) -> Proposal | None:
        """A different proposal after one that repeats experiment ``dup``; None when this
        proposer cannot be asked again (a sampler simply samples anew next step)."""
        return None

    def observe(self, proposal: Proposal, value: float | None) -> None:
        """Feedback after evaluation (Optuna's tell)."""
