"""Replay a recorded trajectory: re-apply its experiments in order from its base commit.

No LLM is asked for proposals: the recorded edits and config overrides are applied
to fresh worktrees, each step is re-evaluated (optionally on another split, benchmark
or LLM backbone), and a new run links to the original with, per step, the recorded
metric, the replayed one, the delta and whether the original decision still holds.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

from memsys.paths import runs_dir
from memsys.store.atomic import atomic_write_json
from research import decide as D
from research.config import run_setup_from_dict
from research.errors import EditApplyError, ForbiddenEditError, RunStateError
from research.proposers.base import Proposal
from research.state import LoopState
from research.trajectory import Edit, ExperimentRecord, append_record, read_trajectory


def replay_run(run_id: str, overrides: Sequence[str] = (), *, only: str = "all", console: Any = None,
               new_run_id: str | None = None, llm_opener: Any = None, sandbox: Any = None) -> Path:
    from contextlib import ExitStack

    from research.loop import ResearchLoop

    src = runs_dir() / run_id
    if not (src / "config.json").exists():
        known = sorted(p.name for p in runs_dir().iterdir() if (p / "trajectory.jsonl").exists()) if runs_dir().exists() else []
        raise RunStateError(f"no run '{run_id}' in {runs_dir()}; known: {', '.join(known) or 'none'}")
    records, warnings = read_trajectory(src)
    state = LoopState.load(src)
    raw = json.loads((src / "config.json").read_text())
    # the replay's own overrides (split=test, llm=..., benchmark=...) win over the recorded ones
    base_overrides = [o for o in raw.get("overrides", []) if o.split("=")[0] not in {x.split("=")[0] for x in overrides}]
    from research.config import load_run_setup

    setup = load_run_setup([*base_overrides, *overrides, "research.proposer=optuna"])
    setup.research.repo = state.repo
    rid = new_run_id or f"replay-{run_id}-{datetime.now():%H%M%S}"
    steps = [r for r in records if only == "all" or r.decision in ("baseline", "proceed")]
    loop = ResearchLoop(setup, rid, llm_opener=llm_opener, sandbox=sandbox)
    loop.setup.research.proposer = "optuna"  # no LLM proposals in a replay
    loop.run_dir.mkdir(parents=True, exist_ok=True)
    loop.ws.init_refs(state.base_commit)
    loop.state = LoopState(rid, state.repo, state.base_commit, state.base_commit)
    out_steps: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    with ExitStack() as stack:
        if setup.eval.eval.reader == "llm":
            loop._open_llm(stack)
        for rec in steps:
            step = _replay_step(loop, rec)
            out_steps.append(step)
            if console:
                console.print(f"{rec.experiment_id}: recorded {step['recorded']} replayed {step['replayed']} "
                              f"decision {rec.decision} -> {step['replayed_decision']} ({step['status']})")
    loop.ws.cleanup()
    atomic_write_json(loop.run_dir / "replay.json", {
        "original_run_id": run_id, "only": only, "overrides": list(overrides), "warnings": warnings,
        "wall_s": time.perf_counter() - t0, "original_wall_s": state.elapsed_s, "steps": out_steps,
    })
    loop.state.save(loop.run_dir)
    return loop.run_dir


def _replay_step(loop: Any, rec: ExperimentRecord) -> dict[str, Any]:
    st = loop.state
    new = ExperimentRecord(loop.run_id, rec.index, rec.experiment_id, "replay", st.best_commit,
                           hypothesis=rec.hypothesis, discovery_type=rec.discovery_type, edits=rec.edits,
                           config_overrides=rec.config_overrides, objective=loop.setup.eval.objective,
                           best_before=st.best_value, started=datetime.now().isoformat(timespec="seconds"))
    step = {"experiment_id": rec.experiment_id, "recorded": rec.objective_value, "recorded_decision": rec.decision,
            "replayed": None, "delta": None, "replayed_decision": None, "holds": None, "status": "ok"}
    wt = loop.ws.create(rec.experiment_id, st.best_commit)
    try:
        if rec.index > 0:
            prop = Proposal(rec.hypothesis, rec.discovery_type or "", "", [Edit(**e) for e in rec.edits],
                            list(rec.config_overrides))
            changed, err = loop._apply(wt, prop)
            if err is not None:
                step["status"] = f"edit no longer applies: {err}"
                new.failure, new.decision = {"cls": "format_mismatch", "message": str(err)}, "failed"
                new.commit = loop.ws.commit(wt, f"replay {rec.experiment_id} (failed to apply)")
                _record(loop, new)
                return step
        new.commit = loop.ws.commit(wt, f"replay {rec.experiment_id}: {rec.hypothesis[:50]}")
        out = loop._run_eval(wt, rec.experiment_id, None, rec.index > 0, [])
    finally:
        loop.ws.remove(wt.path)
    if not out.ok:
        step["status"] = f"evaluation failed: {out.failure.cls.value}: {out.failure.message}"
        new.failure, new.decision = out.failure.to_dict(), "failed"
        _record(loop, new)
        return step
    value = out.objective_value
    new.objective_value, new.metrics, new.eval_run_id = value, out.result["metrics"], out.result["run_id"]
    step["replayed"] = value
    if rec.objective_value is not None and value is not None:
        step["delta"] = value - rec.objective_value
    if rec.index == 0:
        decision = "baseline"
    else:
        ds = D.DecisionState(st.best_value if st.best_value is not None else value, st.consecutive_degradations,
                             st.iterations_on_hypothesis, st.pivots)
        d = D.decide(ds, value, min_rel_improvement=loop.setup.research.loop.min_rel_improvement)
        decision, new.delta = d.kind, d.delta
        ns = D.apply_decision(ds, d, value)
        st.consecutive_degradations, st.iterations_on_hypothesis, st.pivots = ns.consecutive_degradations, ns.iterations_on_hypothesis, ns.pivots
    new.decision = decision
    step["replayed_decision"] = decision
    step["holds"] = decision == rec.decision
    if decision in ("baseline", "proceed"):
        st.best_value, st.best_commit, st.best_metrics = value, new.commit, new.metrics
        loop.ws.move_best(new.commit)
    _record(loop, new)
    return step


def _record(loop: Any, rec: ExperimentRecord) -> None:
    rec.finished = datetime.now().isoformat(timespec="seconds")
    append_record(loop.run_dir, rec)
    loop.records.append(rec)
    loop.state.next_index = rec.index + 1
