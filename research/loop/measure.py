"""Screen, then evaluate, healing failures on the way (bounded; docs/design.md section 4).

The cascade of one candidate: a reader-free run on the run's own questions (cheap: no LLM) that
both catches crashes and hashes the reader's inputs per question; a candidate whose inputs equal
its parent's everywhere is stopped there ("no effect"). Only then does the reader run (when the
objective needs one): first on nested smaller samples (``research.loop.probe_samples``), where Optuna's
WilcoxonPruner pairs it with the best on the questions answered so far (research/loop/pruning.py); a
candidate clearly worse on one is decided on that evidence, and any other goes on to the full sample,
whose reader finds the answers so far in its cache. With a 1.5B
reader a LoCoMo question takes 10-20 s, so a candidate that loses a third of the score no longer costs
the 152-question run to find out. A failure at either stage is classified and healed by ``plan_heal``:
a repair edit from the researcher, reverting an edit that imported a missing module, backing off, a
smaller sample, or switching a refused endpoint to the embedded model.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from harness.errors import ConfigError, MemsysError
from research.evaluation.commit_evals import eval_dir
from research.evaluation.diagnosis import read_rows
from research.failures import FailureClass, _failure
from research.loop.changes import apply_proposal, commit_repair
from research.loop.healing import edits_without_import, plan_heal
from research.loop.outcomes import Measured, Screen, Stop, compare_inputs, screen_field
from research.loop.run_context import RunContext, Trial
from research.proposers.base import Applied, Proposal, mean_context_tokens


def measure(exp: Trial, prop: Proposal) -> Measured | Stop:
    run, rec = exp.run_ctx, exp.rec
    lc = run.setup.research.loop
    reader_free = run.setup.eval.options.reader == "none"
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
            out, stopped = _probe(exp, screen) if sample is None else (None, None)
            if stopped is not None:
                rec.screen = screen.to_dict()
                return stopped
            if out is None or out.ok:
                out = _evaluate(exp, sample, attempt)
        if out.ok or _no_change_result(out):
            rec.screen = screen.to_dict()
            return Measured(out, screen, read_rows(eval_dir(out)), probe=rec.probe)
        action = _heal(exp, prop, out, attempt, tried)
        if action is None:
            break
        if action == "smaller_sample":
            sample = lc.smoke_sample or "tiny"
        if action in ("repair_edit", "revert_import_edit", "smaller_sample"):
            screen = None  # new code or new questions: screen again
    if screen is not None:
        rec.screen = screen.to_dict()
    refused = (rec.failure or {}).get("cls")  # a repair that left the surface, or that carries benchmark data
    if refused in (FailureClass.FORBIDDEN_EDIT.value, FailureClass.LEAKAGE.value):
        stage = "leakage" if refused == FailureClass.LEAKAGE.value else "commit"
        return Stop("rejected", _failure(FailureClass(refused), rec.failure["message"], code_changed=True), stage)
    return Stop("failed", out.failure, "screen" if screen is None else "evaluate")


def _no_change_result(out: Any) -> bool:
    """Identical metrics flagged low-severity by the evaluator: a legitimate (if useless) result."""
    if out.failure and out.failure.cls == FailureClass.INVALID_METRIC and out.failure.severity == "low" and out.result:
        out.ok = True
        return True
    return False


def _screen(exp: Trial, sample: str | None, attempt: int) -> tuple[Any, Screen | None]:
    run, rec = exp.run_ctx, exp.rec
    run.stage(rec, "screen", f"reader-free on {sample or run.setup.eval.options.sample or 'full'}")
    t = time.perf_counter()
    out = run.hooks.run_eval(exp.wt, rec, sample, f"-screen{attempt}" if attempt else "-screen", reader="none",
                        code_changed=True, edited=getattr(exp, "edited", []))
    rec.durations["screen_s"] = rec.durations.get("screen_s", 0.0) + time.perf_counter() - t
    if not out.ok and not _no_change_result(out):
        return out, None
    field = screen_field(run.setup.eval.options.reader, run.setup.eval.objective)
    s = compare_inputs(read_rows(run.state.start_eval_dir), read_rows(eval_dir(out)), field)
    s.outcome = out
    return out, s


def probe_samples(run: RunContext) -> list[str]:
    """The nested samples a candidate is answered on before its full run, smallest first: a reader objective,
    and only the named samples smaller than the run's own (a run on ``small`` has nothing to save on ``small``)."""
    lc, ev = run.setup.research.loop, run.setup.eval
    if ev.options.reader == "none":
        return []
    sizes = ev.benchmark.samples
    own = sizes.get(ev.options.sample or "full", 0)  # 0: the whole split
    named = [(sizes[n], n) for n in dict.fromkeys(lc.probe_samples) if sizes.get(n)]  # 0: the whole split
    return [n for size, n in sorted(named) if own == 0 or size < own]


