"""Replay fidelity and cost: record a small optimization run, replay it, compare step by step.

The run is recorded with the real loop on a throwaway git repo (a copy of this project's
sources; the project's own repository is never touched): the researcher's replies are
scripted through the test OpenAI server (tests/support/openai_server.py), evaluations run in
the process sandbox on LoCoMo dev with reader=none (deterministic retrieval metrics). Then
``replay_run`` re-applies the recorded edits from the base commit and re-evaluates.

Scripted experiments: a code edit of configs/memory/naive.yaml (set_union, top_k 10), a config
override (bm25_only, sparse_k 10), a degrading override (top_k 2, sparse_k 2).

Writes runs/bench/replay.json (or --out) and prints it: per step the recorded and replayed
objective, whether they are equal (and every non-timing metric too), the decisions, the
per-step seconds of both, ``all_equal``, and the wall time of the original run vs the replay.

    python -m research.perf.bench_replay                      # sample=tiny
    python -m research.perf.bench_replay --sample small --cold

Runs, repo and caches live in a temp folder (removed unless --keep). By default one untimed
evaluation warms that cache first (stores, embeddings), so the original run's baseline does not
pay for building the store and the two wall times compare like with like; with ``--cold`` the
original run builds it (and the replay then starts warm).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

from research.workspace.repo import make_scratch_repo

REPO_ROOT = Path(__file__).resolve().parents[2]
PRESET = "configs/memory/naive.yaml"
#: metrics that measure time or money, not the memory system
VOLATILE = {"wall_s", "seconds_per_question", "cost_usd"}

PROPOSALS: list[dict[str, Any]] = [
    {"hypothesis": "hybrid candidates (dense then BM25) and a deeper list raise recall",
     "discovery_type": "architectural_change", "expected_effect": "recall@10 up", "config_overrides": [],
     "edits": [{"path": PRESET, "search": "  top_k: 5\n  dense_k: 5\n  sparse_k: 5\n  merge: dense_only\n",
                "replace": "  top_k: 10\n  dense_k: 5\n  sparse_k: 5\n  merge: set_union\n"}]},
    {"hypothesis": "BM25 alone matches LoCoMo's lexical questions better", "discovery_type": "hyperparameter_tuning",
     "expected_effect": "recall@10 up", "config_overrides": ["retrieval.merge=bm25_only", "retrieval.sparse_k=10"],
     "edits": []},
    {"hypothesis": "fewer candidates give a more precise context", "discovery_type": "hyperparameter_tuning",
     "expected_effect": "precision up", "config_overrides": ["retrieval.top_k=2", "retrieval.sparse_k=2"],
     "edits": []},
]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", *args], cwd=repo,
                          capture_output=True, text=True, check=True).stdout.strip()


def opener_for(server: Any):
    from memsys.llm.client import LLMClient

    @contextmanager
    def opener(cfg: Any, *, budget: Any = None, **_: Any) -> Iterator[Any]:
        c = replace(cfg, backend="openai", base_url=server.base_url, cache=False, max_retries=0, timeout_s=30.0)
        with LLMClient(c, budget=budget) as client:
            yield client
    return opener


def warm_up(sample: str) -> float:
    """One evaluation of the naive preset in a subprocess (fills the store and embedding caches)."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "launcher.main", "eval", "reader=none", f"sample={sample}", "memory=naive",
                           "split=dev", "mlflow=false", "workers=1", "run_id=warmup"],
                          cwd=REPO_ROOT, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if done.returncode != 0:
        raise SystemExit(f"the warm-up evaluation failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-400:]}")
    return time.perf_counter() - t0


