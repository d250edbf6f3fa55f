"""The autonomous research loop: propose -> edit on a branch -> evaluate in the sandbox -> decide.

Every step is journaled (trajectory.jsonl) and the loop state saved atomically, so
``memsys run --resume <run-id>`` continues exactly where a killed run stopped.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
from contextlib import ExitStack
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from harness.atomic import atomic_write_json
from harness.errors import LLMAuthError, MemsysError
from harness.paths import REPO_ROOT, cache_dir, runs_dir
from harness.surface import MUTABLE_SURFACE
from research import decide as D
from research.caches import HELDOUT_DIR, SharedCache
from research.config import RunSetup, run_setup_from_dict
from research.context import build_context
from research.edits import apply_config_overrides, apply_edits
from research.errors import EditApplyError, ForbiddenEditError, ProposalFormatError, RunStateError
from research.evaluate import EvalJob, EvalOutcome, evaluate, open_gateway, reader_config_for_sandbox, short_socket_dir
from research.failures import FailureClass, classify_exception, one_line
from research.guarantees import check_sandbox
from research.healing import edits_without_import, plan_heal
from research.presets import check_presets
from research.proposers.base import Proposal, Proposer, ResearchContext
from research.repeats import describe_outcome, describe_tried, repeated_experiment
from research.state import LoopState
from research.tracking import finish_parent_run, log_experiment, numeric, start_parent_run
from research.trajectory import ExperimentRecord, append_record, read_trajectory, repair_trajectory
from research.workspace import Workspace, Worktree

log = logging.getLogger(__name__)


def _forbidden(exc: Exception) -> dict[str, Any]:
    from research.failures import _failure

    return _failure(FailureClass.FORBIDDEN_EDIT, str(exc), code_changed=True).to_dict() | {"stage": "commit"}


def _now() -> str:
    return datetime.now().isoformat(timespec="seconds")


class ResearchLoop:
    def __init__(self, setup: RunSetup, run_id: str, *, resume: bool = False,
                 llm_opener: Callable[..., Any] | None = None, sandbox: Any = None,
                 on_event: Callable[[str, dict[str, Any]], None] | None = None):
        self.setup, self.run_id = setup, run_id
        self.run_dir = runs_dir() / run_id
        self.resume = resume
        self.on_event = on_event or (lambda kind, data: None)
        self._llm_opener = llm_opener
        self._sandbox = sandbox
        rc = setup.research
        repo = Path(rc.repo) if rc.repo else REPO_ROOT
        self.ws = Workspace(repo, run_id, self.run_dir / "worktrees")
        self.preset = setup.eval.memory.name
        self.records: list[ExperimentRecord] = []
        self.state: LoopState | None = None
        self.llm = None
        self.llm_overrides: list[str] = []
        self.workers_override: int | None = None
        self._stack: ExitStack | None = None
        self._proposers: dict[str, Proposer] = {}
        self.gateway = None
        self.budget = None
        self.shared_cache = SharedCache(cache_dir())
        self.heldout_cache = SharedCache(cache_dir(), name=HELDOUT_DIR)

    # ------------------------------------------------------------------ setup
    @classmethod
    def from_run(cls, run_id: str, **kw: Any) -> "ResearchLoop":
        run_dir = runs_dir() / run_id
        cfg_path = run_dir / "config.json"
        if not cfg_path.exists():
            known = sorted(p.name for p in runs_dir().iterdir() if (p / "state.json").exists()) if runs_dir().exists() else []
            raise RunStateError(f"no optimization run '{run_id}' in {runs_dir()}; known: {', '.join(known) or 'none'}")
        raw = json.loads(cfg_path.read_text())
        return cls(run_setup_from_dict(raw["config"], raw.get("overrides", [])), run_id, resume=True, **kw)

    def load_state(self) -> LoopState:
        """The saved state and trajectory of this run (for commands that act on a finished run)."""
        self.state = LoopState.load(self.run_dir)
        self.records, _ = read_trajectory(self.run_dir)
        return self.state

    def _init_state(self) -> None:
        if self.resume:
            self.state = LoopState.load(self.run_dir)
            for w in repair_trajectory(self.run_dir):
                log.warning(w)
            self.records, _ = read_trajectory(self.run_dir)
            if len(self.records) > self.state.next_index:  # killed between journal and state write
                self._reconcile_from_records()
            n = self.ws.cleanup()
            if n:
                log.info("removed %d worktree(s) left by the killed run", n)
            self.state.status = "running"
            return
        if self.run_dir.exists() and (self.run_dir / "state.json").exists():
            raise RunStateError(f"run '{self.run_id}' exists; resume it with: memsys run --resume {self.run_id}")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        dirty = self.ws.uncommitted_changes()
        if dirty:
            log.warning("the repo has uncommitted changes (%s...); the run starts from HEAD without them",
                        ", ".join(dirty[:3]))
        base = self.ws.head_commit()
        self.ws.init_refs(base)
        atomic_write_json(self.run_dir / "config.json", {"config": self.setup.eval.raw | {"research": asdict(self.setup.research)},
                                                          "overrides": self.setup.overrides})
        self.state = LoopState(self.run_id, str(self.ws.root), base, base)
        self.state.save(self.run_dir)

    def _reconcile_from_records(self) -> None:
        st = self.state
        st.next_index = len(self.records)
        for r in self.records:
            if r.decision in ("baseline", "proceed") and r.objective_value is not None and r.commit:
                st.best_value, st.best_commit, st.best_metrics = r.objective_value, r.commit, r.metrics
        self.ws.move_best(st.best_commit)

    # ------------------------------------------------------------------ run
    def run(self) -> LoopState:
        sandbox_info = check_sandbox(self._sandbox_obj(), allow_weak=self.setup.research.sandbox.allow_weak)
        self._init_state()
        st = self.state
        st.sandbox = sandbox_info
        self.on_event("sandbox", sandbox_info)
        started = time.monotonic() - st.elapsed_s
        with ExitStack() as stack:
            self._stack = stack
            self._open_llm(stack)
            self._mlflow_parent()
            proposer = self._make_proposer()
            try:
                while True:
                    st.elapsed_s = time.monotonic() - started
                    reason = self._stop_reason()
                    if reason:
                        st.status, st.stop_reason = "finished", reason
                        self._confirm()
                        break
                    if st.next_index == 0:
                        self._baseline()
                    else:
                        self._experiment(self._proposer_for(proposer, st.next_index))
                    st.elapsed_s = time.monotonic() - started
                    st.save(self.run_dir)
            except KeyboardInterrupt:
                st.status, st.stop_reason = "stopped", "interrupted (resume with memsys run --resume)"
                raise
            finally:
                st.elapsed_s = time.monotonic() - started
                st.save(self.run_dir)
                self.ws.cleanup()
                self._mlflow_finish()
        return st

    def _confirm(self) -> None:
        """Held-out confirmation of baseline and best, once per best commit (see research.confirm)."""
        st = self.state
        cc = self.setup.research.confirm
        if not cc.enabled or st.best_value is None:
            return
        if st.confirmation.get("runs", {}).get("best", {}).get("commit") == st.best_commit:
            return
        from research.confirm import confirm, describe

        self.on_event("confirm", {"split": cc.split})
        record = confirm(self)
        atomic_write_json(self.run_dir / "confirmation.json", record)
        self.on_event("confirmed", {"record": record, "line": describe(record)})

    def _stop_reason(self) -> str | None:
        st, b = self.state, self.setup.research.budget
        done = sum(1 for r in self.records if r.index > 0)
        if st.next_index > 0 and st.best_value is None:
            return "the baseline evaluation failed; fix it before optimizing"
        if done >= b.experiments:
            return f"experiment budget spent ({done}/{b.experiments})"
        if st.elapsed_s >= b.wall_time_s:
            return f"wall-time budget spent ({st.elapsed_s:.0f}s)"
        if st.tokens >= b.tokens:
            return f"token budget spent ({st.tokens})"
        if st.cost_usd >= b.usd:
            return f"USD budget spent ({st.cost_usd:.2f})"
        if st.pivots > self.setup.research.loop.max_pivots:
            return f"pivot cap reached ({st.pivots})"
        lc = self.setup.research.loop
        vals = [r.objective_value for r in self.records if r.index > 0 and r.objective_value is not None]
        recent_proceeds = any(r.decision == "proceed" for r in self.records[-lc.ceiling_window:])
        if not recent_proceeds and D.ceiling_reached(vals, lc.ceiling_window, lc.ceiling_band):
            return f"ceiling: last {lc.ceiling_window} evaluations within {lc.ceiling_band:.1%}"
        return None

    # ------------------------------------------------------------------ LLM, proposers
    def _needs_llm(self) -> bool:
        return self.setup.eval.eval.reader == "llm" or self.setup.research.proposer in ("llm", "alternate")

    def _open_llm(self, stack: ExitStack) -> None:
        if not self._needs_llm():
            return
        from memsys.llm.budget import Budget

        cfg = self.setup.eval.llm
        opener = self._llm_opener
        if opener is None:
            from memsys.llm.client import open_llm as opener
        b = self.setup.research.budget
        if self.budget is None:  # one budget for the researcher and the reader (through the gateway)
            self.budget = Budget(max_tokens=b.tokens, max_usd=b.usd)
        self.llm = stack.enter_context(opener(cfg, budget=self.budget))
        if self.setup.eval.eval.reader == "llm":
            # the sandbox has no network: its reader reaches this endpoint through a gateway on a
            # Unix socket; the key stays in this process
            sock = short_socket_dir()
            stack.callback(shutil.rmtree, sock, True)
            self.gateway = stack.enter_context(open_gateway(cfg, self.llm, sock, self.budget))

    def _switch_to_local(self) -> str:
        """The paper's 403 case: continue on the embedded local model (reader and researcher)."""
        from memsys.config import LLMConfig, compose, validate

        local = validate(LLMConfig, compose("run", ["llm=local"]).llm, where="llm=local")
        old = self.setup.eval.llm
        self.setup.eval.llm = local
        try:
            self._open_llm(self._stack)
        except MemsysError as exc:
            self.setup.eval.llm = old
            return f"local fallback failed: {exc}"
        for p in self._proposers.values():
            if hasattr(p, "llm"):
                p.llm = self.llm
        return f"switched reader and researcher from {old.model} to the embedded {local.model}"

    def _make_proposer(self) -> dict[str, Proposer]:
        out: dict[str, Proposer] = {}
        kind = self.setup.research.proposer
        if kind in ("llm", "alternate"):
            from research.proposers.llm import LLMProposer

            out["llm"] = LLMProposer(self.llm)
        if kind in ("optuna", "alternate"):
            from research.proposers.optuna_proposer import OptunaProposer

            out["optuna"] = OptunaProposer(self.run_dir / "optuna.db", self.run_id)
        self._proposers = out
        return out

    def _proposer_for(self, proposers: dict[str, Proposer], index: int) -> Proposer:
        if len(proposers) == 1:
            return next(iter(proposers.values()))
        return proposers["llm" if index % 2 == 1 else "optuna"]

    # ------------------------------------------------------------------ evaluation
    def _eval_setup(self, sample: str | None, eval_run_id: str, split: str | None = None) -> Any:
        """The trusted setup of one evaluation: the run's benchmark, split and objective (composed
        from this checkout's configs, never from the worktree's), with this evaluation's sample."""
        from benchmarks.config import EvalSetup

        ev = self.setup.eval
        cfg = dataclasses.replace(ev.eval, split=split or ev.eval.split,
                                  sample=sample if sample is not None else (ev.eval.sample or "full"),
                                  run_id=eval_run_id, mlflow=False, resume=False,
                                  workers=self.workers_override or ev.eval.workers)
        return EvalSetup(cfg, ev.benchmark, ev.memory, ev.llm, ev.raw)

    def _sandbox_obj(self) -> Any:
        if self._sandbox is None:
            from sandbox import make_sandbox

            self._sandbox = make_sandbox(self.setup.research.sandbox.backend)
            log.info("sandbox backend: %s", getattr(self._sandbox, "name", "?"))
        return self._sandbox

    def _run_eval(self, wt: Worktree, experiment_id: str, sample: str | None, code_changed: bool,
                  edited: list[str], tag: str = "", *, split: str | None = None, heldout: bool = False) -> EvalOutcome:
        sc = self.setup.research.sandbox
        folder = self.run_dir / "evals" / f"{experiment_id}{tag}"
        job = EvalJob(self._eval_setup(sample, f"{self.run_id}-{experiment_id}{tag}", split), wt.path, self.preset,
                      folder / "untrusted", runs_root=folder, wall_timeout_s=sc.wall_timeout_s,
                      memory_bytes=int(sc.memory_gb * (1 << 30)),
                      reader_llm=reader_config_for_sandbox(self.setup.eval.llm) if self.gateway else {})
        shared = self.heldout_cache if heldout else self.shared_cache  # test-split text never reaches dev sandboxes
        out = evaluate(job, self._sandbox_obj(), gateway=self.gateway, shared=shared,
                       parent_metrics=numeric(self.state.best_metrics) or None, code_changed=code_changed,
                       edited_paths=edited)
        self._last_outcome = out
        return out

    def _note_eval(self, rec: ExperimentRecord, out: EvalOutcome) -> None:
        """Reader usage (the gateway's count) and the cache merge, onto the experiment's record."""
        rec.sandbox = dict(self.state.sandbox)
        if out.usage is not None:
            u = dict(rec.reader)
            for k, v in dataclasses.asdict(out.usage).items():
                u[k] = u.get(k, 0) + v
            rec.reader = u
        if out.cache is not None:
            rec.cache = out.cache.as_dict()

    # ------------------------------------------------------------------ steps
    def _baseline(self) -> None:
        st = self.state
        exp_id = "exp-000"
        rec = ExperimentRecord(self.run_id, 0, exp_id, "baseline", st.base_commit, started=_now(),
                               hypothesis="baseline: the starting configuration", objective=self.setup.eval.objective)
        t0 = time.perf_counter()
        wt = self.ws.create(exp_id, st.base_commit)
        rec.commit, rec.branch = st.base_commit, wt.branch
        values = []
        try:
            for rep in range(max(1, self.setup.research.loop.baseline_repeats)):
                out = self._run_eval(wt, exp_id, None, False, [], tag="" if rep == 0 else f"-r{rep}")
                self._note_eval(rec, out)
                if not out.ok:
                    rec.failure = out.failure.to_dict()
                    break
                values.append(out.objective_value)
                if rep == 0:
                    rec.metrics, rec.eval_run_id = out.result["metrics"], out.result["run_id"]
                    rec.mlflow_run_id = out.result.get("mlflow_run_id")
        finally:
            self.ws.remove(wt.path)
        rec.durations = {"eval_s": time.perf_counter() - t0, "total_s": time.perf_counter() - t0}
        if values and all(v is not None for v in values):
            rec.objective_value = values[0]
            rec.decision = "baseline"
            st.best_value, st.best_metrics = values[0], rec.metrics
            st.best_eval_dir = str(self.run_dir / "evals" / exp_id / rec.eval_run_id)
            st.noise_floor = (max(values) - min(values)) / 2 if len(values) > 1 else 0.0
            rec.notes = f"noise floor {st.noise_floor:.4f} from {len(values)} repeat(s)"
        self._finish(rec)

    def _experiment(self, proposer: Proposer) -> None:
        st = self.state
        lc = self.setup.research.loop
        index = st.next_index
        exp_id = f"exp-{index:03d}"
        rec = ExperimentRecord(self.run_id, index, exp_id, proposer.name, st.best_commit, started=_now(),
                               objective=self.setup.eval.objective, best_before=st.best_value)
        t_start = time.perf_counter()
        ctx = self._context()
        self.on_event("propose", {"experiment": exp_id, "proposer": proposer.name, "mode": st.mode})
        try:
            prop = self._propose(proposer, ctx, rec)
        except (ProposalFormatError, MemsysError) as exc:
            rec.durations["propose_s"] = time.perf_counter() - t_start
            rec.failure = classify_exception(exc).to_dict() | {"stage": "propose"}
            rec.decision = "failed"
            self._count_failure(rec)
            return self._finish(rec)
        dup = self._already_tried(prop)
        if dup is not None:
            prop, dup = self._reask_duplicate(proposer, ctx, prop, dup, rec)
        if dup is not None:
            return self._reject_repeat(rec, prop, proposer, dup, "propose", t_start)
        t_prop = time.perf_counter()
        rec.durations["propose_s"] = t_prop - t_start
        self._take_proposal(rec, prop)
        wt = self.ws.create(exp_id, st.best_commit)
        rec.branch = wt.branch
        try:
            edited, error = self._apply(wt, prop)
            resend_s = 0.0  # researcher time inside the apply stage: proposal time, not loop overhead
            if error is not None and not isinstance(error, ForbiddenEditError) and proposer.name == "llm":
                # sent back once with the error
                t_resend = time.perf_counter()
                try:
                    prop2 = proposer.repair(ctx, prop, str(error), "")
                except MemsysError as exc:
                    prop2 = None
                    error = exc
                if prop2 is not None:
                    resend: dict[str, Any] = {"attempt": 1, "action": "resend_edit"}
                    rec.healing.append(resend)
                    dup = self._already_tried(prop2)
                    if dup is not None:  # the resent change can be a repeat as well
                        prop2, dup = self._reask_duplicate(proposer, ctx, prop2, dup, rec)
                resend_s = time.perf_counter() - t_resend
                rec.durations["propose_s"] += resend_s
                if prop2 is not None:
                    if dup is not None:
                        resend["result"] = f"repeats {dup}"
                        return self._reject_repeat(rec, prop2, proposer, dup, "apply", t_start)
                    self._reset_worktree(wt)
                    self._take_proposal(rec, prop2)
                    prop = prop2
                    edited, error = self._apply(wt, prop)
                    resend["result"] = "ok" if error is None else str(error)
            try:
                rec.commit = self.ws.commit(wt, f"{exp_id}: {prop.hypothesis[:60]}\n\ndiscovery: {prop.discovery_type}")
            except ForbiddenEditError as exc:  # the committed diff left the surface: undone, refused
                rec.commit, error = self.ws.repo_at(wt.path).head.commit.hexsha, exc
            rec.diff, rec.diff_stats = self.ws.diff(st.best_commit, rec.commit)
            if error is not None:
                forbidden = isinstance(error, ForbiddenEditError)
                cls = FailureClass.FORBIDDEN_EDIT if forbidden else FailureClass.FORMAT_MISMATCH
                from research.failures import _failure

                rec.failure = _failure(cls, str(error), code_changed=True).to_dict() | {"stage": "apply"}
                rec.decision = "rejected" if forbidden else "failed"
                rec.durations["apply_s"] = time.perf_counter() - t_prop - resend_s
                self._count_failure(rec)
                proposer.observe(prop, None)
                return self._finish(rec)
            rec.durations["apply_s"] = time.perf_counter() - t_prop - resend_s
            if not rec.diff.strip():
                # every change was already in place (e.g. an override to the preset's own value)
                return self._reject_identical(rec, prop, proposer, "the edits leave the best commit unchanged "
                                              "(empty diff)", "apply", st.best_value)
            outcome = self._evaluate_with_healing(rec, wt, prop, proposer, ctx, edited)
        finally:
            self.ws.remove(wt.path)
        rec.durations["total_s"] = time.perf_counter() - t_start
        # loop overhead: worktree, apply, commit, bookkeeping (everything but LLM and evaluation)
        rec.durations["overhead_s"] = max(0.0, rec.durations["total_s"] - rec.durations.get("propose_s", 0.0)
                                          - rec.durations.get("eval_s", 0.0))
        self.workers_override = None  # a rate-limit backoff lasts one experiment
        if outcome is None or not outcome.ok:
            proposer.observe(prop, None)
            forbidden = bool(rec.failure) and rec.failure.get("cls") == FailureClass.FORBIDDEN_EDIT.value
            rec.decision = "rejected" if forbidden else "failed"
            self._count_failure(rec)
            return self._finish(rec)
        value = outcome.objective_value
        rec.objective_value, rec.metrics = value, outcome.result["metrics"]
        rec.eval_run_id, rec.mlflow_run_id = outcome.result["run_id"], outcome.result.get("mlflow_run_id")
        proposer.observe(prop, value)
        ds = D.DecisionState(st.best_value, st.consecutive_degradations, st.iterations_on_hypothesis, st.pivots)
        d = D.decide(ds, value, min_rel_improvement=lc.min_rel_improvement, noise_floor=st.noise_floor,
                     max_iterations=lc.max_iterations_per_hypothesis, degradations_to_pivot=lc.degradations_to_pivot)
        rec.decision, rec.delta, rec.delta_rel = d.kind, d.delta, d.delta_rel
        rec.notes = f"{rec.notes}; {d.reason}" if rec.notes else d.reason  # keep a no-effect note
        ns = D.apply_decision(ds, d, value)
        st.consecutive_degradations, st.iterations_on_hypothesis, st.pivots = (
            ns.consecutive_degradations, ns.iterations_on_hypothesis, ns.pivots)
        if d.kind == "proceed":
            st.best_value, st.best_commit, st.best_metrics = value, rec.commit, rec.metrics
            st.best_eval_dir = str(self.run_dir / "evals" / exp_id / rec.eval_run_id)
            self.ws.move_best(rec.commit)
            st.mode, st.current_hypothesis = "new", None
        elif d.kind == "pivot":
            st.mode, st.current_hypothesis = "pivot", None
        else:
            st.mode, st.current_hypothesis = "iterate", prop.hypothesis
        self._finish(rec)

    def _record(self, experiment_id: str) -> ExperimentRecord:
        return next(r for r in self.records if r.experiment_id == experiment_id)

    def _reject_repeat(self, rec: ExperimentRecord, prop: Proposal, proposer: Proposer, dup: str, stage: str,
                       t_start: float) -> None:
        rec.durations.setdefault("propose_s", time.perf_counter() - t_start)
        self._take_proposal(rec, prop)
        self._reject_identical(rec, prop, proposer, f"proposal repeats {dup} (same changes, same parent commit)",
                               stage, self._record(dup).objective_value)

    def _reject_identical(self, rec: ExperimentRecord, prop: Proposal, proposer: Proposer, what: str, stage: str,
                          known_value: float | None) -> None:
        """Identical conditions: evaluating them again would only re-measure noise."""
        from research.failures import _failure

        rec.failure = _failure(FailureClass.IDENTICAL_CONDITIONS, f"{what}; skipped without evaluating",
                               code_changed=True).to_dict() | {"stage": stage}
        rec.decision = "rejected"
        self._count_failure(rec)
        proposer.observe(prop, known_value)  # a sampler learns the known value
        self._finish(rec)

    def _propose(self, proposer: Proposer, ctx: ResearchContext, rec: ExperimentRecord) -> Proposal:
        """One proposal; a remote researcher whose key is refused (the paper's 403) is
        switched to the embedded model once and asked again, as evaluations are."""
        try:
            return proposer.propose(ctx)
        except LLMAuthError as exc:
            remote = self.setup.eval.llm.backend != "local"
            if not (remote and self.setup.research.loop.local_fallback and hasattr(proposer, "llm")):
                raise
            entry = {"attempt": 0, "action": "switch_local_llm", "stage": "propose", "failure": "auth",
                     "reason": one_line(str(exc))}
            rec.healing.append(entry)
            entry["result"] = self._switch_to_local()
            if self.setup.eval.llm.backend != "local":  # the switch itself failed
                raise
            return proposer.propose(ctx)

    def _already_tried(self, prop: Proposal) -> str | None:
        return repeated_experiment(prop, self.records, self.state.best_commit)

    def _reask_duplicate(self, proposer: Proposer, ctx: ResearchContext, prop: Proposal, dup: str,
                         rec: ExperimentRecord) -> tuple[Proposal, str | None]:
        """Send a repeated proposal back (bounded), sampled at a higher temperature; returns the
        last proposal and the experiment it still repeats (None once it is new)."""
        lc = self.setup.research.loop
        for attempt in range(lc.duplicate_reasks):
            outcome = describe_outcome(self._record(dup), self.setup.eval.objective)
            tried = describe_tried(self.records, self.state.best_commit)
            entry = {"attempt": attempt, "action": "duplicate_proposal", "reason": f"repeats {dup}"}
            rec.healing.append(entry)
            try:
                again = proposer.reconsider(ctx, prop, dup, outcome, tried, lc.duplicate_temperature)
            except MemsysError as exc:
                entry["result"] = f"re-ask failed: {one_line(str(exc))}"
                return prop, dup
            if again is None:
                entry["result"] = f"{proposer.name} cannot be re-asked"
                return prop, dup
            again.tokens += prop.tokens
            again.cost_usd += prop.cost_usd
            prop = again
            dup = self._already_tried(prop)
            entry["result"] = "new proposal" if dup is None else f"repeats {dup} again"
            if dup is None:
                break
        return prop, dup

    def _take_proposal(self, rec: ExperimentRecord, prop: Proposal) -> None:
        rec.hypothesis, rec.discovery_type, rec.expected_effect = prop.hypothesis, prop.discovery_type, prop.expected_effect
        rec.edits = [asdict(e) for e in prop.edits]
        rec.config_overrides = list(prop.config_overrides)
        rec.tokens += prop.tokens
        rec.cost_usd += prop.cost_usd

    def _apply(self, wt: Worktree, prop: Proposal) -> tuple[list[str], Exception | None]:
        surface = MUTABLE_SURFACE
        try:
            changed = apply_config_overrides(wt.path, self.preset, prop.config_overrides, surface)
            changed += apply_edits(wt.path, prop.edits, surface)
            check_presets(wt.path, changed)
            return changed, None
        except (EditApplyError, ForbiddenEditError) as exc:
            return [], exc

    def _reset_worktree(self, wt: Worktree) -> None:
        r = self.ws.repo_at(wt.path)
        r.git.reset("--hard", "HEAD")
        r.git.clean("-fd")

    def _evaluate_with_healing(self, rec: ExperimentRecord, wt: Worktree, prop: Proposal, proposer: Proposer,
                               ctx: ResearchContext, edited: list[str]) -> EvalOutcome | None:
        lc = self.setup.research.loop
        smoke = lc.smoke_sample if lc.smoke_sample and lc.smoke_sample != (self.setup.eval.eval.sample or "full") else None
        sample: str | None = None
        tried: set[str] = set()
        t0 = time.perf_counter()
        outcome = None
        for attempt in range(lc.max_repairs + 1):
            if smoke and "smoke_ok" not in tried:
                outcome = self._run_eval(wt, rec.experiment_id, smoke, True, edited, tag=f"-smoke{attempt}")
                self._note_eval(rec, outcome)
                if outcome.ok:
                    tried.add("smoke_ok")
            if not smoke or "smoke_ok" in tried:
                outcome = self._run_eval(wt, rec.experiment_id, sample, True, edited, tag="" if attempt == 0 else f"-h{attempt}")
                self._note_eval(rec, outcome)
            rec.durations["eval_s"] = time.perf_counter() - t0
            if outcome.ok or (outcome.failure and outcome.failure.cls == FailureClass.INVALID_METRIC
                              and outcome.failure.severity == "low" and outcome.result):
                if not outcome.ok:  # identical metrics: a legitimate "no effect" result
                    rec.notes = outcome.failure.message
                    outcome.ok = True
                return outcome
            f = outcome.failure
            rec.failure = f.to_dict()
            action = plan_heal(f, attempt, max_repairs=lc.max_repairs,
                               remote_llm=self.setup.eval.llm.backend != "local", tried=tried)
            entry = {"attempt": attempt + 1, "failure": f.cls.value, "action": action.action, "reason": action.reason}
            rec.healing.append(entry)
            self.on_event("heal", entry | {"experiment": rec.experiment_id})
            if action.action == "give_up":
                return outcome
            tried.add(action.action)
            if action.action == "repair_edit":
                diff, _ = self.ws.diff(self.state.best_commit, rec.commit)
                try:
                    rep = proposer.repair(ctx, prop, f"{f.message} at {f.file}:{f.line}" if f.file else f.message, diff)
                except MemsysError as exc:
                    entry["result"] = f"repair proposal failed: {exc}"
                    return outcome
                if rep is None:
                    entry["result"] = "proposer cannot repair"
                    return outcome
                changed, err = self._apply(wt, rep)
                if err is not None:
                    entry["result"] = f"repair did not apply: {err}"
                    continue
                rec.edits += [asdict(e) for e in rep.edits]
                rec.config_overrides += rep.config_overrides
                rec.tokens += rep.tokens
                if not self._commit_repair(wt, rec, entry, f"{rec.experiment_id}: repair {attempt + 1}"):
                    return None
                rec.diff, rec.diff_stats = self.ws.diff(self.state.best_commit, rec.commit)
                edited = sorted(set(edited) | set(changed))
            elif action.action == "revert_import_edit":
                keep = edits_without_import(prop.edits, f.message)
                if keep is None:
                    entry["result"] = "no edit introduced that import"
                    return outcome
                self._reset_to(wt, self.state.best_commit)
                prop.edits = keep
                changed, err = self._apply(wt, prop)
                rec.edits = [asdict(e) for e in keep]
                if not self._commit_repair(wt, rec, entry, f"{rec.experiment_id}: revert import edit"):
                    return None
                rec.diff, rec.diff_stats = self.ws.diff(self.state.best_commit, rec.commit)
            elif action.action == "fewer_workers":
                self.workers_override = 1  # for this experiment only (reset below)
                time.sleep(min(5.0 * (attempt + 1), 30.0))
            elif action.action == "smaller_sample":
                sample = smoke or "tiny"
            elif action.action == "switch_local_llm":
                if not self.setup.research.loop.local_fallback:
                    entry["result"] = "local fallback off (research.loop.local_fallback=false): restart with llm=local"
                    return outcome
                entry["result"] = self._switch_to_local()
            entry.setdefault("result", "retrying")
        return outcome

    def _commit_repair(self, wt: Worktree, rec: ExperimentRecord, entry: dict[str, Any], message: str) -> bool:
        """Commit a healing step; a diff that leaves the surface is undone and ends the experiment."""
        try:
            rec.commit = self.ws.commit(wt, message)
            return True
        except ForbiddenEditError as exc:
            entry["result"] = f"refused: {exc}"
            rec.failure = _forbidden(exc)
            return False

    def _reset_to(self, wt: Worktree, commit: str) -> None:
        r = self.ws.repo_at(wt.path)
        r.git.checkout(commit, "--", ".")
        r.git.clean("-fd")

    def _count_failure(self, rec: ExperimentRecord) -> None:
        st = self.state
        infra = bool(rec.failure and rec.failure.get("is_infrastructure"))
        if not infra:
            ds = D.failed(D.DecisionState(st.best_value or 0.0, st.consecutive_degradations,
                                          st.iterations_on_hypothesis, st.pivots))
            st.consecutive_degradations, st.iterations_on_hypothesis = ds.consecutive_degradations, ds.iterations_on_hypothesis
            if st.consecutive_degradations >= self.setup.research.loop.degradations_to_pivot:
                st.mode, st.current_hypothesis, st.consecutive_degradations = "pivot", None, 0
                st.pivots += 1

    def _finish(self, rec: ExperimentRecord) -> None:
        st = self.state
        rec.finished = _now()
        rec.sandbox = rec.sandbox or dict(st.sandbox)  # every row says which wall its numbers stood behind
        reader = rec.reader or {}
        st.tokens += rec.tokens + reader.get("billed_tokens", 0)  # cache hits cost nothing
        st.cost_usd += rec.cost_usd + reader.get("cost_usd", 0.0)
        append_record(self.run_dir, rec)
        self.records.append(rec)
        st.next_index = rec.index + 1
        st.save(self.run_dir)
        self._mlflow_child(rec)
        self.on_event("experiment", {"record": rec, "best": st.best_value})

    # ------------------------------------------------------------------ researcher context, tracking
    def _context(self) -> ResearchContext:
        return build_context(self.state, self.records, self.setup, self.preset, self.run_dir)

    def _mlflow_parent(self) -> None:
        if self.setup.eval.eval.mlflow and not self.state.mlflow_parent_run_id:
            self.state.mlflow_parent_run_id = start_parent_run(self.setup, self.run_id, self.state.base_commit)
            self.state.save(self.run_dir)

    def _mlflow_child(self, rec: ExperimentRecord) -> None:
        if self.state.mlflow_parent_run_id:
            log_experiment(self.state, rec, self.run_dir, self.run_id)

    def _mlflow_finish(self) -> None:
        if self.state.mlflow_parent_run_id:
            finish_parent_run(self.state, self.records)
