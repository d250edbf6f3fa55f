"""The check before the best ref moves: a gain must hold on dev questions the run was not scored on.

Why: a run that accepts on its own sample climbs that sample's noise. The check evaluates the candidate
and the current best on the complement of the run's sample in dev (disjoint questions, same split, so no
test-split question is spent) and keeps the decision only if the paired difference there is not worse.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from research.evaluation.commit_evals import eval_dir
from research.evaluation.diagnosis import read_rows
from research.loop import decide as D
from research.loop.run_context import RunContext


def check_on_complement(run: RunContext, exp: Any, d: D.Decision) -> D.Decision:
    """``d`` when the gain holds on the disjoint dev slice (or the check is off or impossible), else an iterate."""
    rec, lc = exp.rec, run.setup.research.loop
    sample = run.setup.eval.options.sample
    if not lc.check:
        return d
    if sample in (None, "", "full"):
        rec.check = {"skipped": "the run's sample is the whole dev split: no disjoint slice left"}
        return d
    run.stage(rec, "check", f"complement of {sample} on dev")
    t = time.perf_counter()
    cand = run.hooks.run_eval(exp.wt, rec, None, "-check", complement=True)
    best_rows = _best_rows(run)
    rec.durations["check_s"] = time.perf_counter() - t
    if not cand.ok or best_rows is None:
        rec.check = {"passed": False, "reason": "the check evaluation failed"}
        return dataclasses.replace(d, kind="iterate", reason=f"iterate: {d.reason}, but the check on the disjoint "
                                   "dev slice failed to run")
    test = run.evals.paired(rec.objective, read_rows(eval_dir(cand)), best_rows)
    held = test.mean_delta >= 0 and test.p_worse >= lc.alpha
    rec.check = test.to_dict() | {"passed": held, "value": cand.objective_value,
                                  "eval_dir": run.relative(eval_dir(cand))}
    if held:
        return dataclasses.replace(d, reason=f"{d.reason}; held on the disjoint dev slice ({test.mean_delta:+.4f})")
    return dataclasses.replace(d, kind="iterate", reason=f"iterate: the gain did not hold on the disjoint dev slice "
                               f"({test.mean_delta:+.4f}, p_worse={test.p_worse:.3g})")


def _best_rows(run: RunContext) -> list[dict[str, Any]] | None:
    """The current best's rows on the same slice (a scratch worktree: no branch is kept)."""
    best = run.state.best_commit
    wt = run.ws.create("check-best", best)
    try:
        out = run.hooks.run_eval(wt, "check-best", None, f"-{best[:10]}", complement=True, code_changed=False)
    finally:
        run.ws.discard(wt)
    return read_rows(eval_dir(out)) if out.ok else None
