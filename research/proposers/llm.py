"""The LLM researcher. Two output modes, one prompt layout (prompts are files):

- ``menu``: a schema-constrained reply that can only name levers live in the best config, with
  bounded values (research.levers.menu.menu_schema). A 1.5B model cannot write working SEARCH/REPLACE
  edits, but it can pick a lever that targets the failure it is shown.
- ``code``: free SEARCH/REPLACE edits under memsys/ plus config overrides, for capable models.

Replies are sampled at ``temperature`` > 0 with a per-step seed (recorded on the proposal), so runs
explore while a replay of the same step hits the reply cache and stays exact.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path
from string import Template
from typing import Any

from research.errors import ProposalFormatError
from research.journal.trajectory import DISCOVERY_TYPES, Edit, ExperimentRecord
from research.proposers.base import Applied, Proposal, Proposer, ResearchContext

PROMPTS = Path(__file__).resolve().parents[1] / "prompts"
MODES = ("menu", "code", "auto")
#: the most of a diff a repair prompt shows (characters)
REPAIR_DIFF_CHARS = 4000

CODE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "hypothesis": {"type": "string"},
        "discovery_type": {"type": "string", "enum": list(DISCOVERY_TYPES)},
        "expected_effect": {"type": "string"},
        "config_overrides": {"type": "array", "items": {"type": "string"}},
        "edits": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "search": {"type": "string"}, "replace": {"type": "string"}},
                "required": ["path", "search", "replace"],
            },
        },
    },
    "required": ["hypothesis", "discovery_type", "config_overrides", "edits"],
}
PROPOSAL_SCHEMA = CODE_SCHEMA  # the name earlier versions used

_MODES = {
    "new": "Propose a new hypothesis.",
    "iterate": "Refine the current hypothesis ($hyp) with a DIFFERENT concrete change: the last attempt on it "
               "starts from where that attempt left off. Why: $rule",
    "pivot": "Change direction: propose a hypothesis unlike the recent ones (the code is back at the best commit). "
             "Why: $rule",
}

#: model names that get the menu under research.researcher.mode=auto
_SMALL_MODEL = re.compile(r"(?<![\d.])(0\.5|1\.5|1|2|3)b\b", re.IGNORECASE)


def pick_mode(mode: str, llm_cfg: Any) -> str:
    """``auto``: the menu for the embedded model and other models of 3B parameters or fewer."""
    if mode not in MODES:
        raise ProposalFormatError(f"research.researcher.mode must be menu | code | auto, got {mode!r}")
    if mode != "auto":
        return mode
    small = getattr(llm_cfg, "backend", "local") == "local" or bool(_SMALL_MODEL.search(getattr(llm_cfg, "model", "")))
    return "menu" if small else "code"


def _template(name: str) -> Template:
    return Template((PROMPTS / name).read_text(encoding="utf-8"))


def history_lines(history: list[ExperimentRecord], limit: int = 8) -> str:
    rows = []
    for r in history[-limit:]:
        val = "failed" if r.objective_value is None else f"{r.objective_value:.4f}"
        delta = "" if r.delta is None else f" ({r.delta:+.4f})"
        ch = "; ".join(r.config_overrides)[:120]
        rows.append(f"- {r.experiment_id} [{r.decision}] {val}{delta}: {(r.hypothesis or 'baseline')[:120]}"
                    + (f" | {ch}" if ch else "") + (f" | lesson: {r.lesson}" if r.lesson else ""))
    return "\n".join(rows) or "- (none yet)"


def parse_proposal(data: dict[str, Any]) -> Proposal:
    dt = data.get("discovery_type")
    if dt not in DISCOVERY_TYPES:
        raise ProposalFormatError(f"discovery_type {dt!r} is not one of {', '.join(DISCOVERY_TYPES)}")
    edits = []
    for n, e in enumerate(data.get("edits") or []):
        if not isinstance(e, dict) or not all(isinstance(e.get(k), str) for k in ("path", "search", "replace")):
            raise ProposalFormatError(f"edit {n + 1} needs string path/search/replace")
        edits.append(Edit(e["path"].strip(), e["search"], e["replace"]))
    overrides = [str(o).strip() for o in data.get("config_overrides") or [] if str(o).strip()]
    from research.levers.catalogue import expand_macros

    overrides = expand_macros(overrides)  # a macro lever's id=value, as the lever list offers it
    if not edits and not overrides:
        raise ProposalFormatError("proposal changes nothing (no edits, no config_overrides)")
    return Proposal(str(data.get("hypothesis", "")).strip() or "(no hypothesis)", dt,
                    str(data.get("expected_effect", "")), edits, overrides)


def batch_schema(one: dict[str, Any], k: int) -> dict[str, Any]:
    """A reply holding exactly ``k`` proposals, each of schema ``one``."""
    return {"type": "object",
            "properties": {"proposals": {"type": "array", "items": one, "minItems": k, "maxItems": k}},
            "required": ["proposals"]}


def batch_line(k: int) -> str:
    """The prompt's closing line for a batch: ``k`` different hypotheses, as one array."""
    return _template("researcher_batch.txt").substitute(k=k).strip()


