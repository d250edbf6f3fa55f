"""The attack suite as a measurement: every hostile proposal through the real loop, per sandbox backend.

Why: the sandbox, the trusted scorer, the surface checks and the cache merge are only worth
their cost if a hostile researcher cannot raise its score or reach the host with them. This
drives the REAL ``ResearchLoop`` (git worktrees in a throwaway copy of this repo, the sandboxed
``python -m memsys.predict``, the trusted scorer, LoCoMo tiny dev sample) with the scripted
hostile proposals of ``tests/support/attacks.py`` (the same ones ``tests/research/test_attacks.py``
runs): one loop run per group ("sandbox": attacks 1-5 and 9; "surface": 6-7; "network": 8 with
reader=llm through the gateway; "screen": 11, lying input digests with the screen on) and backend, plus attack 10 (a weak backend refused before start).

Each row: attack, backend, outcome (what happened to it: "score unchanged 0.083", "rejected
before evaluation (forbidden_edit)", "format_mismatch (nothing scored)" ...) and problems (every
sign it got through; "BREACH?" leads the outcome when there is one). Run-wide checks (surface of
every commit, git hooks, trusted files, stray files, host markers) are reported per group.

    python -m research.perf.bench_attacks [--backends bwrap docker] [--groups sandbox surface network screen]
        [--out runs/bench/attacks.json] [--keep]

``--backends process`` runs the same attacks on the unisolated fallback (with allow_weak): a
demonstration that the attacks are real (several get through there), not a configuration to use.
Runs, caches and scratch repos live in a temporary folder (``--keep`` keeps it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # tests.support.attacks is shared with the test suite
    sys.path.insert(0, str(REPO_ROOT))


def _available(backend: str) -> tuple[bool, str]:
    from sandbox import make_sandbox

    try:
        return make_sandbox(backend).available()
    except Exception as exc:  # noqa: BLE001 - a backend that cannot even be built is unavailable
        return False, f"{type(exc).__name__}: {exc}"


def run(backends: list[str], groups: list[str], work: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from tests.support import attacks as A

    rows: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    os.environ["MEMSYS_RUNS_DIR"] = str(work / "runs")
    os.environ["MEMSYS_CACHE_DIR"] = str(work / "cache")
    os.environ.setdefault("MEMSYS_DATA_DIR", str(REPO_ROOT.parent / "shared" / "data"))
    for backend in backends:
        ok, why = _available(backend)
        if not ok:
            for a in A.attacks("-"):
                if a.group in groups:
                    rows.append({"attack": a.name, "title": a.title, "backend": backend,
                                 "outcome": f"skipped: {why}", "problems": []})
            continue
        for group in groups:
            token = uuid.uuid4().hex
            key = f"{A.KEY_PREFIX}{uuid.uuid4().hex}"
            os.environ[A.KEY_ENV] = key
            print(f"[{backend}] {group} ...", file=sys.stderr, flush=True)
            rr = A.run_group(group, backend, work / f"{group}-{backend}", token, key=key,
                             allow_weak=backend == "process")
            run_problems = A.check_run(rr)
            if group == "sandbox":
                run_problems += A.later_worktree_runs_nothing(rr)
            if group == "network":
                run_problems += A.key_problems(rr)
            runs.append({"group": group, "backend": backend, "seconds": round(rr.seconds, 1),
                         "baseline": rr.baseline.objective_value, "objective": rr.baseline.objective,
                         "problems": run_problems})
            for a in A.attacks(token):
                if a.name in rr.records:
                    outcome, problems = A.check_attack(rr, a)
                    rows.append({"attack": a.name, "title": a.title, "backend": backend, "outcome": outcome,
                                 "problems": problems, "run_s": round(rr.seconds, 1)})
            for m in A.host_markers(token):
                Path(m).unlink(missing_ok=True)
    t0 = time.perf_counter()
    outcome, problems = A.weak_backend_refused(work / "weak")
    rows.append({"attack": "10-weak-backend", "title": "research.sandbox.backend=process, allow_weak=false",
                 "backend": "process", "outcome": outcome, "problems": problems,
                 "run_s": round(time.perf_counter() - t0, 1)})
    return rows, runs


def table(rows: list[dict[str, Any]], runs: list[dict[str, Any]]) -> str:
    out = ["| attack | backend | outcome | problems |", "|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['attack']} | {r['backend']} | {r['outcome']} | {'; '.join(r['problems'])[:200] or '-'} |")
    out += ["", "| group | backend | loop s | baseline | run-wide problems |", "|---|---|---|---|---|"]
    for r in runs:
        out.append(f"| {r['group']} | {r['backend']} | {r['seconds']} | {r['objective']}={r['baseline']:.3f} | "
                   f"{'; '.join(r['problems'])[:200] or '-'} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    from harness.atomic import atomic_write_json

    p = argparse.ArgumentParser(prog="python -m research.perf.bench_attacks", description=__doc__.splitlines()[0])
    p.add_argument("--backends", nargs="+", default=["bwrap", "docker"])
    groups = ["sandbox", "surface", "network", "screen"]  # tests/support/attacks.py GROUPS (imported lazily)
    p.add_argument("--groups", nargs="+", default=groups, choices=groups)
    p.add_argument("--out", type=Path, default=REPO_ROOT / "runs" / "bench" / "attacks.json")
    p.add_argument("--keep", action="store_true", help="keep the temporary runs/caches/repos folder")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="memsys-bench-attacks-"))
    t0 = time.perf_counter()
    try:
        rows, runs = run(args.backends, args.groups, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out, {"schema": "memsys-bench-attacks/1", "backends": args.backends,
                                 "groups": args.groups, "seconds": round(time.perf_counter() - t0, 1),
                                 "rows": rows, "runs": runs})
    print(table(rows, runs))
    print(f"\nwritten {args.out}")
    breaches = [r for r in rows if r["problems"]] + [r for r in runs if r["problems"]]
    return 1 if breaches and "process" not in args.backends else 0


if __name__ == "__main__":
    sys.exit(main())
