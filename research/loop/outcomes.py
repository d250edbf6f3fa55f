"""What a stage of an experiment hands on: the typed results of propose, screen and measure.

Why apart from the stages: the experiment (research/loop/experiment.py), the screen-evaluate-heal cascade
(research/loop/measure.py), a round (research/loop/round.py) and the commit view all speak these records;
kept here, none of them imports another to get them, so the loop's modules form no import cycle.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from research.failures import Failure, FailureClass, _failure


@dataclass
class Stop:
    """An experiment that ends before a decision on a measured value."""

    decision: str  # failed | rejected
    failure: Failure
    stage: str
    known_value: float | None = None  # rejected repeats: the value already measured


@dataclass
class Screen:
    """The dynamic screen's verdict: how many questions' reader inputs differ from the parent's."""

    questions: int
    changed: int
    comparable: bool  # the parent's evaluation carries input digests
    outcome: Any = None  # the reader-free EvalOutcome

    @classmethod
    def skipped(cls) -> "Screen":
        """The screen is off (``research.loop.screen=false``): nothing compared, so never "no effect"."""
        return cls(0, 0, False)

    @property
    def no_effect(self) -> bool:
        return self.comparable and self.questions > 0 and self.changed == 0

    def to_dict(self) -> dict[str, Any]:
        d = {"questions": self.questions, "changed": self.changed, "comparable": self.comparable,
             "verdict": "no effect" if self.no_effect else ("changed" if self.comparable else "not comparable")}
        if self.outcome is not None and self.outcome.result:
            m = self.outcome.result["metrics"]
            d |= {k: m[k] for k in ("context_recall", "recall_at_10", "context_tokens") if k in m}
        return d


@dataclass
class Measured:
    outcome: Any  # EvalOutcome of the objective's evaluation (the probe's, when it stopped the candidate)
    screen: Screen
    rows: list[dict[str, Any]] = field(default_factory=list)
    probe: dict[str, Any] = field(default_factory=dict)  # the early stop's verdict (research.loop.pruning.prune_verdict)
    probe_test: Any = None  # its PairedTest against the best on the probe's questions

    @property
    def stopped_early(self) -> bool:
        return bool(self.probe.get("stopped"))


def digests(rows: list[dict[str, Any]], field: str = "input_sha256") -> dict[str, str]:
    """Per question, what the objective can see: the reader's input digest, or (reader-free
    objectives) the context's turn ids as the scorer counted them."""
    if field == "context_set":  # context_recall counts which turns are in the (budget-cut) context, not their order
        return {r["question_id"]: "\x1f".join(sorted(set(r.get("context_ids") or []))) or "(empty)" for r in rows}
    if field == "context_ids":
        return {r["question_id"]: "\x1f".join([*(r.get("context_ids") or []), "|", *(r.get("retrieved_ids") or [])])
                for r in rows}
    return {r["question_id"]: r.get(field) or "" for r in rows}


def screen_field(reader: str, objective: str) -> str:
    """What the objective can see, per question: the reader's input (reader runs), the set of context
    turns (context_recall), else the ordered context and ranking (recall_at_k and the like)."""
    if reader != "none":
        return "input_sha256"
    return "context_set" if objective == "context_recall" else "context_ids"


def compare_inputs(parent_rows: list[dict[str, Any]], rows: list[dict[str, Any]], field: str = "input_sha256") -> Screen:
    """Per-question inputs of a candidate against its parent's, on the same questions."""
    before, after = digests(parent_rows, field), digests(rows, field)
    comparable = bool(before) and all(before.values()) and all(after.values()) and set(after) <= set(before)
    changed = sum(1 for q, h in after.items() if before.get(q) != h)
    return Screen(len(after), changed, comparable)


def held_failure(moved: list[str]) -> Failure:
    """A proposal that moves what ``research.fixed_levers`` holds: outside this run's surface, refused."""
    return _failure(FailureClass.FORBIDDEN_EDIT, f"{'; '.join(moved)}: research.fixed_levers keeps "
                    f"{'it' if len(moved) == 1 else 'them'} at the run's value", code_changed=True)


def effective_key(code_tree: str, cfg_key: str) -> str:
    return hashlib.sha256(f"{code_tree}:{cfg_key}".encode()).hexdigest()[:20]
