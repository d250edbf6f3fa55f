"""The LLM researcher: a structured proposal (JSON schema) per step; prompts are files."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from string import Template
from typing import Any

from research.errors import ProposalFormatError
from research.proposers.base import Proposal, Proposer, ResearchContext
from research.trajectory import DISCOVERY_TYPES, Edit, ExperimentRecord

PROMPTS = Path(__file__).resolve().parents[1] / "prompts"

PROPOSAL_SCHEMA: dict[str, Any] = {
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

_MODES = {
    "new": "Propose a new hypothesis.",
    "iterate": "The last attempt on the current hypothesis was ambiguous or worse: refine the SAME hypothesis ($hyp) with a different concrete change.",
    "pivot": "Two attempts degraded the objective: the code is back at the best commit. Propose a NEW direction, different from the recent hypotheses.",
}


def _template(name: str) -> Template:
    return Template((PROMPTS / name).read_text(encoding="utf-8"))


def history_lines(history: list[ExperimentRecord], limit: int = 8) -> str:
    rows = []
    for r in history[-limit:]:
        val = "failed" if r.objective_value is None else f"{r.objective_value:.4f}"
        delta = "" if r.delta is None else f" ({r.delta:+.4f})"
        what = r.hypothesis or "baseline"
        ch = "; ".join(r.config_overrides)[:120]
        fail = f" failure={r.failure.get('cls')}: {r.failure.get('message', '')[:80]}" if r.failure else ""
        rows.append(f"- {r.experiment_id} [{r.decision}] {val}{delta} {r.discovery_type or ''}: {what[:160]}"
                    + (f" | overrides: {ch}" if ch else "") + fail)
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
    if not edits and not overrides:
        raise ProposalFormatError("proposal changes nothing (no edits, no config_overrides)")
    return Proposal(str(data.get("hypothesis", "")).strip() or "(no hypothesis)", dt,
                    str(data.get("expected_effect", "")), edits, overrides)


def proposal_json(p: Proposal) -> dict[str, Any]:
    """A proposal in the schema's shape (what the model is shown as its own earlier reply)."""
    return {"hypothesis": p.hypothesis, "discovery_type": p.discovery_type, "expected_effect": p.expected_effect,
            "config_overrides": list(p.config_overrides),
            "edits": [asdict(e) for e in p.edits]}


class LLMProposer(Proposer):
    name = "llm"

    def __init__(self, llm: Any, max_tokens: int = 1024):
        self.llm, self.max_tokens = llm, max_tokens

    def _ask(self, user: str, *, earlier: list[dict[str, str]] | None = None,
             temperature: float | None = None) -> Proposal:
        from harness.errors import LLMResponseFormatError

        system = (PROMPTS / "researcher_system.txt").read_text(encoding="utf-8")
        messages = [{"role": "system", "content": system}, *(earlier or []), {"role": "user", "content": user}]
        try:
            reply = self.llm.chat(messages, json_schema=PROPOSAL_SCHEMA, max_tokens=self.max_tokens,
                                  temperature=temperature)
        except LLMResponseFormatError as exc:
            raise ProposalFormatError(f"proposal is not valid JSON: {exc}") from exc
        prop = parse_proposal(reply.parsed or {})
        prop.tokens = reply.prompt_tokens + reply.completion_tokens
        prop.cost_usd = reply.cost_usd
        return prop

    def step_prompt(self, ctx: ResearchContext) -> str:
        mode = Template(_MODES[ctx.mode]).safe_substitute(hyp=repr(ctx.current_hypothesis or ""))
        failures = "\n".join(
            f"- {q['question']} | {q['gold']} | {q['prediction'][:80]} | {q['category']}" for q in ctx.failed_questions
        ) or "- (none recorded)"
        files = "\n\n".join(f"--- {p} ---\n{c}" for p, c in ctx.files.items()) or "(none)"
        user = _template("researcher_step.txt").substitute(
            objective=ctx.objective, best=f"{ctx.best_value:.4f}", history=history_lines(ctx.history),
            mode_instructions=mode, diagnosis=ctx.diagnosis or "(none yet)", preset=ctx.preset, knobs=ctx.knobs, failures=failures, files=files,
        )
        return user

    def propose(self, ctx: ResearchContext) -> Proposal:
        return self._ask(self.step_prompt(ctx))

    def reconsider(self, ctx: ResearchContext, proposal: Proposal, dup: str, outcome: str,
                   tried: list[str], temperature: float) -> Proposal:
        """Ask again after a proposal that repeats ``dup``, as a follow-up turn of the same
        conversation (the model sees its own reply), sampled at ``temperature``."""
        earlier = [{"role": "user", "content": self.step_prompt(ctx)},
                   {"role": "assistant", "content": json.dumps(proposal_json(proposal))}]
        user = _template("researcher_duplicate.txt").substitute(
            dup=dup, outcome=outcome, tried="\n".join(f"- {t}" for t in tried) or "- (none)")
        return self._ask(user, earlier=earlier, temperature=temperature)

    def repair(self, ctx: ResearchContext, proposal: Proposal, error: str, diff: str) -> Proposal | None:
        user = _template("researcher_repair.txt").substitute(error=error, diff=diff[:4000] or "(no diff)")
        rep = self._ask(user)
        rep.hypothesis, rep.discovery_type = proposal.hypothesis, proposal.discovery_type
        return rep