def batch_items(reply: Any, k: int, parse: Any) -> list[Proposal]:
    """The proposals of a batch reply that ``parse`` accepts (at most ``k``). None at all is a format
    error that says why, so the round's progress line shows it before asking one at a time."""
    items = reply.parsed.get("proposals") if isinstance(reply.parsed, dict) else None
    out, why = [], []
    for item in (items if isinstance(items, list) else [])[:k]:
        try:
            out.append(parse(item))
        except ProposalFormatError as exc:
            why.append(str(exc))
    if not out:
        raise ProposalFormatError(f"the batch reply holds no usable proposal ({why[0] if why else 'no proposals'})")
    return out


def share_reply(props: list[Proposal], reply: Any, seed: int) -> None:
    """One reply's tokens and cost spread over the proposals it carried (the run's totals stay exact)."""
    tokens, n = reply.prompt_tokens + reply.completion_tokens, max(1, len(props))
    for i, p in enumerate(props):
        p.tokens = tokens // n + (tokens % n if i == 0 else 0)
        p.cost_usd, p.seed = reply.cost_usd / n, seed


def proposal_json(p: Proposal) -> dict[str, Any]:
    """A proposal in the code schema's shape (what the model is shown as its own earlier reply)."""
    return {"hypothesis": p.hypothesis, "discovery_type": p.discovery_type, "expected_effect": p.expected_effect,
            "config_overrides": list(p.config_overrides), "edits": [asdict(e) for e in p.edits]}


def mode_text(ctx: ResearchContext) -> str:
    return Template(_MODES.get(ctx.mode, _MODES["new"])).safe_substitute(
        hyp=repr(ctx.current_hypothesis or ""), rule=ctx.rule or "the loop's decision rule")


def step_prompt(ctx: ResearchContext, template: str = "researcher_step.txt") -> str:
    files = "\n\n".join(f"--- {p} ---\n{c}" for p, c in ctx.files.items()) or "(none)"
    return _template(template).safe_substitute(
        goal=ctx.goal or f"maximize {ctx.objective}", objective=ctx.objective, best=f"{ctx.best_value:.4f}",
        journal=ctx.journal or history_lines(ctx.history), lessons=ctx.lessons or "(none yet)",
        mode_instructions=mode_text(ctx), diagnosis=ctx.diagnosis or "(none yet)", preset=ctx.preset,
        knobs=ctx.knobs, files=files, failure_kind=ctx.failure_kind or "unknown")


