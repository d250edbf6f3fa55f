"""The autonomous research loop: propose -> screen -> edit on a branch -> evaluate in the sandbox -> decide.

One experiment's stages live in research.loop.experiment (and research.loop.measure); this module owns the
run: its state, proposers, the journal and resume. What it delegates, one concern each: configs and
keys per commit (research.loop.commits), evaluations and the paired test (research.evaluation.commit_evals), the check
on a disjoint dev slice (research.loop.slice_check), the LLM endpoint and gateway (research.loop.run_llm), when
to stop (research.stop) and the baseline (research.loop.baseline). The journal (trajectory.jsonl) is
the single source of truth and is written first: the state is a fold over it (research.loop.state),
the best ref and the shared Optuna study follow it, so ``memsys run --resume <run-id>`` after a
kill at any moment rebuilds the same run and continues where it stopped.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from contextlib import ExitStack
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.atomic import atomic_write_json
from harness.errors import ConfigError, LLMAuthError, MemsysError
from harness.paths import REPO_ROOT, runs_dir
from research.config import RunSetup, resume_overrides, run_setup_from_dict, study_name, user_memory_overrides
from research.errors import ProposalFormatError, RunStateError
from research.evaluation.commit_evals import Evaluations
from research.evaluation.two_half import EvalOutcome
from research.failures import infeasible_config, one_line
from research.journal.tracking import finish_parent_run, log_experiment, start_parent_run
from research.journal.trajectory import ExperimentRecord, append_record, measured_with_key, resume_journal
from research.loop.commits import CommitView, start_commit
from research.loop.experiment import Experiment
from research.loop.guarantees import check_sandbox
from research.loop.run_context import LoopHooks, RunContext
from research.loop.run_llm import RunLLM
from research.loop.rundir import RunDir
from research.loop.state import LoopState
from research.loop.stop import round_size, stop_reason
from research.proposers.base import Proposal, Proposer, ResearchContext
from research.workspace.repo import Workspace, Worktree

log = logging.getLogger(__name__)


def _now() -> str:
    return datetime.now().isoformat(timespec="seconds")


class ResearchLoop:
    def __init__(self, setup: RunSetup, run_id: str, *, resume: bool = False,
                 llm_opener: Callable[..., Any] | None = None, sandbox: Any = None,
                 on_event: Callable[[str, dict[str, Any]], None] | None = None):
        from research.levers.scope import held_levers

        self.setup, self.run_id = setup, run_id
        self.held = held_levers(setup.research.fixed_levers)  # research.fixed_levers
        self.paths = RunDir.of(run_id)  # every file name of the run folder
        self.run_dir = self.paths.root
        self.resume = resume
        self.on_event = on_event or (lambda kind, data: None)
        rc = setup.research
        repo = Path(rc.repo) if rc.repo else REPO_ROOT
        self.ws = Workspace(repo, run_id, self.paths.worktrees)
        self.preset = setup.eval.memory.name
        self.records: list[ExperimentRecord] = []
        self.state: LoopState | None = None
        self.commits = CommitView(self.ws, self.preset, self.on_event)  # configs and keys per commit
        self.evals = Evaluations(setup, run_id, self.paths.evals, self.on_event, sandbox)
        self.llms = RunLLM(setup, llm_opener)
        self._proposers: dict[str, Proposer] = {}
        self.study = None
        self.round_keys: dict[str, str] = {}  # effective key -> candidate of the round in progress (research.parallel)

    now = staticmethod(_now)

    # ------------------------------------------------------------------ setup and resume
    @classmethod
    def from_run(cls, run_id: str, overrides: Sequence[str] = (), **kw: Any) -> "ResearchLoop":
        """The saved run, with ``overrides`` of its operational settings (research.config.RESUMABLE_KEYS:
        more budget, a longer sandbox timeout) applied and saved for later resumes."""
        paths = RunDir.of(run_id)
        if not paths.config.exists():
            known = [r for r in RunDir.known(runs_dir()) if RunDir.of(r).state.exists()] if runs_dir().exists() else []
            raise RunStateError(f"no optimization run '{run_id}' in {runs_dir()}; known: {', '.join(known) or 'none'}")
        raw = json.loads(paths.config.read_text())
        if overrides:
            raw = {"config": resume_overrides(raw["config"], overrides), "overrides": [*raw.get("overrides", []), *overrides]}
        setup = run_setup_from_dict(raw["config"], raw.get("overrides", []))  # validated before it is saved
        if overrides:
            atomic_write_json(paths.config, raw)
        return cls(setup, run_id, resume=True, **kw)

    def load_state(self) -> LoopState:
        """The saved state and trajectory of this run (for commands that act on a finished run)."""
        self.state = LoopState.load(self.run_dir)
        self.records = self._read_journal()
        return self.state

    def _read_journal(self) -> list[ExperimentRecord]:
        records, warnings = resume_journal(self.run_dir)
        for w in warnings:
            log.warning(w)
        return records

    def _init_state(self) -> None:
        if self.resume:
            return self._resume()
        if self.paths.state.exists():
            raise RunStateError(f"run '{self.run_id}' exists; resume it with: memsys run --resume {self.run_id}")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        dirty = self.ws.uncommitted_changes()
        if dirty:
            log.warning("the repo has uncommitted changes (%s...); the run starts from HEAD without them",
                        ", ".join(dirty[:3]))
        base = start_commit(self.ws, self.ws.head_commit(), self.preset, self.run_id,
                            user_memory_overrides(self.setup.overrides))
        self.ws.init_refs(base)
        atomic_write_json(self.paths.config, {"config": self.setup.eval.raw | {"research": asdict(self.setup.research)},
                                                          "overrides": self.setup.overrides})
        self.state = LoopState(self.run_id, str(self.ws.root), base, base)
        self.state.save(self.run_dir)

    def _resume(self) -> None:
        """Rebuild the state by folding the journal; prune what a kill left behind."""
        st = self.state = LoopState.load(self.run_dir)
        self.records = self._read_journal()
        st.reset_folded()
        for rec in self.records:
            self._fold(rec)
        if self.records and st.best_value is None:
            self._retry_baseline()
        self.ws.init_refs(st.base_commit)
        self.ws.move_best(st.best_commit)  # a kill between record and ref move leaves it behind
        pruned = self.ws.prune(keep_branches=[r.experiment_id for r in self.records])
        if getattr(pruned, "worktrees", None) or getattr(pruned, "branches", None):
            log.info("pruned what the killed run left: %s", pruned)
        st.status, st.stop_reason = "running", None
        st.save(self.run_dir)

    def _retry_baseline(self) -> None:
        """A run whose baseline failed has nothing to build on, and its cause (a timeout, a dead server) may
        be fixed by now: resuming measures the baseline again. Its journal (the failed record) is kept
        beside the new one; the evaluation folder is the same, so the answers it wrote are not asked again."""
        aside = self.paths.failed_baseline_journal()
        os.replace(self.paths.trajectory, aside)
        log.warning("the baseline failed (%s); measuring it again (the failed journal is kept as %s)",
                    (self.records[-1].failure or {}).get("message", "no value"), aside.name)
        self.records = []
        self.state.reset_folded()

    # ------------------------------------------------------------------ run
    def run(self) -> LoopState:
        sandbox_info = check_sandbox(self.evals.sandbox(), allow_weak=self.setup.research.sandbox.allow_weak)
        if not self.resume:
            self.warm_points(self.ws.head_commit(), frozenset())  # a preset that does not resolve: said before anything
        self._init_state()
        st = self.state
        st.sandbox = sandbox_info
        self.on_event("sandbox", sandbox_info)
        started = time.monotonic() - st.elapsed_s
        with ExitStack() as stack:
            if st.local_switched and self.setup.eval.llm.backend != "local":
                self.llms.use_local_config()  # the 403 heal of the killed run holds after resume
            self.llms.open(stack)
            self.evals.open_executor(stack)
            self._mlflow_parent()
            proposers = self._make_proposers()
            try:
                self._steps(proposers, started)
            except KeyboardInterrupt:
                st.status, st.stop_reason = "stopped", "interrupted (resume with memsys run --resume)"
                raise
            finally:
                st.elapsed_s = time.monotonic() - started
                st.save(self.run_dir)
                self.ws.prune(keep_branches=[r.experiment_id for r in self.records])
                self._mlflow_finish()
        return st

    def _steps(self, proposers: dict[str, Proposer], started: float) -> None:
        st = self.state
        while True:
            st.elapsed_s = time.monotonic() - started
            reason = stop_reason(st, self.records, self.setup.research)
            if reason:
                st.status, st.stop_reason = "finished", reason
                self._confirm()
                return
            if st.next_index == 0:
                self._baseline()
            else:
                self.evals.workers_override = None  # a rate-limit backoff lasts one experiment
                k = round_size(st, self.setup.research)
                if k > 1:
                    from research.loop.round import Round

                    Round(self.run_context(), [self._proposer_for(proposers, st.next_index)] * k).run()
                else:
                    Experiment(self.run_context(), self._proposer_for(proposers, st.next_index)).run()
            st.elapsed_s = time.monotonic() - started
            st.save(self.run_dir)

    def _confirm(self) -> None:
        """Held-out confirmation of baseline and best, once per best commit (see research.confirm)."""
        st = self.state
        cc = self.setup.research.confirm
        if not cc.enabled or st.best_value is None:
            return
        if st.confirmation.get("runs", {}).get("best", {}).get("commit") == st.best_commit:
            return
        from research.loop.confirm import confirm, describe

        if st.best_commit != st.base_commit:  # else nothing is evaluated (research.loop.confirm.confirm)
            self.on_event("confirm", {"split": cc.split})
        record = confirm(self.run_context())
        atomic_write_json(self.paths.confirmation, record)
        self.on_event("confirmed", {"record": record, "line": describe(record)})

    # ------------------------------------------------------------------ LLM, proposers
    def switch_to_local(self) -> str:
        """The paper's 403 case: reader and researcher continue on the embedded model (research.loop.run_llm)."""
        return self.llms.switch_to_local(self._proposers.values())

    def _make_proposers(self) -> dict[str, Proposer]:
        from research.proposers.factory import check_context_fits, make_proposers

        self.study = self.rebuild_study()
        check_context_fits(self.setup)
        self._proposers = make_proposers(self.setup, self.llms.llm, self.study)
        return self._proposers

    def _proposer_for(self, proposers: dict[str, Proposer], index: int) -> Proposer:
        if len(proposers) == 1:
            return next(iter(proposers.values()))
        return proposers["llm" if index % 2 == 1 else "optuna"]

    def propose(self, proposer: Proposer, ctx: ResearchContext, rec: ExperimentRecord) -> Proposal:
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
            entry["result"] = self.switch_to_local()
            if self.setup.eval.llm.backend != "local":  # the switch itself failed
                raise
            return proposer.propose(ctx)

    def propose_batch(self, proposer: Proposer, ctx: ResearchContext, k: int, rec: ExperimentRecord) -> list[Proposal]:
        """A round's proposals in one go (``Proposer.propose_batch``). A batch that fails altogether
        gives none: every candidate is then asked on its own (``propose``, with the 403 fallback), so a
        failure is recorded against the candidate it hits."""
        self.stage(rec, "propose", f"{proposer.name}: a batch of {k} candidates")
        try:
            return list(proposer.propose_batch(ctx, k))[:k]
        except (ProposalFormatError, MemsysError) as exc:
            self.stage(rec, "propose", f"the batch failed ({one_line(str(exc))[:160]}): asking one at a time")
            return []

    # ------------------------------------------------------------------ the study
    def evaluated_with_key(self, key: str) -> ExperimentRecord | None:
        return measured_with_key(self.records, key)

    def rebuild_study(self, records: Sequence[ExperimentRecord] | None = None, *, learn_infeasible: bool = True,
                       storage: bool = True) -> Any:
        """The run's study from its journal (``records``: a prefix of it, for research/perf/bench_infeasible.py,
        which also compares it without the infeasible trials and without the shared storage)."""
        from research.levers.study import SharedStudy

        rc = self.setup.research
        study = SharedStudy(seed=rc.seed, storage=rc.study.storage if storage else None, name=study_name(self.setup),
                            run_id=self.run_id, objectives=rc.objectives)
        for rec in self.records if records is None else records:
            self._study_add(rec, study, learn_infeasible=learn_infeasible)
        return study

    def _study_add(self, rec: ExperimentRecord, study: Any = None, *, learn_infeasible: bool = True) -> None:
        """An evaluated record teaches the study its values; one whose config failed on its own account
        (research.failures.infeasible_config) teaches it that the config is infeasible."""
        study = study or self.study
        if study is None or not rec.commit:
            return
        infeasible = (learn_infeasible and rec.decision == "failed"
                      and infeasible_config(rec.failure, [e.get("path", "") for e in rec.edits]))
        if not infeasible and (rec.objective_value is None or rec.decision in ("failed", "rejected")):
            return
        cfg = self.commits.config_at(rec.commit)
        if cfg is None:
            return
        if infeasible:
            study.add_infeasible(cfg, rec.index)
            return
        values = study.values_of(rec.objective_value, rec.metrics)  # research.objectives, from the journal
        if values is not None:
            study.add(cfg, values, rec.index)

    # ------------------------------------------------------------------ evaluation
    def run_eval(self, wt: Worktree, rec: ExperimentRecord | str, sample: str | None, tag: str = "",
                 **kw: Any) -> EvalOutcome:
        """One evaluation of the tree at ``wt`` (research.evaluation.commit_evals), through the run's gateway; an
        experiment's record gets the reader usage and cache merge it cost."""
        exp_id = rec if isinstance(rec, str) else rec.experiment_id
        out = self.evals.run(wt.path, self.ws.head_of(wt), exp_id, sample, tag, gateway=self.llms.gateway, **kw)
        if isinstance(rec, ExperimentRecord):
            self._note_eval(rec, out)
        return out

    def _note_eval(self, rec: ExperimentRecord, out: EvalOutcome) -> None:
        """Reader usage (the gateway's count) and the cache merge, onto the experiment's record."""
        rec.sandbox = dict(self.state.sandbox)
        if out.placement and out.placement.get("executor_node") != "local":  # which node ran it (executor=ray)
            rec.sandbox |= {"node": out.placement["executor_node"], "host": out.placement["host"]}
        if out.usage is not None:
            u = dict(rec.reader)
            for k, v in dataclasses.asdict(out.usage).items():
                u[k] = u.get(k, 0) + v
            rec.reader = u
        if out.cache is not None:
            rec.cache = out.cache.as_dict()

    def absolute(self, rel: str) -> str | None:
        return str(self.run_dir / rel) if rel else None

    def screen_leakage(self, parent: str, commit: str) -> dict[str, Any]:
        """The trusted leakage screen of ``parent..commit`` (research/evaluation/leakage_screen.py), read from
        the run's repository; {} when ``research.loop.leakage_screen`` is off."""
        if not self.setup.research.loop.leakage_screen:
            return {}
        from research.evaluation.leakage_screen import screen_commit

        return screen_commit(self.ws.root, parent, commit, self.setup.eval.benchmark.name)

    # ------------------------------------------------------------------ what a step sees
    def run_context(self) -> RunContext:
        """The narrow view a step gets of this run (research/loop/run_context.py), built per step: the
        state and journal it holds are the loop's current ones."""
        hooks = LoopHooks(researcher_context=self.context, propose=self.propose, propose_batch=self.propose_batch,
                          run_eval=self.run_eval, finish=self.finish, switch_to_local=self.switch_to_local,
                          screen_leakage=self.screen_leakage, on_event=self.on_event)
        return RunContext(self.setup, self.run_id, self.run_dir, self.preset, self.state, self.records, self.ws,
                          self.commits, self.evals, self.held, self.round_keys, hooks)

    # ------------------------------------------------------------------ baseline and recording
    def _baseline(self) -> None:
        from research.loop.baseline import measure_baseline

        measure_baseline(self.run_context())

    def finish(self, rec: ExperimentRecord, prop: Proposal | None, proposer: Proposer | None) -> None:
        """Journal first (the commit point), then what follows from it: state, best ref, study."""
        from research.proposers.lessons import lesson_for

        st = self.state
        self.stage(rec, "record", rec.decision)
        rec.finished = _now()
        rec.sandbox = rec.sandbox or dict(st.sandbox)  # every row says which wall its numbers stood behind
        rec.lesson = rec.lesson or lesson_for(rec, self.setup.eval.objective)
        append_record(self.run_dir, rec)
        self.records.append(rec)
        self._fold(rec)
        self.ws.move_best(st.best_commit)
        self._study_add(rec)
        st.save(self.run_dir)
        self._mlflow_child(rec)
        self.on_event("experiment", {"record": rec, "best": st.best_value})

    def _fold(self, rec: ExperimentRecord) -> None:
        """One journal row into the state, under this run's loop settings (resume folds them all)."""
        lc = self.setup.research.loop
        self.state.apply(rec, degradations_to_pivot=lc.degradations_to_pivot,
                         refine_from_attempt=lc.refine_from_attempt, eval_dir=self.absolute(rec.eval_dir))

    def stage(self, rec: ExperimentRecord, stage: str, detail: str = "") -> None:
        self.on_event("stage", {"experiment": rec.experiment_id, "stage": stage, "detail": detail})

    # ------------------------------------------------------------------ researcher context, tracking
    def context(self) -> ResearchContext:
        from research.levers.catalogue import render_levers
        from research.proposers.context import build_context
        from research.proposers.lessons import withheld_levers

        st = self.state
        cfg = self.commits.config_at(st.start_commit) or self.commits.config_at(st.best_commit)
        reader_free = self.setup.eval.options.reader == "none"
        withheld = withheld_levers(self.records, st.start_commit, pivot=st.mode == "pivot")
        absent = self.commits.absent_at(st.start_commit) | self.held.lever_ids  # neither is offered nor sampled
        knobs = (render_levers(cfg, reader_free=reader_free, withheld=withheld, absent=absent) if cfg is not None
                 else "(the preset no longer parses with the base schema)")
        ctx = build_context(st, self.records, self.setup, self.preset, self.run_dir, knobs=knobs, mode_rule=st.last_rule)
        ctx.reader_free, ctx.withheld, ctx.absent = reader_free, withheld, absent
        ctx.warm = self.warm_points(st.base_commit, absent)
        if cfg is not None:
            ctx.memory = cfg
        return ctx

    def warm_points(self, commit: str, absent: frozenset[str]) -> tuple[tuple[str, dict[str, Any]], ...]:
        """``research.study.warm_start``: each preset's lever values in ``commit``'s tree, but the levers this run
        holds or its memsys lacks (``absent``). ConfigError names a preset that is not there or does not resolve."""
        from research.levers.study import field_levers, params_of

        out = []
        for name in self.setup.research.study.warm_start:
            cfg = self.commits.config_at(commit, name)
            if cfg is None:
                raise ConfigError(f"research.study.warm_start: configs/memory/{name}.yaml is not a preset that "
                                  f"resolves in {self.ws.root} at {commit[:10]}")
            values = params_of(cfg, field_levers())
            out.append((name, {k: v for k, v in values.items() if k not in absent}))
        return tuple(out)

    def _mlflow_parent(self) -> None:
        if self.setup.eval.options.mlflow and not self.state.mlflow_parent_run_id:
            self.state.mlflow_parent_run_id = start_parent_run(self.setup, self.run_id, self.state.base_commit)
            self.state.save(self.run_dir)

    def _mlflow_child(self, rec: ExperimentRecord) -> None:
        if self.state.mlflow_parent_run_id:
            log_experiment(self.state, rec, self.run_dir, self.run_id)

    def _mlflow_finish(self) -> None:
        if self.state.mlflow_parent_run_id:
            finish_parent_run(self.state, self.records)