def compare_steps(orig: dict[str, Any], rep: dict[str, Any], steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each replayed step beside its original: value, metrics (volatile ones left out), decision, time."""
    def stable(m: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in m.items() if k not in VOLATILE}
    out = []
    for s in steps:
        o, r = orig[s["experiment_id"]], rep.get(s["experiment_id"])
        out.append({
            "experiment_id": s["experiment_id"], "objective": o.objective,
            "recorded": s["recorded"], "replayed": s["replayed"], "equal": s["recorded"] == s["replayed"],
            "metrics_equal": r is not None and stable(r.metrics) == stable(o.metrics),
            "recorded_decision": s["recorded_decision"], "replayed_decision": s["replayed_decision"],
            "holds": s["holds"], "status": s["status"],
            "original_s": round(o.durations.get("total_s", 0.0), 2),
            "replay_s": round(r.durations.get("total_s", 0.0), 2) if r else None,
        })
    return out


def run(sample: str, cold: bool, keep: bool) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench_replay-"))
    os.environ["MEMSYS_RUNS_DIR"] = str(tmp / "runs")
    os.environ["MEMSYS_CACHE_DIR"] = str(tmp / "cache")  # isolated: no store or reply from earlier runs
    try:
        from research.config import load_run_setup
        from research.journal.trajectory import read_trajectory
        from research.loop.research_loop import ResearchLoop
        from research.replay import replay_run
        from tests.support.openai_server import OpenAITestServer, Reply

        warm = 0.0 if cold else warm_up(sample)
        repo = make_scratch_repo(tmp / "repo")
        setup = load_run_setup([
            "reader=none", f"sample={sample}", "mlflow=false", "research.sandbox.backend=auto",
            f"research.repo={repo}", "research.proposer=llm", "research.researcher.mode=code",
            f"research.budget.experiments={len(PROPOSALS)}",
            "research.loop.smoke_sample=null", "workers=1"])
        with OpenAITestServer(lambda body: Reply.ok("UNSCRIPTED")) as server:
            server.enqueue(*(Reply.of_json(p) for p in PROPOSALS))
            t0 = time.perf_counter()
            state = ResearchLoop(setup, "bench-rec", llm_opener=opener_for(server)).run()
            original_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        rdir = replay_run("bench-rec", new_run_id="bench-replay")
        replay_s = time.perf_counter() - t0

        orig = {r.experiment_id: r for r in read_trajectory(tmp / "runs" / "bench-rec", strict=True)[0]}
        rj = json.loads((rdir / "replay.json").read_text())
        steps = compare_steps(orig, {r.experiment_id: r for r in read_trajectory(rdir, strict=True)[0]}, rj["steps"])
        out = {
            "command": " ".join(["python -m research.perf.bench_replay", f"--sample {sample}"]
                                + (["--cold"] if cold else [])),
            "sample": sample, "reader": "none",
            "cache": "cold (the original run builds the store)" if cold else f"warm (untimed warm-up eval {warm:.1f}s)",
            "original_run": {"run_id": "bench-rec", "decisions": [o.decision for o in orig.values()],
                             "wall_s": round(state.elapsed_s, 2), "wall_s_outside": round(original_s, 2)},
            "replay_run": {"run_id": "bench-replay", "wall_s": round(rj["wall_s"], 2),
                           "wall_s_outside": round(replay_s, 2)},
            "steps": steps,
            "all_equal": all(s["equal"] and s["metrics_equal"] for s in steps),
            "decisions_hold": all(s["holds"] for s in steps),
            "replay_vs_original": round(rj["wall_s"] / state.elapsed_s, 3) if state.elapsed_s else None,
            "python": sys.version.split()[0], "cpus": os.cpu_count(),
        }
        if keep:
            out["kept"] = str(tmp)
        return out
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", default="tiny", help="named sample of the dev split (tiny, small, full)")
    ap.add_argument("--cold", action="store_true", help="empty caches: the original run builds the store")
    ap.add_argument("--keep", action="store_true", help="keep the temp repo and run folders")
    ap.add_argument("--out", default=None, help="default: runs/bench/replay.json")
    a = ap.parse_args()
    from harness.paths import runs_dir

    path = Path(a.out) if a.out else runs_dir() / "bench" / "replay.json"  # before runs move to the temp folder
    sys.path.insert(0, str(REPO_ROOT))  # tests.support is importable from a checkout
    out = run(a.sample, a.cold, a.keep)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