def _probe(exp: Trial, screen: Screen) -> tuple[Any, Measured | None]:
    """Answer the nested samples in turn; after each, Optuna's WilcoxonPruner (research/loop/pruning.py) decides
    whether the candidate is clearly worse than the best on the questions so far, and a stopped one is decided
    on that evidence (a Measured that says so). A batch that fails is the evaluation's failure (healed as such);
    the answers of batches passed come back from the reader's cache in the next one and in the full run."""
    from research.evaluation.stats import StatsInputError, per_question
    from research.loop.pruning import prune_verdict

    run, rec = exp.run_ctx, exp.rec
    names = probe_samples(run)
    best_rows = read_rows(run.state.best_eval_dir) if names else []
    if not names or not best_rows:
        return None, None
    lc = run.setup.research.loop
    try:
        best = per_question(rec.objective, best_rows)
    except (StatsInputError, ConfigError) as exc:
        rec.probe = {"sample": names[0], "error": str(exc), "stopped": False}
        return None, None
    out, looks = None, []
    for i, name in enumerate(names):
        run.stage(rec, "probe", f"{run.setup.eval.objective} with the reader on {name}, against the best")
        t = time.perf_counter()
        out = run.hooks.run_eval(exp.wt, rec, name, "-probe" if i == 0 else f"-probe-{name}", code_changed=True,
                                 edited=getattr(exp, "edited", []))
        rec.durations["probe_s"] = rec.durations.get("probe_s", 0.0) + time.perf_counter() - t
        if not out.ok and not _no_change_result(out):
            return out, None
        got = read_rows(eval_dir(out))
        try:
            test = run.evals.paired(rec.objective, got, best_rows)
            verdict = prune_verdict(per_question(rec.objective, got), best, sample=name, of=len(best),
                                    p_threshold=lc.probe_p, n_startup_steps=lc.probe_min_questions)
        except (StatsInputError, ConfigError) as exc:
            rec.probe = {"sample": name, "error": str(exc), "stopped": False}
            return out, None
        looks.append({"sample": name, "questions": verdict["questions"], "stopped": verdict["stopped"]})
        rec.probe = verdict | {"ci_low": test.ci_low, "ci_high": test.ci_high, "p_worse": test.p_worse, "looks": looks}
        if rec.probe["stopped"]:
            return out, Measured(out, screen, got, probe=rec.probe, probe_test=test)
    return out, None


def _evaluate(exp: Trial, sample: str | None, attempt: int) -> Any:
    run, rec = exp.run_ctx, exp.rec
    run.stage(rec, "evaluate", f"{run.setup.eval.objective} with the reader")
    t = time.perf_counter()
    out = run.hooks.run_eval(exp.wt, rec, sample, "" if attempt == 0 else f"-h{attempt}", code_changed=True,
                        edited=getattr(exp, "edited", []))
    rec.durations["eval_s"] = rec.durations.get("eval_s", 0.0) + time.perf_counter() - t
    return out


