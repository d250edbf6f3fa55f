"""Replay a recorded trajectory: re-apply its experiments in order from its base commit.

No LLM is asked for proposals: the recorded edits and config overrides are applied
to fresh worktrees, each step is re-evaluated (optionally on another split, benchmark
or LLM backbone), and a new run links to the original with, per step, the recorded
metric, the replayed one, the delta and whether the original decision still holds.
Each step goes through the loop's own stages (screens, evaluation, paired test, the check
slice, the decision rule of the original's loop settings) and the state is the same fold
over the journal, so a decision that differs is a real difference, not a different rule.
A run made with ``research.parallel=K`` is replayed round by round (records carry ``round_of``):
the round's recorded candidates are measured together against the same best and decided by the
round's rule, so ``not_taken`` comes back as ``not_taken``.
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
from research.errors import ProposalFormatError, RunStateError
from research.journal.trajectory import Edit, ExperimentRecord, read_trajectory
from research.loop.state import LoopState
from research.proposers.base import Proposal, Proposer

ONLY = ("all", "accepted")


def _key(override: str) -> str:
    """``++llm.base_url=x`` and ``llm.base_url=y`` set the same key."""
    return override.split("=", 1)[0].lstrip("+~")


def _recorded_run(run_id: str) -> tuple[list[ExperimentRecord], list[str], LoopState, dict[str, Any]]:
    """The run to replay: its journal (and warnings), state and saved config; RunStateError naming the
    runs there are when it is not one."""
    src = runs_dir() / run_id
    if not (src / "config.json").exists():
        known = sorted(p.name for p in runs_dir().iterdir() if (p / "trajectory.jsonl").exists()) if runs_dir().exists() else []
        raise RunStateError(f"no run '{run_id}' in {runs_dir()}; known: {', '.join(known) or 'none'}")
    records, warnings = read_trajectory(src)
    return records, warnings, LoopState.load(src), json.loads((src / "config.json").read_text())


def replay_run(run_id: str, overrides: Sequence[str] = (), *, only: str = "all", console: Any = None,
               new_run_id: str | None = None, llm_opener: Any = None, sandbox: Any = None) -> Path:
    from contextlib import ExitStack

    from research.config import load_run_setup
    from research.loop.guarantees import check_sandbox
    from research.loop.research_loop import ResearchLoop

    if only not in ONLY:
        raise RunStateError(f"replay --only must be one of {', '.join(ONLY)}, got {only!r}")
    records, warnings, state, raw = _recorded_run(run_id)
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
    loop.state.sandbox = check_sandbox(loop.evals.sandbox(), allow_weak=setup.research.sandbox.allow_weak)
    loop.state.save(loop.run_dir)
    out_steps: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    with ExitStack() as stack:
        if setup.eval.options.reader == "llm":
            loop.llms.open(stack)
        try:
            for group in rounds(steps):
                done = _replay_round(loop, group) if len(group) > 1 else [_replay_step(loop, group[0])]
                out_steps += done
                loop.state.elapsed_s = time.perf_counter() - t0
                loop.state.save(loop.run_dir)
                for rec, step in zip(group, done) if console else ():
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


class RecordedProposer(Proposer):
    """Returns the recorded change; it cannot be re-asked (a screened step is rejected again)."""

    name = "replay"

    def __init__(self, rec: ExperimentRecord):
        self.rec = rec

    def propose(self, ctx: Any) -> Proposal:
        r = self.rec
        if not r.edits and not r.config_overrides:  # failed before anything was proposed: it fails again
            why = (r.failure or {}).get("message") or "no edits and no config overrides recorded"
            raise ProposalFormatError(f"nothing to re-apply: {' '.join(str(why).split())[:200]}")
        return Proposal(r.hypothesis, r.proposed_type or r.discovery_type or "", r.expected_effect,
                        [Edit(**e) for e in r.edits], list(r.config_overrides), seed=r.seed, subspace=list(r.subspace))

    def reconsider(self, *args: Any, **kw: Any) -> Proposal:
        return self.propose(None)


def _replay_step(loop: Any, rec: ExperimentRecord) -> dict[str, Any]:
    """One recorded step through the loop's own stages (screens, evaluation, paired test, check,
    decision, journal), so a decision that differs is a real difference, not a different rule."""
    from research.failures import FailureClass, _failure
    from research.loop.experiment import Experiment

    st = loop.state
    step = _step(rec)
    st.next_index = rec.index
    if rec.index == 0:
        loop._baseline()
    elif not rec.edits and not rec.config_overrides:
        # failed before anything was proposed (unparseable reply, LLM error): nothing to re-apply;
        # it still counts against the state as it did in the original run
        why = (rec.failure or {}).get("message") or "no edits and no config overrides recorded"
        step["status"] = f"skipped: nothing to re-apply ({' '.join(str(why).split())[:200]})"
        new = ExperimentRecord(loop.run_id, rec.index, rec.experiment_id, "replay", st.start_commit,
                               hypothesis=rec.hypothesis, objective=loop.setup.eval.objective, started=loop.now())
        new.failure = rec.failure or _failure(FailureClass.FORMAT_MISMATCH, why, code_changed=True).to_dict()
        new.decision, new.notes = "failed", step["status"]
        loop.finish(new, None, None)
        return step
    else:
        Experiment(loop.run_context(), RecordedProposer(rec)).run()
    return _outcome(step, rec, loop.records[-1])


def rounds(steps: list[ExperimentRecord]) -> list[list[ExperimentRecord]]:
    """The steps in the groups they were decided in: a research.parallel round (consecutive records of
    one ``round_of``) together, every other record alone."""
    out: list[list[ExperimentRecord]] = []
    for rec in steps:
        last = out[-1][-1] if out else None
        same = (last is not None and rec.round_of is not None and last.round_of == rec.round_of
                and rec.index == last.index + 1)
        if same:
            out[-1].append(rec)
        else:
            out.append([rec])
    return out


def _replay_round(loop: Any, recs: list[ExperimentRecord]) -> list[dict[str, Any]]:
    """One recorded round through research.loop.round: its candidates measured together and decided by the
    round's rule (the best passing one taken, the others not taken)."""
    from research.loop.round import Round

    loop.state.next_index = recs[0].index
    Round(loop.run_context(), [RecordedProposer(r) for r in recs]).run()
    return [_outcome(_step(rec), rec, new) for rec, new in zip(recs, loop.records[-len(recs):])]


def _step(rec: ExperimentRecord) -> dict[str, Any]:
    return {"index": rec.index, "experiment_id": rec.experiment_id, "recorded": rec.objective_value,
            "recorded_decision": rec.decision, "replayed": None, "delta": None, "replayed_decision": None,
            "holds": None, "status": "ok"}


def _outcome(step: dict[str, Any], rec: ExperimentRecord, new: ExperimentRecord) -> dict[str, Any]:
    step["replayed"], step["replayed_decision"] = new.objective_value, new.decision
    step["holds"] = new.decision == rec.decision
    if rec.objective_value is not None and new.objective_value is not None:
        step["delta"] = new.objective_value - rec.objective_value
    if new.failure:
        step["status"] = f"{new.decision}: {new.failure.get('cls')}: {new.failure.get('message', '')}"[:300]
    return step
