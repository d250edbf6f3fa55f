"""Figures of the research loop (issue: autonomous research loop). JSON to runs/bench/loop.json.

  overhead   loop overhead per experiment outside evaluation and LLM time (worktree, apply,
             commit, bookkeeping), from an Optuna run with reader=none in a scratch repo
  compare    an `llm` and an `optuna` run of the same budget on the same split, side by side

This script drives research/ (it is an entry point, not part of the scorer package).

    python -m research.perf.bench_loop overhead --experiments 5
    python -m research.perf.bench_loop compare --experiments 3 --sample tiny --reader llm
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from harness.paths import REPO_ROOT


def scratch_repo() -> Path:
    """A throwaway git repo with the project's code (the loop edits it, not this checkout)."""
    from research.workspace.repo import make_scratch_repo

    return make_scratch_repo(Path(tempfile.mkdtemp(prefix="memsys-bench-loop-")) / "repo")


def run_loop(overrides: list[str], run_id: str) -> tuple[list, float]:
    from research.config import load_run_setup
    from research.loop.research_loop import ResearchLoop

    setup = load_run_setup(overrides + [f"run_id={run_id}"])
    loop = ResearchLoop(setup, run_id)
    t0 = time.perf_counter()
    loop.run()
    return loop.records, time.perf_counter() - t0


def summarize(records, wall: float) -> dict:
    exps = [r for r in records if r.index > 0]
    vals = [r.objective_value for r in records if r.objective_value is not None]
    return {
        "experiments": len(exps), "wall_s": round(wall, 1),
        "decisions": [r.decision for r in records],
        "start": records[0].objective_value if records else None,
        "best": max(vals) if vals else None,
        "eval_s_mean": round(statistics.mean([r.durations.get("eval_s", 0.0) for r in exps]), 2) if exps else None,
        "propose_s_mean": round(statistics.mean([r.durations.get("propose_s", 0.0) for r in exps]), 2) if exps else None,
        "overhead_s": [round(r.durations.get("overhead_s", 0.0), 3) for r in exps if "overhead_s" in r.durations],
        "tokens": sum(r.tokens for r in records),
        "detail": [{"id": r.experiment_id, "decision": r.decision, "value": r.objective_value,
                    "overrides": r.config_overrides, "code_edits": len(r.edits),
                    "healing": [h.get("action") for h in r.healing],
                    "failure": (r.failure or {}).get("cls")} for r in exps],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", choices=["overhead", "compare"])
    ap.add_argument("--experiments", type=int, default=5)
    ap.add_argument("--sample", default="small")
    ap.add_argument("--reader", default="none", choices=["none", "llm"])
    ap.add_argument("--sandbox", default="auto")
    ap.add_argument("--proposers", nargs="+", default=["llm", "optuna"], choices=["llm", "optuna"],
                    help="compare: which halves to (re)run; rows of the others are kept when the setup matches")
    a = ap.parse_args()
    repo = scratch_repo()
    os.environ.setdefault("MEMSYS_RUNS_DIR", str(repo.parent / "runs"))
    base = [f"research.repo={repo}", f"reader={a.reader}", f"sample={a.sample}", "mlflow=false",
            f"research.budget.experiments={a.experiments}", f"research.sandbox.backend={a.sandbox}",
            "research.loop.smoke_sample=null", "research.loop.context_budget_tokens=900"]  # fits a 4k local model
    out_path = REPO_ROOT / "runs" / "bench" / "loop.json"
    out = json.loads(out_path.read_text()) if out_path.exists() else {}
    stamp = time.strftime("%H%M%S")
    if a.part == "overhead":
        recs, wall = run_loop(base + ["research.proposer=optuna"], f"bench-overhead-{stamp}")
        s = summarize(recs, wall)
        oh = s["overhead_s"]
        s["overhead_s_median"] = statistics.median(oh) if oh else None
        s["overhead_s_max"] = max(oh) if oh else None
        out["overhead"] = s
    else:
        setup = {"sample": a.sample, "reader": a.reader, "budget": a.experiments}
        prev = out.get("compare") or {}
        res = {k: prev[k] for k in ("llm", "optuna") if k in prev and all(prev.get(x) == v for x, v in setup.items())}
        for proposer in a.proposers:
            recs, wall = run_loop(base + [f"research.proposer={proposer}"], f"bench-{proposer}-{stamp}")
            res[proposer] = {**summarize(recs, wall), "measured": time.strftime("%Y-%m-%dT%H:%M:%S"),
                             "loadavg_after": [round(x, 2) for x in os.getloadavg()]}
        out["compare"] = {**setup, **res}
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
