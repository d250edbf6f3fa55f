"""Screen, then evaluate, healing failures on the way (bounded; DESIGN.md section 4).

The cascade of one candidate: a reader-free run on the run's own questions (cheap: no LLM) that
both catches crashes and hashes the reader's inputs per question; a candidate whose inputs equal
its parent's everywhere is stopped there ("no effect"). Only then does the reader run (when the
objective needs one). A failure at either stage is classified and healed by ``plan_heal``: a
repair edit from the researcher, reverting an edit that imported a missing module, backing off,
a smaller sample, or switching a refused endpoint to the embedded model.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from harness.errors import MemsysError
from research.experiment import Measured, Screen, Stop, compare_inputs, screen_field
from research.failures import FailureClass, _failure
from research.healing import edits_without_import, plan_heal
from research.proposers.base import Proposal

if TYPE_CHECKING:
    from research.experiment import Experiment


def measure(exp: "Experiment", prop: Proposal) -> Measured | Stop:
    loop, rec = exp.loop, exp.rec
    lc = loop.setup.research.loop
    reader_free = loop.setup.eval.eval.reader == "none"
    sample: str | None = None
    tried: set[str] = set()
    screen: Screen | None = None
    out = None
    for attempt in range(lc.max_repairs + 1):
        if screen is None and not lc.screen and not reader_free:
            screen = Screen.skipped()
        if screen is None:
            out, screen = _screen(exp, sample, attempt)
            if screen is not None and screen.no_effect and lc.screen:
                rec.screen = screen.to_dict()
                return Stop("rejected", _failure(FailureClass.NO_EFFECT, f"no effect: what the objective sees is identical "
                                                 f"to the parent's on all {screen.questions} questions",
                                                 code_changed=True), "screen", rec.best_before)
        if screen is not None and not reader_free:
            out = _evaluate(exp, sample, attempt)
        if out.ok or _no_change_result(out):
            rec.screen = screen.to_dict()
            return Measured(out, screen, loop.rows(loop.eval_dir(out)))
        action = _heal(exp, prop, out, attempt, tried)
        if action is None:
            break
        if action == "smaller_sample":
            sample = lc.smoke_sample or "tiny"
        if action in ("repair_edit", "revert_import_edit", "smaller_sample"):
            screen = None  # new code or new questions: screen again
    if screen is not None:
        rec.screen = screen.to_dict()
    if (rec.failure or {}).get("cls") == FailureClass.FORBIDDEN_EDIT.value:  # a repair that left the surface
        return Stop("rejected", _failure(FailureClass.FORBIDDEN_EDIT, rec.failure["message"], code_changed=True), "commit")
    return Stop("failed", out.failure, "screen" if screen is None else "evaluate")


def _no_change_result(out: Any) -> bool:
    """Identical metrics flagged low-severity by the evaluator: a legitimate (if useless) result."""
    if out.failure and out.failure.cls == FailureClass.INVALID_METRIC and out.failure.severity == "low" and out.result:
        out.ok = True
        return True
    return False


def _screen(exp: "Experiment", sample: str | None, attempt: int) -> tuple[Any, Screen | None]:
    loop, rec = exp.loop, exp.rec
    loop.stage(rec, "screen", f"reader-free on {sample or loop.setup.eval.eval.sample or 'full'}")
    t = time.perf_counter()
    out = loop.run_eval(exp.wt, rec, sample, f"-screen{attempt}" if attempt else "-screen", reader="none",
                        code_changed=True, edited=getattr(exp, "edited", []))
    rec.durations["screen_s"] = rec.durations.get("screen_s", 0.0) + time.perf_counter() - t
    if not out.ok and not _no_change_result(out):
        return out, None
    field = screen_field(loop.setup.eval.eval.reader, loop.setup.eval.objective)
    s = compare_inputs(loop.rows(loop.state.start_eval_dir), loop.rows(loop.eval_dir(out)), field)
    s.outcome = out
    return out, s


def _evaluate(exp: "Experiment", sample: str | None, attempt: int) -> Any:
    loop, rec = exp.loop, exp.rec
    loop.stage(rec, "evaluate", f"{loop.setup.eval.objective} with the reader")
    t = time.perf_counter()
    out = loop.run_eval(exp.wt, rec, sample, "" if attempt == 0 else f"-h{attempt}", code_changed=True,
                        edited=getattr(exp, "edited", []))
    rec.durations["eval_s"] = rec.durations.get("eval_s", 0.0) + time.perf_counter() - t
    return out


def _heal(exp: "Experiment", prop: Proposal, out: Any, attempt: int, tried: set[str]) -> str | None:
    """Carry out one healing action; None when the experiment should give up."""
    loop, rec = exp.loop, exp.rec
    lc = loop.setup.research.loop
    f = out.failure
    rec.failure = f.to_dict()
    action = plan_heal(f, attempt, max_repairs=lc.max_repairs, remote_llm=loop.setup.eval.llm.backend != "local",
                       tried=tried)
    entry = {"attempt": attempt + 1, "failure": f.cls.value, "action": action.action, "reason": action.reason}
    rec.healing.append(entry)
    loop.on_event("heal", entry | {"experiment": rec.experiment_id})
    if action.action == "give_up":
        return None
    tried.add(action.action)
    ok = {"repair_edit": _repair, "revert_import_edit": _revert_import, "fewer_workers": _fewer_workers,
          "switch_local_llm": _switch_local}.get(action.action, lambda *a: True)(exp, prop, f, entry, attempt)
    entry.setdefault("result", "retrying")
    return action.action if ok else None


def _repair(exp: "Experiment", prop: Proposal, f: Any, entry: dict[str, Any], attempt: int) -> bool:
    loop, rec = exp.loop, exp.rec
    diff, _ = loop.ws.diff(rec.parent_commit, rec.commit)
    try:
        rep = exp.proposer.repair(exp.ctx, prop, f"{f.message} at {f.file}:{f.line}" if f.file else f.message, diff)
    except MemsysError as exc:
        entry["result"] = f"repair proposal failed: {exc}"
        return False
    if rep is None:
        entry["result"] = "proposer cannot repair"
        return False
    changed, err = loop.apply_proposal(exp.wt, rep)
    if err is not None:
        entry["result"] = f"repair did not apply: {err}"
        return True
    rec.edits += [asdict(e) for e in rep.edits]
    rec.config_overrides += rep.config_overrides
    rec.tokens += rep.tokens
    if not loop.commit_repair(exp.wt, rec, entry, f"{rec.experiment_id}: repair {attempt + 1}"):
        return False
    exp.edited = sorted(set(getattr(exp, "edited", [])) | set(changed))
    return True


def _revert_import(exp: "Experiment", prop: Proposal, f: Any, entry: dict[str, Any], attempt: int) -> bool:
    loop, rec = exp.loop, exp.rec
    keep = edits_without_import(prop.edits, f.message)
    if keep is None:
        entry["result"] = "no edit introduced that import"
        return False
    loop.reset_to(exp.wt, rec.parent_commit)
    prop.edits = keep
    loop.apply_proposal(exp.wt, prop)
    rec.edits = [asdict(e) for e in keep]
    return loop.commit_repair(exp.wt, rec, entry, f"{rec.experiment_id}: revert import edit")


def _fewer_workers(exp: "Experiment", prop: Proposal, f: Any, entry: dict[str, Any], attempt: int) -> bool:
    exp.loop.workers_override = 1  # for this experiment only (the loop resets it)
    time.sleep(min(5.0 * (attempt + 1), 30.0))
    return True


def _switch_local(exp: "Experiment", prop: Proposal, f: Any, entry: dict[str, Any], attempt: int) -> bool:
    loop = exp.loop
    if not loop.setup.research.loop.local_fallback:
        entry["result"] = "local fallback off (research.loop.local_fallback=false): restart with llm=local"
        return False
    entry["result"] = loop.switch_to_local()
    return True
