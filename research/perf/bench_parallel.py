"""Parallel evaluations (issue #15): the same ``memsys eval`` sweep on ``research.executor=local`` and ``=ray``.

Each executor runs the sweep once in a subprocess (``python -m launcher.main eval <sweep> research.executor=X``);
this script times the whole command, reads back each sweep's comparison.csv, and checks that every config
scored the same under both executors. The machine's load average is recorded before and after each run:
on a shared machine it says more about the wall times than the executor does.

    python -m research.perf.bench_parallel                      # 4 configs, LoCoMo dev tiny, reader=none, bwrap
    python -m research.perf.bench_parallel --sweep memory=naive,bm25_only --out runs/bench/parallel.json
    python -m research.perf.bench_parallel --loop --parallel 1,2     # memsys run at K=1 and K=2: experiments/hour
    python -m research.perf.bench_parallel --overhead 20              # executor overhead per evaluation

``--overhead N`` sends N trivial sandboxed tasks (the process sandbox running ``python -c pass``) through
each executor one at a time and reports the mean and p95 seconds per task: the difference is what Ray
adds to every evaluation (its start is timed apart). ``ray_announced`` is the loop's path, where the task
first reports the node it started on (a Ray generator task) and then its result.

``--loop`` instead runs ``memsys run`` (optuna proposer, reader=none, LoCoMo dev tiny, 4 experiments, on a
scratch copy of the project) once per ``research.parallel`` value and reports evaluated experiments per hour
of the run's own elapsed time (state.json), and the decisions and values of each run.

Writes runs/bench/parallel.json (or --out). An entry point that drives research/ (not part of the scorer).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

DEFAULT_SWEEP = ["memory=naive,bm25_only", "memory.retrieval.top_k=5,10"]
DEFAULT_BASE = ["benchmark=locomo", "split=dev", "sample=tiny", "reader=none", "workers=1", "sandbox=bwrap",
                "mlflow=false"]


def run_sweep_command(sweep: list[str], base: list[str], executor: str, sweep_id: str, extra: list[str]) -> dict[str, Any]:
    from harness.paths import runs_dir

    argv = [sys.executable, "-m", "launcher.main", "eval", "--sweep-id", sweep_id, *sweep, *base,
            f"research.executor={executor}", *extra]
    timing = timed_command(argv, f"{executor} sweep")
    frame = pd.read_csv(runs_dir() / sweep_id / "comparison.csv")
    return {"executor": executor, **timing, "configs": frame.drop(columns=["run_id"]).to_dict("records")}


def timed_command(argv: list[str], what: str) -> dict[str, Any]:
    """Run one command to the end; its wall time and the machine's load around it (the figures say
    how busy the 2 cores were)."""
    load_before = os.getloadavg()
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return {"command": " ".join(argv[1:]), "wall_s": round(wall, 2), "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()]}


LOOP_BASE = ["memory=naive", "reader=none", "sample=tiny", "research.proposer=optuna", "research.budget.experiments=4",
             "research.confirm.enabled=false", "research.loop.check=false", "mlflow=false", "workers=1"]


def run_loop_command(k: int, stamp: str, extra: list[str]) -> dict[str, Any]:
    from harness.paths import runs_dir
    from research.journal.trajectory import read_trajectory
    from research.workspace.repo import make_scratch_repo

    run_id = f"bench-parallel-k{k}-{stamp}"
    repo = make_scratch_repo(runs_dir() / "bench" / f"{run_id}-repo")
    named = {o.split("=", 1)[0] for o in extra}  # --extra sample=full replaces the base's sample, not doubles it
    base = [o for o in LOOP_BASE if o.split("=", 1)[0] not in named]
    argv = [sys.executable, "-m", "launcher.main", "run", *base, f"research.parallel={k}", f"research.repo={repo}",
            f"run_id={run_id}", *extra]
    timing = timed_command(argv, f"K={k} run")
    state = json.loads((runs_dir() / run_id / "state.json").read_text())
    records, _ = read_trajectory(runs_dir() / run_id)
    return {"parallel": k, **timing, "elapsed_s": round(state["elapsed_s"], 2), "evaluated": state["evaluated"],
            "experiments_per_hour": round(3600 * state["evaluated"] / state["elapsed_s"], 2),
            "records": [{"id": r.experiment_id, "decision": r.decision, "value": r.objective_value} for r in records]}


def measure_overhead(n: int) -> dict[str, Any]:
    import statistics
    import tempfile

    from research.config import RayConfig
    from research.execution.executor import LocalExecutor, RayExecutor
    from research.execution.worker import UntrustedTask
    from sandbox import SandboxSpec, make_sandbox

    out = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    task = UntrustedTask(make_sandbox("process"), SandboxSpec(argv=[sys.executable, "-c", "pass"], workdir=out,
                                                              writable=[out]), out / "answers.jsonl", "noop")
    started = time.perf_counter()
    ray_ex = RayExecutor(RayConfig())
    ray_start = time.perf_counter() - started
    timings: dict[str, list[float]] = {}
    try:
        # ray_announced: the loop's path, where the task first says which node it started on
        for name, ex, hook in (("local", LocalExecutor(), None), ("ray", ray_ex, None),
                               ("ray_announced", ray_ex, lambda node, host: None)):
            ex.run(task, on_start=hook)  # warm-up: the first Ray task starts a worker process
            times = []
            for _ in range(n):
                t = time.perf_counter()
                ex.run(task, on_start=hook)
                times.append(time.perf_counter() - t)
            timings[name] = times
    finally:
        ray_ex.close()

    def stats(xs: list[float]) -> dict[str, float]:
        return {"mean_s": round(statistics.mean(xs), 4), "p95_s": round(sorted(xs)[int(0.95 * (len(xs) - 1))], 4)}

    return {"n": n, "ray_start_s": round(ray_start, 2), "load": [round(x, 2) for x in os.getloadavg()],
            **{name: stats(xs) for name, xs in timings.items()},
            "overhead_mean_s": round(statistics.mean(timings["ray"]) - statistics.mean(timings["local"]), 4),
            "announced_overhead_mean_s": round(statistics.mean(timings["ray_announced"]) - statistics.mean(timings["ray"]), 4)}


def main(argv: list[str] | None = None) -> int:
    from harness.atomic import atomic_write_json
    from harness.paths import runs_dir

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", nargs="+", default=DEFAULT_SWEEP, help="the swept overrides")
    ap.add_argument("--base", nargs="+", default=DEFAULT_BASE, help="the fixed overrides")
    ap.add_argument("--executors", default="local,ray")
    ap.add_argument("--ray", nargs="*", default=[], help="extra research.ray.* overrides for the ray run")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--loop", action="store_true", help="memsys run at each --parallel value instead of a sweep")
    ap.add_argument("--parallel", default="1,2")
    ap.add_argument("--extra", nargs="*", default=[], help="more overrides for the --loop runs")
    ap.add_argument("--overhead", type=int, default=0, metavar="N", help="time N trivial tasks per executor instead")
    args = ap.parse_args(argv)
    if args.overhead:
        result = measure_overhead(args.overhead)
        path = args.out or runs_dir() / "bench" / "parallel_overhead.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, result)
        print(json.dumps(result), path)
        return 0
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if args.loop:
        runs = [run_loop_command(int(k), stamp, args.extra) for k in args.parallel.split(",")]
        path = args.out or runs_dir() / "bench" / "parallel_loop.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, {"base": LOOP_BASE, "cpus": os.cpu_count(), "runs": runs})
        print(json.dumps({f"K={r['parallel']}": r["experiments_per_hour"] for r in runs}), path)
        return 0
    results = []
    for executor in args.executors.split(","):
        extra = args.ray if executor == "ray" else []
        results.append(run_sweep_command(args.sweep, args.base, executor, f"bench-sweep-{executor}-{stamp}", extra))
        print(f"{executor}: {results[-1]['wall_s']} s", file=sys.stderr)
    values = [[c["value"] for c in r["configs"]] for r in results]
    out = {"sweep": args.sweep, "base": args.base, "cpus": os.cpu_count(), "runs": results,
           "identical_values": all(v == values[0] for v in values)}
    path = args.out or runs_dir() / "bench" / "parallel.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, out)
    print(json.dumps({r["executor"]: r["wall_s"] for r in results}), f"identical={out['identical_values']}", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
