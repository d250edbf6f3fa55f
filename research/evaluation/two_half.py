"""One evaluation in two halves: untrusted answers in the sandbox, trusted scoring here.

The evaluated tree's code (a worktree's ``memsys``) runs only inside the sandbox, as
``python -m memsys.predict REQUEST.json``. It gets a public view made here for this
evaluation (conversations, question ids and texts: no gold, no evidence, no category),
no network (its reader reaches the LLM through the host-side gateway's Unix socket),
read-only shared caches and a writable folder for its answers. Everything else happens in
this process, whose import path holds no worktree code: choosing the questions, reading
and validating the answers, scoring them against gold, writing the result, and merging
only verified cache entries. The objective's name and the question count are the ones
requested here, never read back from the sandbox.

``memsys eval`` and the research loop both call :func:`evaluate`, so a config scores the
same in and out of the loop.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from benchmarks.config import EvalSetup, baseline_budget
from benchmarks.runner import EvalResult, finish_eval, prepare_run, selection
from benchmarks.scoring import Usage
from benchmarks.views import write_public_view
from harness.atomic import atomic_write_bytes, atomic_write_json
from harness.errors import MemsysError
from harness.views import (
    ANSWERS_FILE,
    EMBEDDINGS_READONLY_ENV,
    REQUEST_FILE,
    STORES_READONLY_ENV,
    VIEW_FILE,
    PredictionFormatError,
    PredictRequest,
    read_answers,
)
from research.errors import ExecutorError
from research.evaluation.answer_progress import answer_progress
from research.evaluation.caches import MergeReport, SharedCache, code_namespace
from research.execution.executor import Executor, LocalExecutor
from research.execution.node import TaskRoots
from research.execution.worker import UntrustedResult, UntrustedTask
from research.failures import Failure, FailureClass, _failure, classify_exception, classify_result
from sandbox import SandboxResult, SandboxSpec

log = logging.getLogger(__name__)

RESULT_SCHEMA = "memsys-eval-result/1"
#: what the sandbox sees of the evaluated tree
SANDBOX_CODE_DIRS = ("memsys", "harness", "configs")
#: base_url the sandboxed reader uses; the host part is ignored over the socket


class Gateway(Protocol):
    """What an evaluation needs of the host-side LLM gateway (research.gateway.service.LLMGateway)."""

    socket_path: Path

    def usage(self) -> Any: ...

    def child_env(self) -> dict[str, str]: ...


@dataclass
class EvalJob:
    """What to evaluate: a trusted eval setup, and the tree whose memory system answers."""

    setup: EvalSetup
    code_root: Path
    memory_preset: str
    work_dir: Path  # untrusted folders: public/ (read-only), out/ and cache/ (writable)
    memory_overrides: Sequence[str] = ()
    runs_root: Path | None = None  # the trusted run folder is runs_root/<run_id>
    wall_timeout_s: float = 1800.0
    memory_bytes: int | None = 8 << 30
    reader_llm: dict[str, Any] = field(default_factory=dict)  # the reader's LLMConfig, as a dict


@dataclass
class EvalOutcome:
    ok: bool
    result: dict[str, Any] | None
    failure: Failure | None
    sandbox: SandboxResult | None
    result_status: str  # ok | missing | invalid
    usage: Usage | None = None
    cache: MergeReport | None = None
    eval_result: EvalResult | None = None
    placement: dict[str, Any] = field(default_factory=dict)  # where the untrusted half ran (node, host, seconds)

    @property
    def objective_value(self) -> float | None:
        return None if not self.result else self.result.get("objective_value")


def _python_paths() -> list[Path]:
    seen: list[Path] = []
    for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix):
        for p in (Path(prefix), Path(os.path.realpath(prefix))):
            if p not in seen:
                seen.append(p)
    return seen


def prepare_public(job: EvalJob, bench: Any) -> tuple[PredictRequest, Path]:
    """Fresh public/ folder (view + request), out/ and cache/ folders; returns the request."""
    work = job.work_dir.resolve()
    public, out, cache = work / "public", work / "out", work / "cache"
    shutil.rmtree(public, ignore_errors=True)
    write_public_view(bench, public)
    out.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    ev = job.setup.options
    llm = dict(job.reader_llm)
    req = PredictRequest(view_path=str(public / VIEW_FILE), out_dir=str(out), memory_preset=job.memory_preset,
                         memory_overrides=tuple(job.memory_overrides), reader=ev.reader, system=ev.system,
                         workers=ev.workers, full_context_budget=baseline_budget(job.setup), llm=llm,
                         resume=ev.resume)
    req.write(public / REQUEST_FILE)
    return req, public / REQUEST_FILE


def sandbox_spec(job: EvalJob, request_path: Path, *, gateway: Gateway | None, shared: SharedCache | None,
                 namespace: str) -> SandboxSpec:
    work = job.work_dir.resolve()
    root = job.code_root.resolve()
    env = {
        "PYTHONPATH": str(root),
        "MEMSYS_CONFIG_DIR": str(root / "configs"),
        "MEMSYS_CACHE_DIR": str(work / "cache"),
        "MEMSYS_RUNS_DIR": str(work / "out"),
        "HOME": str(work / "out"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "MPLBACKEND": "Agg",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    # only the code the untrusted half imports (import-linter keeps memsys to itself and harness) and
    # the config tree: not the rest of the checkout, whose runs/ may hold earlier runs' scored rows
    readonly = [root / d for d in SANDBOX_CODE_DIRS if (root / d).is_dir()]
    readonly += [work / "public", *[p for p in _python_paths() if p.is_dir()]]
    if gateway is not None:
        env.update(gateway.child_env())
        readonly.append(Path(gateway.socket_path).parent)
    if shared is not None:
        stores = shared.stores_dir(namespace)
        env[STORES_READONLY_ENV] = str(stores)
        readonly.append(stores)
        if shared.embeddings_path.exists():
            env[EMBEDDINGS_READONLY_ENV] = str(shared.embeddings_path)
            readonly.append(shared.embeddings_dir())
    argv = [sys.executable, "-m", "memsys.predict", str(request_path)]
    return SandboxSpec(argv=argv, workdir=work / "out", writable=[work / "out", work / "cache"], readonly=readonly,
                       env=env, network="none", wall_timeout_s=job.wall_timeout_s, memory_bytes=job.memory_bytes,
                       max_file_bytes=2 << 30, max_open_files=4096)


_MERGE_LOCK = threading.Lock()

#: failure classes that blame the endpoint or the budget: the gateway saw it, or it did not happen
_ENDPOINT_CLASSES = (FailureClass.AUTH, FailureClass.RATE_LIMIT, FailureClass.API_ERROR)


def _check_endpoint_claim(failure: Failure, gateway: Gateway | None, before: Any, code_changed: bool) -> Failure:
    """The sandbox's stderr is the evaluated code's word. A failure it blames on the endpoint or
    the budget (which the healer treats as infrastructure: no penalty, a retry, a switch of
    model, or a stop) is believed only if the host-side gateway saw such a reply."""
    budget = failure.message.startswith("budget")
    if failure.cls not in _ENDPOINT_CLASSES and not budget:
        return failure
    if gateway is not None:
        d = gateway.usage() - before
        # a prompt the cap refused was the evaluated code's own doing: never evidence of an endpoint failure
        if (budget and d.rejected_budget) or (not budget and d.errors - d.rejected_prompt):
            return failure
    return _failure(FailureClass.RUNTIME_ERROR, f"the evaluated code reported '{failure.message}', but the "
                    "gateway saw no such reply", code_changed=code_changed)


def _usage_delta(gateway: Gateway | None, before: Any) -> Usage | None:
    if gateway is None:
        return None
    d = gateway.usage() - before
    return Usage(prompt_tokens=d.prompt_tokens + d.cached_prompt_tokens,
                 completion_tokens=d.completion_tokens + d.cached_completion_tokens, cost_usd=d.cost_usd,
                 requests=d.requests, billed_tokens=d.prompt_tokens + d.completion_tokens, cache_hits=d.cache_hits)


def _result_dict(res: EvalResult) -> dict[str, Any]:
    return {"schema": RESULT_SCHEMA, "run_id": res.run_id, "run_dir": str(res.run_dir), "objective": res.objective,
            "objective_value": res.objective_value, "metrics": res.metrics, "n_questions": res.n_questions,
            "n_errors": res.n_errors, "wall_s": res.wall_s, "mlflow_run_id": res.mlflow_run_id}


@dataclass
class _Attempt:
    """What classifying a failure of one evaluation needs (the gateway's count before it ran)."""

    gateway: Gateway | None
    before: Any
    code_changed: bool
    edited_paths: list[str]
    raise_errors: bool
    sandboxed: bool

    def from_exception(self, exc: MemsysError, *, edits: bool) -> Failure:
        """``edits``: the error came from the evaluated code, so the edited paths may explain it."""
        failure = classify_exception(exc, code_changed=self.code_changed,
                                     **({"edited_paths": self.edited_paths} if edits else {}))
        return _check_endpoint_claim(failure, self.gateway, self.before, self.code_changed) if self.sandboxed else failure


def evaluate(job: EvalJob, sandbox: Any, *, gateway: Gateway | None = None, shared: SharedCache | None = None,
             llm: Any = None, parent_metrics: dict[str, Any] | None = None, code_changed: bool = False,
             edited_paths: Sequence[str] = (), raise_errors: bool = False, bench: Any = None,
             on_progress: Any = None, executor: Executor | None = None,
             on_start: Callable[[str, str], None] | None = None) -> EvalOutcome:
    """Run both halves. ``sandbox=None`` runs the untrusted half in this process (tests, benches,
    a user's own code): the same code and the same scoring, without isolation; ``raise_errors``
    then lets its typed errors through instead of classifying them. ``on_progress(done, total)``
    follows the answers as the untrusted half writes them. ``executor`` says where the sandbox
    runs (research.executor; default: here); the scoring always runs here. ``on_start(node, host)``:
    where the untrusted half started, as soon as it starts (executors that place tasks elsewhere)."""
    bench = bench if bench is not None else selection(job.setup)  # gold included: trusted side only
    if on_progress is None:
        return _evaluate(job, sandbox, gateway, shared, llm, parent_metrics, code_changed, edited_paths,
                         raise_errors, bench, executor, on_start)
    total = sum(len(c.questions) for c in bench.conversations)
    with answer_progress(job.work_dir / "out" / ANSWERS_FILE, total, on_update=on_progress):
        return _evaluate(job, sandbox, gateway, shared, llm, parent_metrics, code_changed, edited_paths,
                         raise_errors, bench, executor, on_start)


def _evaluate(job: EvalJob, sandbox: Any, gateway: Gateway | None, shared: SharedCache | None, llm: Any,
              parent_metrics: dict[str, Any] | None, code_changed: bool, edited_paths: Sequence[str],
              raise_errors: bool, bench: Any, executor: Executor | None,
              on_start: Callable[[str, str], None] | None = None) -> EvalOutcome:
    if sandbox is not None:
        pending = begin_sandboxed(job, bench, sandbox, gateway=gateway, shared=shared, parent_metrics=parent_metrics,
                                  code_changed=code_changed, edited_paths=edited_paths, raise_errors=raise_errors)
        try:
            ran: UntrustedResult | ExecutorError = (executor or LocalExecutor()).run(pending.task, on_start=on_start)
        except ExecutorError as exc:
            ran = exc
        return end_sandboxed(pending, ran)
    from harness.paths import runs_dir

    started = time.perf_counter()
    run_id, run_dir = prepare_run(job.setup, bench, job.runs_root or runs_dir(), code=code_namespace(job.code_root))
    req, request_path = prepare_public(job, bench)
    at = _Attempt(None, None, code_changed, list(edited_paths), raise_errors, False)
    try:
        from memsys.predict import predict

        predict(req, llm=llm)
    except MemsysError as exc:
        if raise_errors:
            raise
        return EvalOutcome(False, None, at.from_exception(exc, edits=True), None, "missing")
    return _score(job, bench, run_id, run_dir, None, at, started, parent_metrics, None)


@dataclass
class PendingEval:
    """An evaluation the trusted side has prepared (run folder, public view, sandbox task) and whose
    untrusted half runs elsewhere; ``end_sandboxed`` scores what comes back."""

    job: EvalJob
    bench: Any
    run_id: str
    run_dir: Path
    task: UntrustedTask
    at: _Attempt
    prepare_s: float
    parent_metrics: dict[str, Any] | None
    shared: SharedCache | None
    namespace: str


def begin_sandboxed(job: EvalJob, bench: Any, sandbox: Any, *, gateway: Gateway | None = None,
                    shared: SharedCache | None = None, parent_metrics: dict[str, Any] | None = None,
                    code_changed: bool = False, edited_paths: Sequence[str] = (), raise_errors: bool = False,
                    label: str = "") -> PendingEval:
    from harness.paths import runs_dir

    started = time.perf_counter()
    namespace = code_namespace(job.code_root)
    run_id, run_dir = prepare_run(job.setup, bench, job.runs_root or runs_dir(), code=namespace)
    _, request_path = prepare_public(job, bench)
    at = _Attempt(gateway, gateway.usage() if gateway is not None else None, code_changed, list(edited_paths),
                  raise_errors, True)
    spec = sandbox_spec(job, request_path, gateway=gateway, shared=shared, namespace=namespace)
    work, root = job.work_dir.resolve(), job.code_root.resolve()
    roots = TaskRoots(root, tuple(d for d in SANDBOX_CODE_DIRS if (root / d).is_dir()), work, work / "public",
                      request_path, Path(gateway.socket_path) if gateway is not None else None)
    task = UntrustedTask(sandbox, spec, work / "out" / ANSWERS_FILE, label or run_id, roots)
    return PendingEval(job, bench, run_id, run_dir, task, at, time.perf_counter() - started, parent_metrics, shared,
                       namespace)


def end_sandboxed(p: PendingEval, ran: UntrustedResult | ExecutorError) -> EvalOutcome:
    """The trusted half of a sandboxed evaluation: the worker's answers become this side's file, then
    the usual classification and scoring. An executor that lost every try is an infrastructure failure."""
    job, at = p.job, p.at
    if isinstance(ran, ExecutorError):
        return EvalOutcome(False, None, at.from_exception(ran, edits=False), None, "missing",
                           usage=_usage_delta(at.gateway, at.before))
    started = time.perf_counter() - p.prepare_s - ran.wall_s
    placement = {"executor_node": ran.node, "host": ran.host, "pid": ran.pid, "untrusted_s": round(ran.wall_s, 3)}
    if ran.shipped or ran.relayed:  # what the node lacked (research.execution.node) and the gateway relay (research.execution.relay)
        placement |= {"shipped": list(ran.shipped), "relayed": ran.relayed}
    if ran.answers is not None and _read_bytes(p.task.answers_path) != ran.answers:
        atomic_write_bytes(p.task.answers_path, ran.answers)  # a node without this filesystem sent them back
    res = ran.sandbox
    if not res.ok:
        failure = classify_result(res, result_status="missing", metrics=None, parent_metrics=p.parent_metrics,
                                  code_changed=at.code_changed, edited_paths=at.edited_paths)
        failure = failure or _failure(FailureClass.UNKNOWN, res.summary(), code_changed=at.code_changed)
        failure = _check_endpoint_claim(failure, at.gateway, at.before, at.code_changed)
        return EvalOutcome(False, None, failure, res, "missing", usage=_usage_delta(at.gateway, at.before),
                           placement=placement)
    cache = None
    if p.shared is not None:
        with _MERGE_LOCK:  # candidates of one round finish at once and may share a code namespace
            cache = p.shared.merge(job.work_dir.resolve() / "cache", p.namespace)
    out = _score(job, p.bench, p.run_id, p.run_dir, res, at, started, p.parent_metrics, cache)
    out.placement = placement
    return out


def _read_bytes(path: Path) -> bytes | None:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        return None


def _score(job: EvalJob, bench: Any, run_id: str, run_dir: Path, res: SandboxResult | None, at: _Attempt,
           started: float, parent_metrics: dict[str, Any] | None, cache: MergeReport | None) -> EvalOutcome:
    """The trusted half: read and validate the answers, score them against gold, write the result."""
    usage = _usage_delta(at.gateway, at.before)
    try:
        answers = read_answers(job.work_dir.resolve() / "out" / ANSWERS_FILE, [q.id for q in bench.questions])
    except PredictionFormatError as exc:
        if at.raise_errors:
            raise
        failure = _failure(FailureClass.FORMAT_MISMATCH, f"prediction_format: {exc}", code_changed=at.code_changed)
        return EvalOutcome(False, None, failure, res, "invalid", usage=usage, cache=cache)
    try:
        result = finish_eval(job.setup, bench, run_id, run_dir, answers, time.perf_counter() - started, usage)
    except MemsysError as exc:
        if at.raise_errors:
            raise
        return EvalOutcome(False, None, at.from_exception(exc, edits=False), res, "missing", usage=usage, cache=cache)
    judge_failed = _judge(job, bench, result, at)  # J, when the trusted config names a judge
    if judge_failed is not None:
        return EvalOutcome(False, None, judge_failed, res, "ok", usage=usage, cache=cache, eval_result=result)
    data = _result_dict(result)
    atomic_write_json(run_dir / "result.json", data)
    beside = job.work_dir.resolve().parent / "result.json"  # next to untrusted/: evals/<exp>/result.json
    if beside != (run_dir / "result.json").resolve():
        atomic_write_json(beside, data)
    numeric = {k: v for k, v in result.metrics.items() if v is not None and not isinstance(v, str)}
    failure = None
    if res is not None:
        failure = classify_result(res, result_status="ok", metrics=numeric, parent_metrics=parent_metrics,
                                  code_changed=at.code_changed, edited_paths=at.edited_paths)
    return EvalOutcome(failure is None, data, failure, res, "ok", usage=usage, cache=cache, eval_result=result)


def _judge(job: EvalJob, bench: Any, result: EvalResult, at: _Attempt) -> Failure | None:
    """The LLM judge on the scored answers (research.evaluation.judging), after the sandbox has exited; the reader's
    usage is counted before it. A failed judging step is our side's (infrastructure), never the candidate's:
    the scored files stay, and the same evaluation run again asks the judge only what it lacks."""
    from research.evaluation.judging import JUDGE_ERRORS, judge_evaluation

    try:
        judge_evaluation(job.setup, bench, result, at.gateway)
    except JUDGE_ERRORS as exc:
        if at.raise_errors:
            raise
        return _failure(FailureClass.INFRASTRUCTURE, f"judge: {type(exc).__name__}: {exc}", code_changed=at.code_changed)
    return None


def read_result(path: Path) -> tuple[str, dict[str, Any] | None]:
    """A trusted result file written by :func:`evaluate` (for replay and reports)."""
    if not path.exists():
        return "missing", None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "invalid", None
    if not isinstance(data, dict) or data.get("schema") != RESULT_SCHEMA or not isinstance(data.get("metrics"), dict):
        return "invalid", None
    return "ok", data


# ---------------------------------------------------------------------- time limits
#: `memsys eval`'s sandbox limit without a reader, and what each question adds with one
EVAL_TIMEOUT_BASE_S = 1800.0
EVAL_TIMEOUT_PER_QUESTION_S = 90.0


def eval_wall_timeout(ev: Any, n_questions: int) -> float:
    """The sandbox's wall-clock limit for a fixed-config evaluation (eval.sandbox_timeout_s, or scaled)."""
    if ev.sandbox_timeout_s is not None:
        return float(ev.sandbox_timeout_s)
    return EVAL_TIMEOUT_BASE_S + (EVAL_TIMEOUT_PER_QUESTION_S * n_questions if ev.reader == "llm" else 0.0)


def scaled_timeout(setup: EvalSetup) -> float:
    """``eval_wall_timeout`` for the questions ``setup`` selects (the loop's evaluations, unless
    research.sandbox.wall_timeout_s fixes it)."""
    return eval_wall_timeout(setup.options, sum(len(c.questions) for c in selection(setup).conversations))
