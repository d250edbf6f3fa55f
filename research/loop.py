"""The autonomous research loop: propose -> screen -> edit on a branch -> evaluate in the sandbox -> decide.

One experiment's stages live in research.experiment (and research.measure); this module owns the
run: its state, proposers, evaluations, the journal and resume. The journal (trajectory.jsonl) is
the single source of truth and is written first: the state is a fold over it (research.state),
the best ref and the shared Optuna study follow it, so ``memsys run --resume <run-id>`` after a
kill at any moment rebuilds the same run and continues where it stopped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import time
from contextlib import ExitStack
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.atomic import atomic_write_json
from harness.errors import ConfigError, LLMAuthError, MemsysError
from harness.paths import REPO_ROOT, cache_dir, runs_dir
from harness.surface import MUTABLE_SURFACE
from research import decide as D
from research.caches import SharedCache
from research.config import RunSetup, resume_overrides, run_setup_from_dict, user_memory_overrides
from research.edits import apply_config_overrides, apply_edits
from research.errors import EditApplyError, ForbiddenEditError, ProposalFormatError, RunStateError
from research.evaluate import (
    EvalJob,
    EvalOutcome,
    evaluate,
    open_gateway,
    reader_config_for_sandbox,
    scaled_timeout,
    short_socket_dir,
)
from research.experiment import Experiment
from research.failures import FailureClass, _failure, one_line
from research.guarantees import check_sandbox
from research.presets import check_presets
from research.proposers.base import Proposal, Proposer, ResearchContext
from research.rundir import RunDir
from research.state import LoopState
from research.tracking import finish_parent_run, log_experiment, start_parent_run
from research.trajectory import ExperimentRecord, TrajectoryError, append_record, read_trajectory, repair_trajectory
from research.workspace import Workspace, Worktree

log = logging.getLogger(__name__)

#: failures of the unchanged code that a second try can outlive (the baseline has no edit to heal)
BASELINE_RETRY = (FailureClass.TIMEOUT, FailureClass.API_ERROR, FailureClass.INFRASTRUCTURE)


def _now() -> str:
    return datetime.now().isoformat(timespec="seconds")


class ResearchLoop:
    def __init__(self, setup: RunSetup, run_id: str, *, resume: bool = False,
                 llm_opener: Callable[..., Any] | None = None, sandbox: Any = None,
                 on_event: Callable[[str, dict[str, Any]], None] | None = None):
        from research.levers import held_levers

        self.setup, self.run_id = setup, run_id
        self.held = held_levers(setup.research.fixed_levers)  # research.fixed_levers
        self.paths = RunDir.of(run_id)  # every file name of the run folder
        self.run_dir = self.paths.root
        self.resume = resume
        self.on_event = on_event or (lambda kind, data: None)
        self._llm_opener = llm_opener
        self._sandbox = sandbox
        rc = setup.research
        repo = Path(rc.repo) if rc.repo else REPO_ROOT
        self.ws = Workspace(repo, run_id, self.paths.worktrees)
        self.preset = setup.eval.memory.name
        self.records: list[ExperimentRecord] = []
        self.state: LoopState | None = None
        self.llm = None
        self.workers_override: int | None = None
        self._stack: ExitStack | None = None
        self._proposers: dict[str, Proposer] = {}
        self.study = None
        self.gateway = None
        self.executor = None  # where evaluations run (research.executor); None: here, as research.executor=local
        self.budget = None
        self.shared_cache = SharedCache.for_split(cache_dir(), "dev")
        self.heldout_cache = SharedCache.for_split(cache_dir(), "test")
        self._configs: dict[str, Any] = {}
        self._absent: dict[str, frozenset[str]] = {}  # commit -> levers the memsys there lacks
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
        """The journal's records; a run killed before its first record has none (not an error)."""
        try:
            for w in repair_trajectory(self.run_dir):
                log.warning(w)
            return read_trajectory(self.run_dir)[0]
        except TrajectoryError as exc:
            if "no trajectory at" in str(exc):
                return []
            raise

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
        base = self._start_commit(self.ws.head_commit())
        self.ws.init_refs(base)
        atomic_write_json(self.paths.config, {"config": self.setup.eval.raw | {"research": asdict(self.setup.research)},
                                                          "overrides": self.setup.overrides})
        self.state = LoopState(self.run_id, str(self.ws.root), base, base)
        self.state.save(self.run_dir)

    def _start_commit(self, head: str) -> str:
        """HEAD, or HEAD with the user's ``memory.*`` overrides written into the run's preset and
        committed (on a scratch branch; the run's refs keep it). An evaluation reads its preset from the
        tree it evaluates, so overrides kept only in this process's config would be dropped silently; as
        a commit they are the run's starting point for the baseline, every experiment, the best ref and
        a replay alike. The user's checkout is not touched."""
        over = user_memory_overrides(self.setup.overrides)
        if not over:
            return head
        wt = self.ws.create("start", head)
        try:
            changed = apply_config_overrides(wt.path, self.preset, over, MUTABLE_SURFACE)
            check_presets(wt.path, changed)
            commit = self.ws.commit(wt, f"run {self.run_id} starts from {self.preset} with " + " ".join(over))
        except (EditApplyError, ForbiddenEditError) as exc:
            raise ConfigError(f"cannot start from memory={self.preset} with {' '.join(over)}: {one_line(exc)}") from exc
        finally:
            self.ws.discard(wt)
        log.info("the run starts from %s: %s", commit[:10], " ".join(over))
        return commit

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
        sandbox_info = check_sandbox(self._sandbox_obj(), allow_weak=self.setup.research.sandbox.allow_weak)
        self._init_state()
        st = self.state
        st.sandbox = sandbox_info
        self.on_event("sandbox", sandbox_info)
        started = time.monotonic() - st.elapsed_s
        with ExitStack() as stack:
            self._stack = stack
            if st.local_switched and self.setup.eval.llm.backend != "local":
                self._use_local_config()  # the 403 heal of the killed run holds after resume
            self._open_llm(stack)
            self._open_executor(stack)
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
            reason = self._stop_reason()
            if reason:
                st.status, st.stop_reason = "finished", reason
                self._confirm()
                return
            if st.next_index == 0:
                self._baseline()
            else:
                self.workers_override = None  # a rate-limit backoff lasts one experiment
                k = self._round_size()
                if k > 1:
                    from research.round import Round

                    Round(self, [self._proposer_for(proposers, st.next_index)] * k).run()
                else:
                    Experiment(self, self._proposer_for(proposers, st.next_index)).run()
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
        from research.confirm import confirm, describe

        self.on_event("confirm", {"split": cc.split})
        record = confirm(self)
        atomic_write_json(self.paths.confirmation, record)
        self.on_event("confirmed", {"record": record, "line": describe(record)})

    def _round_size(self) -> int:
        """Candidates this round: research.parallel, never past the experiment budget nor the proposal cap."""
        st, b = self.state, self.setup.research.budget
        cap = self.setup.research.loop.max_proposals_factor * b.experiments
        return max(1, min(self.setup.research.parallel, b.experiments - st.evaluated, cap - st.proposals))

    def _stop_reason(self) -> str | None:
        st, b, lc = self.state, self.setup.research.budget, self.setup.research.loop
        if st.next_index > 0 and st.best_value is None:
            return "the baseline evaluation failed; fix it before optimizing"
        if st.evaluated >= b.experiments:
            return f"experiment budget spent ({st.evaluated}/{b.experiments} evaluated)"
        if st.proposals >= lc.max_proposals_factor * b.experiments:
            return f"proposal cap reached ({st.proposals} proposals, {st.evaluated} evaluated)"
        if st.elapsed_s >= b.wall_time_s:
            return f"wall-time budget spent ({st.elapsed_s:.0f}s)"
        if st.tokens >= b.tokens:
            return f"token budget spent ({st.tokens})"
        if st.cost_usd >= b.usd:
            return f"USD budget spent ({st.cost_usd:.2f})"
        last = self.records[-1] if self.records else None
        if last is not None and (last.failure or {}).get("cls") == "auth" and last.decision == "failed":
            return (f"the endpoint refused the key ({last.failure.get('message', '')[:120]}); "
                    "fix the key or allow research.loop.local_fallback")
        if st.pivots > lc.max_pivots:
            return f"pivot cap reached ({st.pivots})"
        vals = [r.objective_value for r in self.records
                if r.index > 0 and r.objective_value is not None and r.decision in ("proceed", "iterate", "pivot")]
        recent_proceeds = any(r.decision == "proceed" for r in self.records[-lc.ceiling_window:])
        if not recent_proceeds and D.ceiling_reached(vals, lc.ceiling_window, lc.ceiling_band):
            return f"ceiling: last {lc.ceiling_window} evaluations within {lc.ceiling_band:.1%}"
        return None

    # ------------------------------------------------------------------ LLM, proposers
    def _needs_llm(self) -> bool:
        return self.setup.eval.eval.reader == "llm" or self.setup.research.proposer in ("llm", "alternate", "hybrid")

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

    def _use_local_config(self) -> Any:
        from memsys.config import LLMConfig, compose, validate

        old = self.setup.eval.llm
        self.setup.eval.llm = validate(LLMConfig, compose("run", ["llm=local"]).llm, where="llm=local")
        return old

    def switch_to_local(self) -> str:
        """The paper's 403 case: continue on the embedded local model (reader and researcher)."""
        old = self._use_local_config()
        try:
            self._open_llm(self._stack)
        except MemsysError as exc:
            self.setup.eval.llm = old
            return f"local fallback failed: {exc}"
        for p in self._proposers.values():
            if hasattr(p, "llm"):
                p.llm = self.llm
        return f"switched reader and researcher from {old.model} to the embedded {self.setup.eval.llm.model}"

    def _make_proposers(self) -> dict[str, Proposer]:
        from research.proposers.factory import check_context_fits, make_proposers

        self.study = self._rebuild_study()
        check_context_fits(self.setup)
        self._proposers = make_proposers(self.setup, self.llm, self.study)
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

    # ------------------------------------------------------------------ configs, keys, the study
    def config_at(self, commit: str) -> Any:
        """The resolved memory config at ``commit`` under this checkout's schema (None when the
        tree's preset no longer parses with it, e.g. after an edit that added a field)."""
        if commit not in self._configs:
            from omegaconf import OmegaConf

            from harness.config import validate
            from memsys.config import MemoryConfig

            try:
                node = OmegaConf.create(self.ws.file_at(commit, f"configs/memory/{self.preset}.yaml"))
                node.pop("defaults", None)
                self._configs[commit] = validate(MemoryConfig, OmegaConf.merge(OmegaConf.structured(MemoryConfig), node))
            except Exception as exc:  # any failure means "not comparable", never a crash
                log.debug("no resolvable config at %s: %s", commit[:10], exc)
                self._configs[commit] = None
        return self._configs[commit]

    def absent_at(self, commit: str) -> frozenset[str]:
        """Levers of this checkout's catalogue that the memsys at ``commit`` does not declare (a run
        resumed after an upgrade, ``research.repo`` on an older tree, an edit that removed a field).
        Read from that tree's config source, never imported (research/target_schema.py)."""
        if commit not in self._absent:
            from research.levers import absent_levers
            from research.target_schema import CONFIG_SOURCE, schema_paths

            try:
                paths = schema_paths(self.ws.file_at(commit, CONFIG_SOURCE))
            except Exception as exc:  # an unreadable tree: nothing is known to be absent
                log.debug("no config source at %s: %s", commit[:10], exc)
                paths = None
            absent = frozenset(absent_levers(paths) if paths is not None else ())
            if absent and absent not in self._absent.values():  # said once per distinct set
                self.on_event("note", {"text": f"not offered: {', '.join(sorted(absent))} (this checkout's "
                                               f"schema has them, the memsys at {commit[:10]} does not)"})
            self._absent[commit] = absent
        return self._absent[commit]

    def code_tree(self, commit: str) -> str:
        """The tree hash of memsys/ at ``commit``: code identity independent of commit history."""
        return self.ws.tree_id(commit, "memsys")

    def effective_key_at(self, commit: str) -> str:
        from research.effective import effective_key as cfg_key
        from research.experiment import effective_key

        cfg = self.config_at(commit)
        if cfg is not None:
            return effective_key(self.code_tree(commit), cfg_key(cfg))
        preset = self.ws.tree_id(commit, "configs/memory")
        return effective_key(self.code_tree(commit), preset)

    def evaluated_with_key(self, key: str) -> ExperimentRecord | None:
        """An earlier record with this effective key that was measured (or is the baseline)."""
        for r in self.records:
            if r.effective_key == key and r.objective_value is not None and r.decision not in ("failed",):
                return r
        return None

    def _rebuild_study(self) -> Any:
        from research.study import SharedStudy

        sc, ev = self.setup.research.study, self.setup.eval
        name = sc.name or f"{ev.benchmark.name}-{ev.eval.split}-{ev.eval.sample}-{ev.objective}"
        study = SharedStudy(seed=self.setup.research.seed, storage=sc.storage, name=name, run_id=self.run_id)
        for rec in self.records:
            self._study_add(rec, study)
        return study

    def _study_add(self, rec: ExperimentRecord, study: Any = None) -> None:
        study = study or self.study
        if study is None or rec.objective_value is None or not rec.commit or rec.decision in ("failed", "rejected"):
            return
        cfg = self.config_at(rec.commit)
        if cfg is not None:
            study.add(cfg, rec.objective_value, rec.index)

    # ------------------------------------------------------------------ evaluation
    def _eval_setup(self, sample: str | None, eval_run_id: str, split: str | None = None, *,
                    reader: str | None = None, complement: bool = False) -> Any:
        """The trusted setup of one evaluation: the run's benchmark, split and objective (composed
        from this checkout's configs, never from the worktree's), with this evaluation's sample."""
        from benchmarks.config import EvalSetup

        ev = self.setup.eval
        changes: dict[str, Any] = dict(split=split or ev.eval.split,
                                       sample=sample if sample is not None else (ev.eval.sample or "full"),
                                       run_id=eval_run_id, mlflow=False, resume=False, complement=complement,
                                       workers=self.workers_override or ev.eval.workers)
        if reader is not None and reader != ev.eval.reader:
            changes |= {"reader": reader, "objective": "auto"}  # the screen: reader-free context recall
        return EvalSetup(dataclasses.replace(ev.eval, **changes), ev.benchmark, ev.memory, ev.llm, ev.raw)

    def _open_executor(self, stack: ExitStack) -> None:
        from research.executor import make_executor

        self.executor = make_executor(self.setup.research.execution)
        stack.callback(self.executor.close)
        self.on_event("executor", {"executor": self.executor.name, "detail": self.executor.describe()})

    def _sandbox_obj(self) -> Any:
        if self._sandbox is None:
            from sandbox import make_sandbox

            self._sandbox = make_sandbox(self.setup.research.sandbox.backend)
            log.info("sandbox backend: %s", getattr(self._sandbox, "name", "?"))
        return self._sandbox

    def run_eval(self, wt: Worktree, rec: ExperimentRecord | str, sample: str | None, tag: str = "", *,
                 reader: str | None = None, code_changed: bool = True, edited: Any = (), complement: bool = False,
                 split: str | None = None, heldout: bool = False) -> EvalOutcome:
        """One two-half evaluation of the tree at ``wt``. The folder is keyed by the commit and what is
        asked, so a resumed experiment never picks up partial answers made by other code."""
        sc = self.setup.research.sandbox
        exp_id = rec if isinstance(rec, str) else rec.experiment_id
        head = self.ws.head_of(wt)
        key = hashlib.sha256(json.dumps([head, reader, sample, complement, split, heldout]).encode()).hexdigest()[:10]
        folder = self.paths.evals(exp_id, f"{tag}-{key}")
        use_reader = (reader or self.setup.eval.eval.reader) == "llm"
        setup = self._eval_setup(sample, f"{self.run_id}-{exp_id}{tag}", split, reader=reader, complement=complement)
        job = EvalJob(setup, wt.path, self.preset, folder / "untrusted", runs_root=folder,
                      wall_timeout_s=sc.wall_timeout_s if sc.wall_timeout_s is not None else scaled_timeout(setup),
                      memory_bytes=int(sc.memory_gb * (1 << 30)),
                      reader_llm=reader_config_for_sandbox(self.setup.eval.llm) if self.gateway and use_reader else {})
        shared = self.heldout_cache if heldout else self.shared_cache  # test-split text never reaches dev sandboxes
        stage = ("screen" if tag.startswith("-screen") else "probe" if tag == "-probe" else
                 "check" if "check" in tag else "evaluate")

        def progress(done: int, n: int) -> None:
            self.on_event("progress", {"experiment": exp_id, "stage": stage, "done": done, "total": n})

        def started(node: str, host: str) -> None:  # executor=ray: the node is known before the evaluation ends
            self.on_event("started", {"experiment": exp_id, "stage": stage, "node": node, "host": host})

        out = evaluate(job, self._sandbox_obj(), gateway=self.gateway if use_reader else None, shared=shared,
                       parent_metrics=None, code_changed=code_changed, edited_paths=list(edited), on_progress=progress,
                       executor=self.executor, on_start=started)
        if isinstance(rec, ExperimentRecord):
            self._note_eval(rec, out)
        if out.placement and out.placement.get("executor_node") != "local":
            self.on_event("placed", {"experiment": exp_id, "stage": stage, "node": out.placement["executor_node"],
                                     "host": out.placement["host"], "untrusted_s": out.placement["untrusted_s"]})
        return out

    _run_eval = run_eval  # the name confirm and replay used

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

    @staticmethod
    def eval_dir(out: EvalOutcome) -> Path | None:
        if out.eval_result is not None:
            return Path(out.eval_result.run_dir)
        run_dir = (out.result or {}).get("run_dir")  # a measurement read back from a round file on resume
        return Path(run_dir) if run_dir else None

    @staticmethod
    def rows(eval_dir: str | Path | None) -> list[dict[str, Any]]:
        from research.diagnosis import read_rows

        return read_rows(eval_dir)

    def paired(self, objective: str, rows: list[dict[str, Any]], ref_rows: list[dict[str, Any]]) -> Any:
        """Candidate rows against reference rows, per question on the questions both answered, at the run's
        alpha and seed: the one comparison behind the probe, the decision and the check."""
        from research.stats import paired_test, per_question

        return paired_test(per_question(objective, rows), per_question(objective, ref_rows),
                           confidence=1 - self.setup.research.loop.alpha, seed=self.setup.research.seed)

    def relative(self, path: str | Path | None) -> str:
        if not path:
            return ""
        try:
            return str(Path(path).relative_to(self.run_dir))
        except ValueError:
            return str(path)

    def absolute(self, rel: str) -> str | None:
        return str(self.run_dir / rel) if rel else None

    # ------------------------------------------------------------------ the check on a disjoint dev slice
    def check(self, exp: Experiment, d: D.Decision) -> D.Decision:
        """Before the best ref moves: the gain must hold on dev questions the run was not scored on."""
        rec, lc = exp.rec, self.setup.research.loop
        sample = self.setup.eval.eval.sample
        if not lc.check:
            return d
        if sample in (None, "", "full"):
            rec.check = {"skipped": "the run's sample is the whole dev split: no disjoint slice left"}
            return d
        self.stage(rec, "check", f"complement of {sample} on dev")
        t = time.perf_counter()
        cand = self.run_eval(exp.wt, rec, None, "-check", complement=True)
        best_rows = self._best_check_rows()
        rec.durations["check_s"] = time.perf_counter() - t
        if not cand.ok or best_rows is None:
            rec.check = {"passed": False, "reason": "the check evaluation failed"}
            return dataclasses.replace(d, kind="iterate", reason=f"iterate: {d.reason}, but the check on the disjoint "
                                       "dev slice failed to run")
        test = self.paired(rec.objective, self.rows(self.eval_dir(cand)), best_rows)
        held = test.mean_delta >= 0 and test.p_worse >= lc.alpha
        rec.check = test.to_dict() | {"passed": held, "value": cand.objective_value,
                                      "eval_dir": self.relative(self.eval_dir(cand))}
        if held:
            return dataclasses.replace(d, reason=f"{d.reason}; held on the disjoint dev slice ({test.mean_delta:+.4f})")
        return dataclasses.replace(d, kind="iterate", reason=f"iterate: the gain did not hold on the disjoint dev slice "
                                   f"({test.mean_delta:+.4f}, p_worse={test.p_worse:.3g})")

    def _best_check_rows(self) -> list[dict[str, Any]] | None:
        best = self.state.best_commit
        wt = self.ws.create("check-best", best)
        try:
            out = self.run_eval(wt, "check-best", None, f"-{best[:10]}", complement=True, code_changed=False)
        finally:
            self.ws.discard(wt)  # a scratch worktree, not an experiment: no branch kept
        return self.rows(self.eval_dir(out)) if out.ok else None

    # ------------------------------------------------------------------ applying changes
    def apply_proposal(self, wt: Worktree, prop: Proposal) -> tuple[list[str], Exception | None]:
        try:
            changed = apply_config_overrides(wt.path, self.preset, prop.config_overrides, MUTABLE_SURFACE)
            changed += apply_edits(wt.path, prop.edits, MUTABLE_SURFACE)
            check_presets(wt.path, changed)
            return changed, None
        except (EditApplyError, ForbiddenEditError) as exc:
            return [], exc

    _apply = apply_proposal  # the name replay used

    def reset_worktree(self, wt: Worktree) -> None:
        self.ws.restore(wt)

    def reset_to(self, wt: Worktree, commit: str) -> None:
        self.ws.restore(wt, commit)

    def commit_repair(self, wt: Worktree, rec: ExperimentRecord, entry: dict[str, Any], message: str) -> bool:
        """Commit a healing step; a diff that leaves the surface is undone and ends the experiment."""
        try:
            rec.commit = self.ws.commit(wt, message)
        except ForbiddenEditError as exc:
            entry["result"] = f"refused: {exc}"
            rec.failure = _failure(FailureClass.FORBIDDEN_EDIT, str(exc), code_changed=True).to_dict() | {"stage": "commit"}
            return False
        rec.diff, rec.diff_stats = self.ws.diff(rec.parent_commit, rec.commit)
        rec.effective_key = self.effective_key_at(rec.commit)  # what is evaluated now (repeat detection)
        return True

    # ------------------------------------------------------------------ baseline and recording
    def _baseline(self) -> None:
        st = self.state
        rec = ExperimentRecord(self.run_id, 0, "exp-000", "baseline", st.base_commit, started=_now(),
                               hypothesis="baseline: the starting configuration", objective=self.setup.eval.objective)
        self.stage(rec, "evaluate", "baseline")
        t0 = time.perf_counter()
        wt = self.ws.create(rec.experiment_id, st.base_commit)
        rec.commit, rec.branch = st.base_commit, wt.branch
        try:
            out = self.run_eval(wt, rec, None, code_changed=False)
            if not out.ok and out.failure is not None and out.failure.cls in BASELINE_RETRY:
                entry = {"attempt": 1, "action": "continue", "stage": "evaluate",
                         "reason": f"{out.failure.cls.value}: the same evaluation once more, its written answers kept"}
                rec.healing.append(entry)
                out = self.run_eval(wt, rec, None, code_changed=False)  # same folder: it resumes, it does not restart
                entry["result"] = "ok" if out.ok else f"failed again ({out.failure.cls.value if out.failure else 'no value'})"
        finally:
            self.ws.remove(wt.path)
        rec.durations = {"eval_s": time.perf_counter() - t0, "total_s": time.perf_counter() - t0}
        rec.effective_key = self.effective_key_at(st.base_commit)
        if out.ok and out.objective_value is not None:
            rec.objective_value, rec.metrics, rec.decision = out.objective_value, out.result["metrics"], "baseline"
            rec.eval_run_id, rec.mlflow_run_id = out.result["run_id"], out.result.get("mlflow_run_id")
            rec.eval_dir = self.relative(self.eval_dir(out))
        else:
            rec.failure = out.failure.to_dict() if out.failure else {"cls": "invalid_metric", "message": "no objective value"}
        self.finish(rec, None, None)

    def finish(self, rec: ExperimentRecord, prop: Proposal | None, proposer: Proposer | None) -> None:
        """Journal first (the commit point), then what follows from it: state, best ref, study."""
        from research.lessons import lesson_for

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
        from research.context import build_context
        from research.lessons import withheld_levers
        from research.levers import render_levers

        st = self.state
        cfg = self.config_at(st.start_commit) or self.config_at(st.best_commit)
        reader_free = self.setup.eval.eval.reader == "none"
        withheld = withheld_levers(self.records, st.start_commit, pivot=st.mode == "pivot")
        absent = self.absent_at(st.start_commit) | self.held.lever_ids  # neither is offered nor sampled
        knobs = (render_levers(cfg, reader_free=reader_free, withheld=withheld, absent=absent) if cfg is not None
                 else "(the preset no longer parses with the base schema)")
        ctx = build_context(st, self.records, self.setup, self.preset, self.run_dir, knobs=knobs, mode_rule=st.last_rule)
        ctx.reader_free, ctx.withheld, ctx.absent = reader_free, withheld, absent
        if cfg is not None:
            ctx.memory = cfg
        return ctx

    _context = context

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
