"""Wall time of the two-half evaluation against the single-process one it replaced.

Usage::

    python -m research.perf.bench_evaluate                       # reader=none on all of dev, sandbox auto
    python -m research.perf.bench_evaluate --llm --sample tiny   # + the tiny LLM sample (llm=local)
    python -m research.perf.bench_evaluate --before c627905      # the commit whose path is "before"

"Before" runs ``python -m benchmarks.cli eval`` from a git worktree of the old commit
(same venv, same data): the edited code scored itself in one process. "After" runs
``memsys eval`` as it is now: public view, answers in the sandbox, trusted scoring and the
verified cache merge. Each is run twice and the second (warm: stores, embeddings and LLM
replies cached, each path in its own cache folder) is the figure, so the difference is the
harness's overhead, not model time. Writes ``runs/bench/evaluate.json``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.atomic import atomic_write_json
from harness.paths import REPO_ROOT, runs_dir


def _timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise SystemExit(f"{' '.join(argv[:6])}... failed (exit {proc.returncode}):\n{tail}")
    return wall


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYS_RUNS") and k != "PYTHONPATH"}
    env.update(extra)
    return env


def measure(case: str, overrides: list[str], before_ref: str, backend: str, scratch: Path) -> dict:
    old_tree = scratch / "before"
    if not old_tree.exists():
        subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", str(old_tree), before_ref],
                       check=True, capture_output=True)
    out: dict = {"case": case, "overrides": overrides}
    for side in ("before", "after"):
        walls = []
        for rep in range(2):
            run_id = f"bench-evaluate-{case}-{side}-{rep}"
            if side == "before":
                env = _env(PYTHONPATH=str(old_tree), MEMSYS_CONFIG_DIR=str(old_tree / "configs"),
                           MEMSYS_RUNS_DIR=str(scratch / "runs-before"), MEMSYS_CACHE_DIR=str(scratch / "cache-before"))
                argv = [sys.executable, "-m", "benchmarks.cli", "eval", *overrides, f"run_id={run_id}", "--no-progress"]
                walls.append(_timed(argv, env, old_tree))
            else:
                env = _env(MEMSYS_RUNS_DIR=str(scratch / "runs-after"), MEMSYS_CACHE_DIR=str(scratch / "cache-after"))
                argv = [sys.executable, "-m", "launcher.main", "eval", *overrides, f"run_id={run_id}",
                        f"sandbox={backend}", "--no-progress"]
                walls.append(_timed(argv, env, REPO_ROOT))
            print(f"{case} {side} run {rep + 1}: {walls[-1]:.1f} s", flush=True)
        out[f"{side}_cold_s"], out[f"{side}_warm_s"] = round(walls[0], 2), round(walls[1], 2)
    out["overhead_warm_pct"] = round(100 * (out["after_warm_s"] / out["before_warm_s"] - 1), 1)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="c627905", help="commit of the single-process evaluation")
    ap.add_argument("--backend", default="auto", help="sandbox backend of the two-half path")
    ap.add_argument("--llm", action="store_true", help="also the tiny LLM sample with llm=local")
    ap.add_argument("--sample", default="tiny")
    ap.add_argument("--out", default=str(runs_dir() / "bench" / "evaluate.json"))
    args = ap.parse_args(argv)
    cases = [("reader-none-dev", ["reader=none", "split=dev", "memory=omni", "mlflow=false"])]
    if args.llm:
        cases.append((f"llm-{args.sample}", ["reader=llm", "llm=local", "split=dev", f"sample={args.sample}",
                                             "memory=naive", "mlflow=false", "workers=2"]))
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-evaluate-") as tmp:
        scratch = Path(tmp)
        try:
            for case, overrides in cases:
                rows.append(measure(case, overrides, args.before, args.backend, scratch))
        finally:
            subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(scratch / "before")],
                           capture_output=True)
    result = {"command": "python -m research.perf.bench_evaluate " + " ".join(argv or sys.argv[1:]),
              "before_ref": args.before, "backend": args.backend, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(Path(args.out), result)
    print("| case | before warm s | after warm s | overhead |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['before_warm_s']} | {r['after_warm_s']} | {r['overhead_warm_pct']}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