def _heal(exp: Trial, prop: Proposal, out: Any, attempt: int, tried: set[str]) -> str | None:
    """Carry out one healing action; None when the experiment should give up."""
    run, rec = exp.run_ctx, exp.rec
    lc = run.setup.research.loop
    f = out.failure
    rec.failure = f.to_dict()
    action = plan_heal(f, attempt, max_repairs=lc.max_repairs, remote_llm=run.setup.eval.llm.backend != "local",
                       tried=tried)
    entry = {"attempt": attempt + 1, "failure": f.cls.value, "action": action.action, "reason": action.reason}
    rec.healing.append(entry)
    run.hooks.on_event("heal", entry | {"experiment": rec.experiment_id})
    if action.action == "give_up":
        return None
    tried.add(action.action)
    ok = {"repair_edit": _repair, "revert_import_edit": _revert_import, "fewer_workers": _fewer_workers,
          "switch_local_llm": _switch_local}.get(action.action, lambda *a: True)(exp, prop, f, entry, attempt)
    entry.setdefault("result", "retrying")
    return action.action if ok else None


def applied_now(run: RunContext, parent: str, commit: str, *, not_applied: str = "") -> Applied:
    """What a repair is asked against: the diff ``commit`` carries over ``parent`` (none when ``not_applied``
    says why), its memory config, and the parent's evaluation's context cost beside the scorer's budget
    (the failed attempt has no scored rows)."""
    diff = "" if not_applied else run.ws.diff(parent, commit)[0]
    return Applied(diff, not_applied, run.commits.config_at(commit),
                   mean_context_tokens(read_rows(run.state.start_eval_dir)), "the parent commit's evaluation",
                   run.setup.eval.options.context_budget_tokens)


def _repair(exp: Trial, prop: Proposal, f: Any, entry: dict[str, Any], attempt: int) -> bool:
    run, rec = exp.run_ctx, exp.rec
    applied = applied_now(run, rec.parent_commit, rec.commit)
    try:
        rep = exp.proposer.repair(exp.ctx, prop, f"{f.message} at {f.file}:{f.line}" if f.file else f.message, applied)
    except MemsysError as exc:
        entry["result"] = f"repair proposal failed: {exc}"
        return False
    if rep is None:
        entry["result"] = "proposer cannot repair"
        return False
    changed, err = apply_proposal(exp.wt, run.preset, rep)
    if err is not None:
        run.ws.restore(exp.wt)  # a part may have been written (overrides before edits): back to the commit
        entry["result"] = f"repair did not apply: {err}"
        return True
    rec.edits += [asdict(e) for e in rep.edits]
    rec.config_overrides += rep.config_overrides
    rec.tokens += rep.tokens
    if not commit_repair(run.ws, run.commits, exp.wt, rec, entry, f"{rec.experiment_id}: repair {attempt + 1}"):
        return False
    if not _screened(exp, entry):
        return False
    exp.edited = sorted(set(getattr(exp, "edited", [])) | set(changed))
    return True


def _screened(exp: Trial, entry: dict[str, Any]) -> bool:
    """A repair is a new commit: the leakage screen sees it before it is evaluated."""
    leak = exp.leakage()
    if leak is None:
        return True
    entry["result"] = "refused: the repair carries benchmark data"
    exp.rec.failure = leak.failure.to_dict() | {"stage": "leakage"}
    return False


def _revert_import(exp: Trial, prop: Proposal, f: Any, entry: dict[str, Any], attempt: int) -> bool:
    run, rec = exp.run_ctx, exp.rec
    keep = edits_without_import(prop.edits, f.message)
    if keep is None:
        entry["result"] = "no edit introduced that import"
        return False
    run.ws.restore(exp.wt, rec.parent_commit)
    prop.edits = keep
    apply_proposal(exp.wt, run.preset, prop)
    rec.edits = [asdict(e) for e in keep]
    return commit_repair(run.ws, run.commits, exp.wt, rec, entry, f"{rec.experiment_id}: revert import edit")


def _fewer_workers(exp: Trial, prop: Proposal, f: Any, entry: dict[str, Any], attempt: int) -> bool:
    exp.run_ctx.evals.workers_override = 1  # for this experiment only (the run resets it)
    time.sleep(min(5.0 * (attempt + 1), 30.0))
    return True


def _switch_local(exp: Trial, prop: Proposal, f: Any, entry: dict[str, Any], attempt: int) -> bool:
    run = exp.run_ctx
    if not run.setup.research.loop.local_fallback:
        entry["result"] = "local fallback off (research.loop.local_fallback=false): restart with llm=local"
        return False
    entry["result"] = run.hooks.switch_to_local()
    return True
