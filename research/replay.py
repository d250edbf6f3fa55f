"""Replay a recorded trajectory: re-apply its experiments in order from its base commit.

No LLM is asked for proposals: the recorded edits and config overrides are applied
to fresh worktrees, each step is re-evaluated (optionally on another split, benchmark
or LLM backbone), and a new run links to the original with, per step, the recorded
metric, the replayed one, the delta and whether the original decision still holds.
The decisions are re-taken with the original run's rule (its loop settings and noise
floor) and failures count against the state the way the loop counts them, so a
decision that differs is a real difference, not a different rule.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

from harness.atomic import atomic_write_json
from harness.paths import runs_dir
from research import decide as D
from research.errors import ForbiddenEditError, RunStateError
from research.proposers.base import Proposal
from research.state import LoopState
from research.trajectory import Edit, ExperimentRecord, append_record, read_trajectory

ONLY = ("all", "accepted")


def _key(override: str) -> str:
    """``++llm.base_url=x`` and ``llm.base_url=y`` set the same key."""
    return override.split("=", 1)[0].lstrip("+~")


def replay_run(run_id: str, overrides: Sequence[str] = (), *, only: str = "all", console: Any = None,
               new_run_id: str | None = None, llm_opener: Any = None, sandbox: Any = None) -> Path:
    from contextlib import ExitStack

    from research.config import load_run_setup
    from research.guarantees import check_sandbox
    from research.loop import ResearchLoop

    if only not in ONLY:
        raise RunStateError(f"replay --only must be one of {', '.join(ONLY)}, got {only!r}")
    src = runs_dir() / run_id
    if not (src / "config.json").exists():
        known = sorted(p.name for p in runs_dir().iterdir() if (p / "trajectory.jsonl").exists()) if runs_dir().exists() else []
        raise RunStateError(f"no run '{run_id}' in {runs_dir()}; known: {', '.join(known) or 'none'}")
    records, warnings = read_trajectory(src)
    state = LoopState.load(src)
    raw = json.loads((src / "config.json").read_text())
    # the replay's own overrides (split=test, llm=..., benchmark=...) win over the recorded ones
    mine = {_key(x) for x in overrides}
    base_overrides = [o for o in raw.get("overrides", []) if _key(o) not in mine]
    setup = load_run_setup([*base_overrides, *overrides, "research.proposer=optuna"], optimizing=False)
    setup.research.repo = state.repo
    rid = new_run_id or f"replay-{run_id}-{datetime.now():%H%M%S}"
    if (runs_dir() / rid / "trajectory.jsonl").exists():
        raise RunStateError(f"run '{rid}' exists already; choose another replay id")
    steps = [r for r in records if only == "all" or r.decision in ("baseline", "proceed")]
    loop = ResearchLoop(setup, rid, llm_opener=llm_opener, sandbox=sandbox)
    loop.setup.research.proposer = "optuna"  # no LLM proposals in a replay
    loop.run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(loop.run_dir / "config.json", {"config": setup.eval.raw | {"research": asdict(setup.research)},
                                                      "overrides": setup.overrides, "replay_of": run_id})
    loop.ws.init_refs(state.base_commit)
    loop.state = LoopState(rid, state.repo, state.base_commit, state.base_commit)
    loop.state.noise_floor = state.noise_floor  # the original's rule decides again
    loop.state.sandbox = check_sandbox(loop._sandbox_obj(), allow_weak=setup.research.sandbox.allow_weak)
    loop.state.save(loop.run_dir)
    out_steps: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    with ExitStack() as stack:
        if setup.eval.eval.reader == "llm":
            loop._open_llm(stack)
        try:
            for rec in steps:
                step = _replay_step(loop, rec)
                out_steps.append(step)
                loop.state.elapsed_s = time.perf_counter() - t0
                loop.state.save(loop.run_dir)
                if console:
                    console.print(f"{rec.experiment_id}: recorded {step['recorded']} replayed {step['replayed']} "
                                  f"decision {rec.decision} -> {step['replayed_decision']} ({step['status']})")
        finally:
            loop.ws.cleanup()
    wall = time.perf_counter() - t0
    atomic_write_json(loop.run_dir / "replay.json", {
        "original_run_id": run_id, "only": only, "overrides": list(overrides), "warnings": warnings,
        "objective": setup.eval.objective, "wall_s": wall, "original_wall_s": state.elapsed_s, "steps": out_steps,
    })
    st = loop.state
    st.elapsed_s, st.status = wall, "finished"
    st.stop_reason = f"replay of {run_id}: {len(out_steps)} step(s)"
    st.save(loop.run_dir)
    return loop.run_dir


def _replay_step(loop: Any, rec: ExperimentRecord) -> dict[str, Any]:
    from research.failures import FailureClass, _failure

    st = loop.state
    lc = loop.setup.research.loop
    t0 = time.perf_counter()
    new = ExperimentRecord(loop.run_id, rec.index, rec.experiment_id, "replay", st.best_commit,
                           hypothesis=rec.hypothesis, discovery_type=rec.discovery_type,
                           expected_effect=rec.expected_effect, edits=rec.edits,
                           config_overrides=rec.config_overrides, objective=loop.setup.eval.objective,
                           best_before=st.best_value if rec.index > 0 else None,
                           started=datetime.now().isoformat(timespec="seconds"))
    step = {"index": rec.index, "experiment_id": rec.experiment_id, "recorded": rec.objective_value,
            "recorded_decision": rec.decision, "replayed": None, "delta": None, "replayed_decision": None,
            "holds": None, "status": "ok"}
    if rec.index > 0 and not rec.edits and not rec.config_overrides:
        # failed before anything was proposed (unparseable reply, LLM error): nothing to re-apply;
        # it still counts against the state as it did in the original run
        why = (rec.failure or {}).get("message") or "no edits and no config overrides recorded"
        step["status"] = f"skipped: nothing to re-apply ({' '.join(str(why).split())[:200]})"
        new.failure, new.decision, new.notes = rec.failure, "failed", step["status"]
        _record(loop, new, count_failure=True, t0=t0)
        return step
    wt = loop.ws.create(rec.experiment_id, st.best_commit)
    new.branch = wt.branch
    try:
        if rec.index > 0:
            prop = Proposal(rec.hypothesis, rec.discovery_type or "", "", [Edit(**e) for e in rec.edits],
                            list(rec.config_overrides))
            _, err = loop._apply(wt, prop)
            if err is not None:
                forbidden = isinstance(err, ForbiddenEditError)
                cls = FailureClass.FORBIDDEN_EDIT if forbidden else FailureClass.FORMAT_MISMATCH
                step["status"] = f"rejected: {err}" if forbidden else f"edit no longer applies: {err}"
                new.failure = _failure(cls, str(err), code_changed=True).to_dict() | {"stage": "apply"}
                new.decision = "rejected" if forbidden else "failed"
                if forbidden:  # refused before evaluation, as the loop does: the decision can be compared
                    step["replayed_decision"], step["holds"] = "rejected", rec.decision == "rejected"
                new.commit = loop.ws.commit(wt, f"replay {rec.experiment_id} (failed to apply)")
                _record(loop, new, count_failure=True, t0=t0)
                return step
        new.commit = loop.ws.commit(wt, f"replay {rec.experiment_id}: {rec.hypothesis[:50]}")
        if rec.index > 0:
            new.diff, new.diff_stats = loop.ws.diff(st.best_commit, new.commit)
        out = loop._run_eval(wt, rec.experiment_id, None, rec.index > 0, [])
    finally:
        loop.ws.remove(wt.path)
    new.durations["eval_s"] = time.perf_counter() - t0
    if (not out.ok and out.failure and out.failure.cls == FailureClass.INVALID_METRIC
            and out.failure.severity == "low" and out.result):
        new.notes, out.ok = out.failure.message, True  # identical metrics: "no effect", as the loop takes it
    if not out.ok:
        step["status"] = f"evaluation failed: {out.failure.cls.value}: {out.failure.message}"
        step["replayed_decision"] = "failed"
        step["holds"] = rec.decision == "failed"
        new.failure, new.decision = out.failure.to_dict(), "failed"
        _record(loop, new, count_failure=rec.index > 0, t0=t0)
        return step
    value = out.objective_value
    new.objective_value, new.metrics, new.eval_run_id = value, out.result["metrics"], out.result["run_id"]
    step["replayed"] = value
    if rec.objective_value is not None and value is not None:
        step["delta"] = value - rec.objective_value
    if rec.index == 0:
        decision = "baseline"
    elif value is None or st.best_value is None:
        decision = "failed"
        new.failure = {"cls": "invalid_metric", "message": "no objective value (or no baseline to compare with)"}
    else:
        ds = D.DecisionState(st.best_value, st.consecutive_degradations, st.iterations_on_hypothesis, st.pivots)
        d = D.decide(ds, value, min_rel_improvement=lc.min_rel_improvement, noise_floor=st.noise_floor,
                     max_iterations=lc.max_iterations_per_hypothesis, degradations_to_pivot=lc.degradations_to_pivot)
        decision, new.delta, new.delta_rel = d.kind, d.delta, d.delta_rel
        new.notes = f"{new.notes}; {d.reason}" if new.notes else d.reason  # keep a no-effect note, as the loop does
        ns = D.apply_decision(ds, d, value)
        st.consecutive_degradations, st.iterations_on_hypothesis, st.pivots = (
            ns.consecutive_degradations, ns.iterations_on_hypothesis, ns.pivots)
    new.decision = decision
    step["replayed_decision"] = decision
    step["holds"] = decision == rec.decision
    if decision in ("baseline", "proceed"):
        st.best_value, st.best_commit, st.best_metrics = value, new.commit, new.metrics
        st.best_eval_dir = str(loop.run_dir / "evals" / rec.experiment_id / new.eval_run_id)
        loop.ws.move_best(new.commit)
    _record(loop, new, count_failure=decision == "failed", t0=t0)
    return step


def _record(loop: Any, rec: ExperimentRecord, *, count_failure: bool = False, t0: float | None = None) -> None:
    if count_failure and rec.index > 0:
        loop._count_failure(rec)  # the loop's own accounting: non-infrastructure failures are degradations
    if t0 is not None:
        rec.durations["total_s"] = time.perf_counter() - t0
    rec.finished = datetime.now().isoformat(timespec="seconds")
    append_record(loop.run_dir, rec)
    loop.records.append(rec)
    loop.state.next_index = rec.index + 1
