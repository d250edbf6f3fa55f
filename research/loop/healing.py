"""Targeted, bounded fixes for failed experiments (docs/design.md section 4, self-healing).

``plan_heal`` maps a classified failure to one action; the loop carries it out and
records it. Infrastructure failures (our side) never count as a degradation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from research.failures import Failure, FailureClass
from research.journal.trajectory import Edit


@dataclass(frozen=True)
class HealAction:
    action: str  # repair_edit | switch_local_llm | fewer_workers | smaller_sample | revert_import_edit | retry | give_up
    reason: str


def plan_heal(failure: Failure, attempt: int, *, max_repairs: int, remote_llm: bool,
              tried: set[str]) -> HealAction:
    if attempt >= max_repairs:
        return HealAction("give_up", f"{max_repairs} repair cycles used")
    c = failure.cls
    if c == FailureClass.AUTH and remote_llm and "switch_local_llm" not in tried:
        return HealAction("switch_local_llm", "endpoint refused the key: continue on the embedded local model")
    if c == FailureClass.RATE_LIMIT:
        if "fewer_workers" in tried and attempt >= 2:
            return HealAction("give_up", "still rate limited after backing off twice")
        return HealAction("fewer_workers", "rate limited: back off and evaluate with one worker")
    if c in (FailureClass.RUNTIME_ERROR, FailureClass.SYNTAX_ERROR):
        return HealAction("repair_edit", "the researcher gets the traceback and the diff")
    if c == FailureClass.DEPENDENCY:
        return HealAction("revert_import_edit", "drop the edit that introduced the missing import")
    if c in (FailureClass.TIMEOUT, FailureClass.OOM_KILLED):
        if "smaller_sample" in tried:
            return HealAction("give_up", "still failing on the smaller sample")
        return HealAction("smaller_sample", "retry once on the smoke-test sample")
    if c in (FailureClass.FORMAT_MISMATCH, FailureClass.API_ERROR, FailureClass.INFRASTRUCTURE):
        if "retry" in tried:
            return HealAction("give_up", "failed again after a retry")
        return HealAction("retry", "transient or output-format failure: retry once")
    if c == FailureClass.IDENTICAL_CONDITIONS:
        return HealAction("give_up", "identical_conditions are healed before evaluation (re-asked, then skipped)")
    return HealAction("give_up", f"no targeted fix for {c.value}")


_MISSING_RE = re.compile(r"No module named '([\w.]+)'")


def edits_without_import(edits: list[Edit], message: str) -> list[Edit] | None:
    """The edits minus those that introduce an import of the missing module (None if none did)."""
    m = _MISSING_RE.search(message)
    if not m:
        return None
    mod = m.group(1).split(".")[0]
    pat = re.compile(rf"^\s*(import\s+{re.escape(mod)}\b|from\s+{re.escape(mod)}[\s.])", re.M)
    keep = [e for e in edits if not pat.search(e.replace)]
    return keep if len(keep) < len(edits) else None
