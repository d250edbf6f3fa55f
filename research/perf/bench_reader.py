"""End to end with a reader: each memory variant answers the same questions, compared pair by pair (issue #14).

Why: reader-free recall says whether the evidence reached the context; only the reader says
whether a small model can use it. Each variant runs the real evaluation path (``memsys eval``:
public view, answers in the sandbox, trusted scoring) under its own run id, so a killed bench
resumes where it stopped (the run folder's resume plus the content-hashed reply cache) and a
finished variant is read back, not answered again. Variants are compared on the questions they
share with the reference, with the paired bootstrap CI and sign-flip test the loop's acceptance
uses (``research.stats``): 100 questions leave a CI of several points, which the table shows.

Usage::

    python -m research.perf.bench_reader [--split dev] [--sample medium] [--reference naive_rag]
        [--variants "naive_rag,naive,omni,omni@1500=omni:memory.pyramid.budget_tokens=1500"]
        [--out runs/bench/reader.json] [-- extra overrides for every variant, e.g. llm=local]

A variant is ``name=preset:override,override`` or just a preset name.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from statistics import mean
from typing import Any, Sequence

from harness.paths import REPO_ROOT, runs_dir
from research.diagnosis import read_rows
from research.perf.output import command, write_result
from research.stats import paired_test, per_question

DEFAULT_VARIANTS = "naive_rag,naive,omni,omni@1500=omni:memory.pyramid.budget_tokens=1500"
#: what each row reports; the paired tests compare the first two against the reference
OBJECTIVES = ("f1_cat1_4", "all_honest", "f1_cat5_lenient")
COLUMNS = ("f1_cat1_4", "f1_cat5", "all_honest", "context_recall", "context_tokens", "prompt_tokens_per_q",
           "seconds_per_q")


@dataclass(frozen=True)
class Variant:
    name: str
    preset: str
    overrides: tuple[str, ...] = ()


def parse_variants(text: str) -> list[Variant]:
    """``a,b=omni:x=1;y=2`` -> variants; overrides of one variant are separated by ';' (commas split variants)."""
    out: list[Variant] = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, eq, rest = item.partition("=")
        if not eq:
            out.append(Variant(item, item))
            continue
        preset, _, ovs = rest.partition(":")
        out.append(Variant(name, preset, tuple(filter(None, ovs.split(";")))))
    if len({v.name for v in out}) != len(out):
        raise SystemExit(f"variant names repeat in {text!r}")
    return out


def run_id_of(v: Variant, common: Sequence[str]) -> str:
    """Stable per (variant, common overrides), so a rerun resumes the same run folder."""
    key = json.dumps([v.preset, list(v.overrides), list(common)])
    return f"bench-reader-{v.name.replace('@', '-at-')}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def evaluate(v: Variant, common: Sequence[str], log_dir: Path) -> Path:
    """Run (or resume) one variant through ``memsys eval``; returns its run folder."""
    run_id = run_id_of(v, common)
    run_dir = runs_dir() / run_id
    if (run_dir / "metrics.json").exists():
        return run_dir
    argv = [sys.executable, "-m", "launcher.main", "eval", f"memory={v.preset}", *common, *v.overrides,
            f"run_id={run_id}", "mlflow=false", "--no-progress"]
    log = log_dir / f"{run_id}.log"
    print(f"[bench_reader] {v.name}: {' '.join(argv[3:])} (log {log})", flush=True)
    t0 = time.perf_counter()
    with log.open("a") as fh:
        proc = subprocess.run(argv, cwd=REPO_ROOT, stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise SystemExit(f"{v.name}: memsys eval exited {proc.returncode}; see {log}")
    print(f"[bench_reader] {v.name}: done in {time.perf_counter() - t0:.0f} s", flush=True)
    return run_dir


def summarize(rows: list[dict[str, Any]], metrics: dict[str, Any]) -> dict[str, Any]:
    """The row's figures: the scorer's own aggregates plus per-question reader cost from the scored rows."""
    answered = [r for r in rows if not r.get("error")]
    fresh = [r for r in answered if not r.get("cached")]
    return {
        "n": len(rows), "n_errors": len(rows) - len(answered),
        "f1_cat1_4": metrics.get("f1_cat1_4"), "f1_cat5": metrics.get("f1_cat5"),
        "all_honest": metrics.get("all_honest"), "context_recall": metrics.get("context_recall"),
        "context_tokens": metrics.get("context_tokens"),
        "prompt_tokens_per_q": mean(r.get("prompt_tokens", 0) for r in answered) if answered else None,
        # a cached reply costs no reader time: the reader's seconds are over the questions it answered now
        "seconds_per_q": mean(r.get("latency_s", 0.0) for r in fresh) if fresh else None,
        "cached_replies": len(answered) - len(fresh),
        "per_category_f1": {c: metrics.get(f"f1_cat{c}") for c in "12345" if f"f1_cat{c}" in metrics},
    }


def compare(rows: dict[str, list[dict[str, Any]]], reference: str) -> dict[str, dict[str, Any]]:
    """variant -> objective -> paired test against the reference on the shared questions."""
    out: dict[str, dict[str, Any]] = {}
    for name, vrows in rows.items():
        if name == reference:
            continue
        out[name] = {}
        for obj in OBJECTIVES:
            cand, ref = per_question(obj, vrows), per_question(obj, rows[reference])
            if set(cand) & set(ref):
                out[name][obj] = paired_test(cand, ref).to_dict()
    return out


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3f}"
    return str(x)


def render(result: dict[str, Any]) -> str:
    ref = result["reference"]
    lines = ["| variant | " + " | ".join(COLUMNS) + f" | F1 cat 1-4 vs {ref} (95% CI) |",
             "| --- " * (len(COLUMNS) + 2) + "|"]
    for name, row in result["variants"].items():
        t = result["paired"].get(name, {}).get("f1_cat1_4")
        vs = "reference" if name == ref else (
            f"{t['mean_delta']:+.3f} [{t['ci_low']:+.3f}, {t['ci_high']:+.3f}] p={t['p_better']:.3f}" if t else "-")
        lines.append(f"| {name} | " + " | ".join(_fmt(row.get(c)) for c in COLUMNS) + f" | {vs} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", default="locomo")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--sample", default="medium")
    ap.add_argument("--variants", default=DEFAULT_VARIANTS)
    ap.add_argument("--reference", default="naive_rag")
    ap.add_argument("--llm", default="local", help="llm config group (local: the embedded model)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    variants = parse_variants(args.variants)
    if args.reference not in {v.name for v in variants}:
        raise SystemExit(f"--reference {args.reference!r} is not one of the variants")
    common = [f"benchmark={args.benchmark}", f"split={args.split}", f"sample={args.sample}", f"llm={args.llm}", *extra]
    out = args.out or runs_dir() / "bench" / "reader.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    log_dir = out.parent / "reader-logs"
    log_dir.mkdir(exist_ok=True)
    rows: dict[str, list[dict[str, Any]]] = {}
    summaries: dict[str, dict[str, Any]] = {}
    for v in variants:
        run_dir = evaluate(v, common, log_dir)
        rows[v.name] = read_rows(run_dir)
        summaries[v.name] = {"run_id": run_dir.name, "preset": v.preset, "overrides": list(v.overrides),
                             **summarize(rows[v.name], json.loads((run_dir / "metrics.json").read_text()))}
    result = {
        "command": command("research.perf.bench_reader", argv),
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.platform(),
        "common_overrides": common, "reference": args.reference, "variants": summaries,
        "paired": compare(rows, args.reference),
    }
    write_result(out, result, render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
