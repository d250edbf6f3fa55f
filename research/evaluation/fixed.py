"""Fixed-config evaluation (``memsys eval``, the third job): one config of this checkout, scored through
the same two halves as the loop's evaluations (research.evaluation.two_half), so a config scores the same in and out
of the loop.

Why its own module: this is the entry a user runs by hand. It opens its own reader endpoint and gateway,
picks the shared cache of the split it scores, and shows progress, which the loop does through its own
events (research.evaluation.commit_evals). ``run_in_process`` is the same code and scoring without the sandbox, for
tests and benches that measure the memory system rather than the isolation.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Sequence

from benchmarks.config import EvalSetup, reader_prompt_cap
from benchmarks.runner import EvalResult, selection
from harness.views import ANSWERS_FILE
from research.evaluation.answer_progress import answer_progress
from research.evaluation.caches import SharedCache
from research.evaluation.reader_link import open_gateway, reader_config_for_sandbox, short_socket_dir
from research.evaluation.two_half import EvalJob, EvalOutcome, eval_wall_timeout, evaluate


def memory_choice(overrides: Sequence[str], setup: EvalSetup) -> tuple[str, list[str]]:
    """(preset, memory.* overrides) as the user gave them; the sandbox composes them itself."""
    preset = setup.memory.name
    mem: list[str] = []
    for o in overrides:
        key = o.lstrip("+~").split("=", 1)[0]
        if key == "memory":
            preset = o.split("=", 1)[1]
        elif key.startswith("memory."):
            mem.append(o)
    return preset, mem



def evaluate_config(setup: EvalSetup, overrides: Sequence[str] = (), *, code_root: Path | None = None,
                    progress: bool = True) -> EvalOutcome:
    """``memsys eval``: the same two halves as the loop, on this checkout's code."""
    from contextlib import ExitStack

    from benchmarks.runner import new_run_id
    from harness.paths import REPO_ROOT, cache_dir, runs_dir

    ev = setup.options
    ev.run_id = ev.run_id or new_run_id(setup)
    preset, mem_overrides = memory_choice(overrides, setup)
    bench = selection(setup)
    sandbox = None
    if ev.sandbox != "inprocess":
        from sandbox import make_sandbox

        sandbox = make_sandbox(ev.sandbox)
    n_questions = sum(len(c.questions) for c in bench.conversations)
    job = EvalJob(setup, Path(code_root or REPO_ROOT), preset, runs_dir() / ev.run_id / "untrusted",
                  memory_overrides=mem_overrides, wall_timeout_s=eval_wall_timeout(ev, n_questions))
    with ExitStack() as stack:
        llm = gateway = None
        if ev.reader == "llm":
            from memsys.llm.client import open_llm

            llm = stack.enter_context(open_llm(setup.llm))
            if sandbox is not None:
                sock = short_socket_dir()
                stack.callback(shutil.rmtree, sock, True)
                gateway = stack.enter_context(open_gateway(setup.llm, llm, sock, prompt_cap=reader_prompt_cap(ev)))
                job.reader_llm = reader_config_for_sandbox(setup.llm)
        # anything but dev (test, all) shares only with other held-out evaluations
        shared = SharedCache.for_split(cache_dir(), ev.split) if sandbox is not None else None
        if progress:
            total = sum(len(c.questions) for c in bench.conversations)
            stack.enter_context(answer_progress(job.work_dir / "out" / ANSWERS_FILE, total))
        return evaluate(job, sandbox, gateway=gateway, shared=shared, llm=llm, bench=bench)


def run_in_process(setup: EvalSetup, overrides: Sequence[str] = (), *, llm: Any = None,
                   code_root: Path | None = None) -> EvalResult:
    """Both halves in this process (tests, benches): the same code and scoring, no isolation.
    Typed errors propagate; returns the scored result."""
    from benchmarks.runner import new_run_id
    from harness.paths import REPO_ROOT, runs_dir

    setup.options.run_id = setup.options.run_id or new_run_id(setup)
    preset, mem_overrides = memory_choice(overrides, setup)
    job = EvalJob(setup, Path(code_root or REPO_ROOT), preset, runs_dir() / setup.options.run_id / "untrusted",
                  memory_overrides=mem_overrides)
    out = evaluate(job, None, llm=llm, raise_errors=True)
    assert out.eval_result is not None
    return out.eval_result
