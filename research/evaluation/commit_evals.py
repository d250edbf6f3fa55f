"""The run's evaluations: where they run (sandbox, executor), what each is asked, where its files go,
and the one paired comparison every decision uses.

Why apart from the loop: an evaluation is the trusted half of the scorer's boundary. Its setup (split,
sample, objective) is composed from this checkout's configs and never from the tree it evaluates; the
caches of dev and test are kept apart so no test-split text reaches a dev sandbox. Keeping that in one
small module keeps it reviewable against a hostile candidate, apart from the loop's bookkeeping.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

from harness.paths import cache_dir
from research.config import RunSetup
from research.evaluation.caches import SharedCache
from research.evaluation.reader_link import reader_config_for_sandbox
from research.evaluation.two_half import EvalJob, EvalOutcome, evaluate, scaled_timeout

log = logging.getLogger(__name__)


def eval_dir(out: EvalOutcome) -> Path | None:
    """The scored folder of an evaluation (its rows, metrics), or None when it produced none."""
    if out.eval_result is not None:
        return Path(out.eval_result.run_dir)
    run_dir = (out.result or {}).get("run_dir")  # a measurement read back from a round file on resume
    return Path(run_dir) if run_dir else None


def stage_of(tag: str) -> str:
    """The stage an evaluation's tag names, as progress events report it."""
    if tag.startswith("-screen"):
        return "screen"
    if tag.startswith("-probe"):  # the early stop's nested samples: -probe, -probe-<sample>
        return "probe"
    return "check" if "check" in tag else "evaluate"


class Evaluations:
    def __init__(self, setup: RunSetup, run_id: str, folder_for: Callable[[str, str], Path],
                 on_event: Callable[[str, dict[str, Any]], None], sandbox: Any = None):
        """``folder_for(experiment_id, tag)``: the run folder's path for one evaluation (the loop's run
        folder names it; this module only receives paths)."""
        self.setup, self.run_id, self.folder_for, self.on_event = setup, run_id, folder_for, on_event
        self.preset = setup.eval.memory.name
        self._sandbox = sandbox
        self.executor = None  # where evaluations run (research.executor); None: here, as research.executor=local
        self.workers_override: int | None = None  # a rate-limit heal's fewer workers, for one experiment
        self.shared_cache = SharedCache.for_split(cache_dir(), "dev")
        self.heldout_cache = SharedCache.for_split(cache_dir(), "test")

    def sandbox(self) -> Any:
        """The sandbox backend, made on first use (a resumed run checks it before anything else)."""
        if self._sandbox is None:
            from sandbox import make_sandbox

            self._sandbox = make_sandbox(self.setup.research.sandbox.backend)
            log.info("sandbox backend: %s", getattr(self._sandbox, "name", "?"))
        return self._sandbox

    def open_executor(self, stack: ExitStack) -> None:
        from research.execution.executor import make_executor

        self.executor = make_executor(self.setup.research.execution)
        stack.callback(self.executor.close)
        self.on_event("executor", {"executor": self.executor.name, "detail": self.executor.describe()})

    def eval_setup(self, sample: str | None, eval_run_id: str, split: str | None = None, *,
                   reader: str | None = None, complement: bool = False) -> Any:
        """The trusted setup of one evaluation: the run's benchmark, split and objective (composed
        from this checkout's configs, never from the worktree's), with this evaluation's sample."""
        from benchmarks.config import EvalSetup

        ev = self.setup.eval
        changes: dict[str, Any] = dict(split=split or ev.options.split,
                                       sample=sample if sample is not None else (ev.options.sample or "full"),
                                       run_id=eval_run_id, mlflow=False, resume=False, complement=complement,
                                       workers=self.workers_override or ev.options.workers)
        if reader is not None and reader != ev.options.reader:
            changes |= {"reader": reader, "objective": "auto"}  # the screen: reader-free context recall
        return EvalSetup(dataclasses.replace(ev.options, **changes), ev.benchmark, ev.memory, ev.llm, ev.raw)

    def run(self, tree: Path, head: str, exp_id: str, sample: str | None, tag: str = "", *, gateway: Any = None,
            reader: str | None = None, code_changed: bool = True, edited: Any = (), complement: bool = False,
            split: str | None = None, heldout: bool = False) -> EvalOutcome:
        """One two-half evaluation of the checkout at ``tree`` (commit ``head``). The folder is keyed by the
        commit and what is asked, so a resumed experiment never picks up partial answers made by other code."""
        sc = self.setup.research.sandbox
        key = hashlib.sha256(json.dumps([head, reader, sample, complement, split, heldout]).encode()).hexdigest()[:10]
        folder = self.folder_for(exp_id, f"{tag}-{key}")
        use_reader = (reader or self.setup.eval.options.reader) == "llm"
        setup = self.eval_setup(sample, f"{self.run_id}-{exp_id}{tag}", split, reader=reader, complement=complement)
        job = EvalJob(setup, tree, self.preset, folder / "untrusted", runs_root=folder,
                      wall_timeout_s=sc.wall_timeout_s if sc.wall_timeout_s is not None else scaled_timeout(setup),
                      memory_bytes=int(sc.memory_gb * (1 << 30)),
                      reader_llm=reader_config_for_sandbox(self.setup.eval.llm) if gateway and use_reader else {})
        shared = self.heldout_cache if heldout else self.shared_cache  # test-split text never reaches dev sandboxes
        stage = stage_of(tag)

        def progress(done: int, n: int) -> None:
            self.on_event("progress", {"experiment": exp_id, "stage": stage, "done": done, "total": n})

        def started(node: str, host: str) -> None:  # executor=ray: the node is known before the evaluation ends
            self.on_event("started", {"experiment": exp_id, "stage": stage, "node": node, "host": host})

        out = evaluate(job, self.sandbox(), gateway=gateway if use_reader else None, shared=shared,
                       parent_metrics=None, code_changed=code_changed, edited_paths=list(edited), on_progress=progress,
                       executor=self.executor, on_start=started)
        if out.placement and out.placement.get("executor_node") != "local":
            self.on_event("placed", {"experiment": exp_id, "stage": stage, "node": out.placement["executor_node"],
                                     "host": out.placement["host"], "untrusted_s": out.placement["untrusted_s"]})
        return out

    def paired(self, objective: str, rows: list[dict[str, Any]], ref_rows: list[dict[str, Any]]) -> Any:
        """Candidate rows against reference rows, per question on the questions both answered, at the run's
        alpha and seed: the one comparison behind the probe, the decision and the check."""
        from research.evaluation.stats import paired_test, per_question

        return paired_test(per_question(objective, rows), per_question(objective, ref_rows),
                           confidence=1 - self.setup.research.loop.alpha, seed=self.setup.research.seed)
