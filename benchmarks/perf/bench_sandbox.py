"""Start-up overhead of each available sandbox backend against a bare subprocess.

Runs `/bin/true` and `python -c pass` N times (default 20) per backend and reports the
median, p90 and min wall time plus the median overhead over bare `subprocess.run`.
Writes JSON to runs/bench/sandbox.json and prints it. Target: < 0.5 s overhead for
bwrap and process.

    python -m benchmarks.perf.bench_sandbox [--repeats 20] [--out runs/bench/sandbox.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.bench_output import write_json  # noqa: E402
from sandbox import SandboxSpec, make_sandbox  # noqa: E402

TARGET_OVERHEAD_S = 0.5
WARMUP_RUNS = 2
COMMANDS = {"true": ["/bin/true"], "python_pass": [sys.executable, "-c", "pass"]}


def _time_bare(argv: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, capture_output=True, check=True)
    return time.perf_counter() - start


def _time_sandbox(box, spec: SandboxSpec) -> float:
    start = time.perf_counter()
    result = box.run(spec)
    elapsed = time.perf_counter() - start
    if result.exit_code != 0:
        raise RuntimeError(f"{box.name}: {spec.argv} failed: {result.summary()} {result.stderr[-200:]}")
    return elapsed


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_s": round(statistics.median(ordered), 5),
        "p90_s": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 5),
        "min_s": round(ordered[0], 5),
    }


def run_bench(repeats: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="bench-sandbox-", dir="/tmp"))
    try:
        backends: dict[str, object] = {}
        skipped: dict[str, str] = {}
        for name in ("process", "bwrap", "docker"):
            box = make_sandbox(name)
            ok, reason = box.available()
            if ok:
                backends[name] = box
            else:
                skipped[name] = reason
        results: dict[str, dict] = {}
        for label, argv in COMMANDS.items():
            row: dict[str, dict] = {}
            for _ in range(WARMUP_RUNS):
                _time_bare(argv, work)
            row["bare"] = _stats([_time_bare(argv, work) for _ in range(repeats)])
            for name, box in backends.items():
                spec = SandboxSpec(argv=argv, workdir=work, writable=[work], wall_timeout_s=60,
                                   memory_bytes=1 << 30, max_pids=64, max_file_bytes=64 << 20, network="none")
                for _ in range(WARMUP_RUNS):
                    _time_sandbox(box, spec)
                stats = _stats([_time_sandbox(box, spec) for _ in range(repeats)])
                stats["overhead_median_s"] = round(stats["median_s"] - row["bare"]["median_s"], 5)
                stats["meets_target"] = stats["overhead_median_s"] < TARGET_OVERHEAD_S
                row[name] = stats
            results[label] = row
        return {
            "repeats": repeats,
            "target_overhead_s": TARGET_OVERHEAD_S,
            "results": results,
            "skipped": skipped,
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "kernel": platform.release(), "bwrap": shutil.which("bwrap")},
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("runs/bench/sandbox.json"))
    args = parser.parse_args(argv)
    report = run_bench(args.repeats)
    write_json(args.out, report)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