class LLMProposer(Proposer):
    name = "llm"

    def __init__(self, llm: Any, *, mode: str = "code", max_tokens: int = 1024, temperature: float | None = None,
                 max_changes: int = 2, batch: bool = True):
        if mode not in ("menu", "code"):
            raise ProposalFormatError(f"LLMProposer mode must be menu or code, got {mode!r}")
        self.llm, self.mode, self.max_tokens = llm, mode, max_tokens
        self.temperature, self.max_changes, self.batch = temperature, max_changes, batch

    def _chat(self, messages: list[dict[str, str]], schema: dict[str, Any], *, seed: int | None,
              temperature: float | None, max_tokens: int | None = None) -> Any:
        from harness.errors import LLMResponseFormatError

        try:
            return self.llm.chat(messages, json_schema=schema, max_tokens=max_tokens or self.max_tokens,
                                 temperature=self.temperature if temperature is None else temperature, seed=seed)
        except LLMResponseFormatError as exc:
            raise ProposalFormatError(f"proposal is not valid JSON: {exc}") from exc

    def _messages(self, user: str, earlier: list[dict[str, str]] | None = None) -> list[dict[str, str]]:
        system = (PROMPTS / "researcher_system.txt").read_text(encoding="utf-8")
        return [{"role": "system", "content": system}, *(earlier or []), {"role": "user", "content": user}]

    def _ask(self, ctx: ResearchContext, user: str, *, earlier: list[dict[str, str]] | None = None,
             temperature: float | None = None, seed_offset: int = 0) -> Proposal:
        seed = ctx.seed * 100 + seed_offset
        reply = self._chat(self._messages(user, earlier), self._schema(ctx), seed=seed, temperature=temperature)
        prop = self._parse(reply.parsed or {}, ctx)
        prop.tokens = reply.prompt_tokens + reply.completion_tokens
        prop.cost_usd = reply.cost_usd
        prop.seed = seed
        return prop

    def _schema(self, ctx: ResearchContext) -> dict[str, Any]:
        if self.mode == "menu":
            from research.levers.menu import menu_schema

            return menu_schema(ctx.memory, self.max_changes, reader_free=ctx.reader_free, withheld=ctx.withheld,
                               absent=ctx.absent)
        return CODE_SCHEMA

    def _parse(self, data: Any, ctx: ResearchContext) -> Proposal:
        """One proposal of a reply (menu: lever changes; code: edits and overrides)."""
        if not isinstance(data, dict):
            raise ProposalFormatError(f"a proposal must be a JSON object, got {type(data).__name__}")
        if self.mode == "code":
            return parse_proposal(data)
        from research.levers.menu import parse_menu

        overrides = parse_menu(data, ctx.memory)
        why = str(data.get("why", "")).strip()
        return Proposal(str(data.get("hypothesis", "")).strip() or "(no hypothesis)", "hyperparameter_tuning",
                        f"targets {data.get('targets', 'other')}: {why}"[:300], [], overrides)

    def step_prompt(self, ctx: ResearchContext) -> str:
        return step_prompt(ctx, "researcher_menu.txt" if self.mode == "menu" else "researcher_step.txt")

    def propose(self, ctx: ResearchContext) -> Proposal:
        return self._ask(ctx, self.step_prompt(ctx))

    def propose_batch(self, ctx: ResearchContext, k: int) -> list[Proposal]:
        """K diverse hypotheses in one request: the step prompt plus a line asking for ``k`` different
        ones, a schema asking for exactly ``k`` proposals of the usual shape. Items that do not parse
        are dropped (the round asks for the missing ones one at a time); repeats and no-ops are the
        round's screens' to catch, candidate by candidate, as for a single proposal."""
        if not self.batch or k < 2:
            return super().propose_batch(ctx, k)
        seed = ctx.seed * 100
        user = f"{self.step_prompt(ctx)}\n\n{batch_line(k)}"
        reply = self._chat(self._messages(user), batch_schema(self._schema(ctx), k), seed=seed, temperature=None,
                           max_tokens=self.max_tokens * k)
        out = batch_items(reply, k, lambda item: self._parse(item, ctx))
        share_reply(out, reply, seed)
        return out

    def reconsider(self, ctx: ResearchContext, proposal: Proposal, dup: str, outcome: str,
                   tried: list[str], temperature: float) -> Proposal:
        """Ask again after a proposal that repeats ``dup`` or has no effect, as a follow-up turn of
        the same conversation (the model sees its own reply), at ``temperature``."""
        earlier = [{"role": "user", "content": self.step_prompt(ctx)},
                   {"role": "assistant", "content": json.dumps(proposal_json(proposal))}]
        user = _template("researcher_duplicate.txt").substitute(
            dup=dup, outcome=outcome, tried="\n".join(f"- {t}" for t in tried) or "- (none)")
        return self._ask(ctx, user, earlier=earlier, temperature=temperature, seed_offset=1 + len(tried))

    def repair(self, ctx: ResearchContext, proposal: Proposal, error: str, applied: Applied) -> Proposal | None:
        if self.mode == "menu":
            return None  # a lever change cannot be repaired by editing code
        rep = self._ask(ctx, repair_prompt(ctx, error, applied), seed_offset=50)
        rep.hypothesis, rep.discovery_type = proposal.hypothesis, proposal.discovery_type
        return rep


def repair_prompt(ctx: ResearchContext, error: str, applied: Applied) -> str:
    """The repair request: the error, what is applied now (or that nothing is, and why), the levers' values
    in effect and the context's token cost beside the scorer's budget, so a repair starts from the truth."""
    base = ("Edits apply to the files as they are now, with the diff above applied." if applied.diff else
            "Edits apply to the parent commit's files, as the step's source excerpts show them: send the whole "
            "change again, corrected.")
    return _template("researcher_repair.txt").substitute(
        error=error, applied=applied_text(applied), levers=levers_text(ctx, applied),
        context=context_cost_text(applied), base=base)


def applied_text(applied: Applied) -> str:
    """The diff now applied against the parent commit, or a plain statement that none of the attempt is."""
    if not applied.diff.strip():
        why = applied.not_applied or "the attempt changed no file"
        return f"Applied now: nothing. None of your attempt is applied ({why}); the files are the parent commit's."
    cut = applied.diff[:REPAIR_DIFF_CHARS].rstrip("\n")
    more = f"\n[... the rest of the diff is not shown: {len(applied.diff) - REPAIR_DIFF_CHARS} more characters]" \
        if len(applied.diff) > REPAIR_DIFF_CHARS else ""
    return f"Applied now (the diff against the parent commit, committed as your attempt):\n{cut}{more}"


def levers_text(ctx: ResearchContext, applied: Applied) -> str:
    """The lever list of the config in effect now (current values, ranges, effects)."""
    from memsys.config import MemoryConfig
    from research.levers.catalogue import render_levers

    if not isinstance(applied.memory, MemoryConfig):
        return "(the preset does not resolve with the base schema now: the levers' values are unknown)"
    return render_levers(applied.memory, reader_free=ctx.reader_free, withheld=ctx.withheld, absent=ctx.absent)


def context_cost_text(applied: Applied) -> str:
    """The last evaluation's mean context tokens per question beside the scorer's budget."""
    budget = ("the scorer sets no context budget" if applied.budget_tokens is None else
              f"the scorer counts at most {applied.budget_tokens:,} tokens of context per question "
              "(context_budget_tokens); context past it is not scored")
    if applied.context_tokens is None:
        return f"unknown (no evaluation to measure it yet); {budget}."
    of = f" ({applied.context_of})" if applied.context_of else ""
    return f"{applied.context_tokens:,.0f} context tokens per question on average in the last evaluation{of}; {budget}."
