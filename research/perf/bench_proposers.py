"""Proposer comparison: the same optimization budget per proposer and seed, side by side.

For each proposer (default llm, hybrid, optuna, random) and seed (default 0, 1, 2) one ``memsys run``
in a subprocess (``python -m launcher.main run``) with ``memory=naive reader=none split=dev`` (retrieval
objective: deterministic, no reader LLM), the same sample and experiment budget, plus any ``key=value``
overrides given here. Then each run folder (trajectory and state.json) is read back and summarised:

  curve             best so far of the objective at each experiment index (accepted experiments only)
  final best, gain  best value; best - baseline, absolute and relative to the baseline
  rejected          proposals rejected before evaluation: repeats (identical_conditions) and
                    changes the reader-free screen found to change nothing (no_effect)
  evaluated no-ops  evaluations spent on a change the objective did not see (delta exactly 0, or every
                    metric identical to the parent's)
  wall per exp.     durations.total_s of each experiment (baseline excluded)
  confirmation      held-out test split, baseline and best (state.json "confirmation", else
                    confirmation.json), when run

Writes runs/bench/proposers.json (or --out), a PNG of the best-so-far curves (mean over seeds per
proposer, each seed faint) and a markdown table beside it, and prints where they went. Each run's
output goes to runs/bench/proposers-logs/<run-id>.log. Unless ``research.repo=`` is passed, the runs
edit a scratch copy of the project (runs/bench/proposers-repo-<stamp>), never this checkout.

    python -m research.perf.bench_proposers                                  # 4 proposers x 3 seeds, 20 exp., full dev
    python -m research.perf.bench_proposers --proposers optuna,random --seeds 0 --experiments 5 --sample tiny
    python -m research.perf.bench_proposers --dry-run --runs bench-llm-0-0912,bench-optuna-0-0912

``--dry-run`` runs nothing: it only reads the run folders named by ``--runs`` (ids under runs/ or paths).
``--paired a,b`` also compares proposer a's best config with b's, seed by seed, on the same dev questions
(the per-question scores of each best's own evaluation; research.evaluation.stats.paired_test), and the seeds pooled.
This script drives research/ (an entry point, not part of the scorer package).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from harness.paths import REPO_ROOT, runs_dir
from research.failures import IDENTICAL_TOLERANCE, FailureClass
from research.journal.taxonomy import best_so_far, delta_of, number, rejection_kind, run_summary
from research.journal.trajectory import ExperimentRecord, TrajectoryError

PROPOSERS = ("llm", "hybrid", "optuna", "random")
SEEDS = (0, 1, 2)
#: the fixed part of every run's overrides (the proposer, seed, sample and budget are added per run)
BASE_OVERRIDES = ("memory=naive", "reader=none", "split=dev")
OUT_NAME = "proposers"
_RUN_ID_RE = re.compile(r"^bench-(?P<proposer>[a-z]+)-(?P<seed>\d+)-")


# --- one run ---------------------------------------------------------------------
@dataclass
class RunStats:
    run_id: str
    proposer: str
    seed: int | None
    objective: str
    experiments: int  # records after the baseline
    curve: list[float | None]  # best so far at experiment index 0, 1, ... (None before the first accepted)
    start: float | None
    final_best: float | None
    gain: float | None  # final_best - start
    gain_rel: float | None  # gain / |start|
    rejected_before_eval: int
    rejected_by_kind: dict[str, int]
    evaluated_noops: int
    wall_s_per_experiment: list[float]  # durations.total_s, baseline excluded
    wall_s_mean: float | None
    decisions: dict[str, int]
    # the futility probe (reader runs): candidates stopped on the probe's questions, the reader seconds spent
    # on probes and on full evaluations, and the full runs the stopped ones did not pay for, estimated at
    # their own probe's seconds per question
    stopped_at_probe: int = 0
    probe_s: float = 0.0
    eval_s: float = 0.0
    probe_saved_s_est: float = 0.0
    status: str = ""
    stop_reason: str = ""
    confirmation: dict[str, Any] | None = None  # dev / test, baseline / best, and test_gain
    returncode: int | None = None  # of the `memsys run` subprocess (None: only read, --dry-run)
    run_wall_s: float | None = None  # of the subprocess
    warnings: list[str] = field(default_factory=list)
    run_dir: str = ""


def best_curve(records: Sequence[ExperimentRecord]) -> list[float | None]:
    """Best so far at every experiment index from 0 to the last one recorded (an index without a record
    keeps the best before it)."""
    ordered = sorted(records, key=lambda r: r.index)
    if not ordered:
        return []
    at = {r.index: b for r, b in zip(ordered, best_so_far(ordered))}
    curve: list[float | None] = []
    for i in range(ordered[-1].index + 1):
        curve.append(at.get(i, curve[-1] if curve else None))
    return curve


def is_rejected_before_eval(rec: ExperimentRecord) -> bool:
    return rec.decision == "rejected" and rejection_kind(rec) is not None


def is_evaluated_noop(rec: ExperimentRecord) -> bool:
    """An evaluation spent on a change the objective did not see: the value equals the best it was compared
    with, or the failure classifier found every metric identical to the parent's (invalid_metric, low)."""
    if rec.index == 0 or rec.decision == "baseline" or rejection_kind(rec) is not None:
        return False
    f = rec.failure if isinstance(rec.failure, dict) else {}
    if f.get("cls") == FailureClass.INVALID_METRIC.value and f.get("severity") == "low":
        return True
    d = delta_of(rec)
    return number(rec.objective_value) is not None and d is not None and abs(d) <= IDENTICAL_TOLERANCE


def confirmation_summary(state: dict[str, Any]) -> dict[str, Any] | None:
    c = state.get("confirmation") or {}
    if not isinstance(c, dict) or not c:
        return None
    dev, test = c.get("dev") or {}, c.get("test") or {}
    base, best = number(test.get("baseline")), number(test.get("best"))
    return {"split": c.get("split"), "sample": c.get("sample"),
            "dev": {"baseline": number(dev.get("baseline")), "best": number(dev.get("best"))},
            "test": {"baseline": base, "best": best},
            "test_gain": None if base is None or best is None else best - base,
            "test_paired": c.get("test_paired") or None}


def probe_stats(exps: Sequence[ExperimentRecord]) -> dict[str, Any]:
    """What the futility probe stopped and what that saved (pure; zeros for runs without a probe)."""
    def seconds(r: ExperimentRecord, key: str) -> float:
        return number((r.durations or {}).get(key)) or 0.0
    stopped = [r for r in exps if (r.probe or {}).get("stopped")]
    saved = 0.0
    for r in stopped:
        n, of = int(r.probe.get("questions") or 0), int(r.probe.get("of") or 0)
        if n > 0 and of > n:
            saved += seconds(r, "probe_s") * (of - n) / n
    return {"stopped_at_probe": len(stopped), "probe_s": round(sum(seconds(r, "probe_s") for r in exps), 1),
            "eval_s": round(sum(seconds(r, "eval_s") for r in exps), 1), "probe_saved_s_est": round(saved, 1)}


def run_stats(run_id: str, proposer: str, seed: int | None, records: Sequence[ExperimentRecord],
              state: dict[str, Any], warnings: Sequence[str] = ()) -> RunStats:
    """The summary of one run from its records and state.json (pure)."""
    s = run_summary(records)
    exps = [r for r in records if r.index > 0 and r.decision != "baseline"]
    walls = [w for w in (number((r.durations or {}).get("total_s")) for r in exps) if w is not None]
    rejected = [r for r in exps if is_rejected_before_eval(r)]
    kinds: dict[str, int] = {}
    for r in rejected:
        kind = rejection_kind(r) or ""
        kinds[kind] = kinds.get(kind, 0) + 1
    return RunStats(
        run_id=run_id, proposer=proposer, seed=seed, objective=s.objective, experiments=len(exps),
        curve=best_curve(records), start=s.start, final_best=s.best, gain=s.improvement, gain_rel=s.improvement_rel,
        rejected_before_eval=len(rejected), rejected_by_kind=kinds,
        evaluated_noops=sum(1 for r in exps if is_evaluated_noop(r)),
        wall_s_per_experiment=[round(w, 3) for w in walls], wall_s_mean=statistics.fmean(walls) if walls else None,
        decisions=s.decisions, **probe_stats(exps),
        status=str(state.get("status") or ""), stop_reason=str(state.get("stop_reason") or ""),
        confirmation=confirmation_summary(state), warnings=list(warnings))


def identify(run_id: str, config: dict[str, Any], records: Sequence[ExperimentRecord]) -> tuple[str, int | None]:
    """(proposer, seed) of a run: its config.json, else its bench run id, else its records."""
    research = config.get("research") if isinstance(config.get("research"), dict) else {}
    proposer, seed = research.get("proposer"), research.get("seed")
    m = _RUN_ID_RE.match(run_id)
    if proposer is None and m:
        proposer, seed = m["proposer"], int(m["seed"])
    if proposer is None:
        proposer = next((r.proposer for r in records if r.index > 0), "?")
    return str(proposer), seed if isinstance(seed, int) else None


def read_run(run_dir: Path) -> RunStats:
    """A run folder read back: trajectory, state.json, config.json and confirmation.json (what is missing
    becomes a warning)."""
    from research.loop.rundir import RunDir
    from research.report.data import load_run

    run_dir = Path(run_dir)
    try:
        run = load_run(run_dir)
    except TrajectoryError as exc:
        return run_stats(run_dir.name, *identify(run_dir.name, {}, []), [], {}, [str(exc)])
    state = dict(run.state)
    confirmation_file = RunDir(run_dir).confirmation
    if not state.get("confirmation") and confirmation_file.is_file():
        try:
            state["confirmation"] = json.loads(confirmation_file.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            run.warnings.append(f"{confirmation_file}: unreadable ({exc}); ignored")
    proposer, seed = identify(run.run_id, run.config, run.records)
    stats = run_stats(run.run_id, proposer, seed, run.records, state, run.warnings)
    stats.run_dir = str(run_dir)
    return stats


def best_scores(run_dir: Path) -> dict[str, float]:
    """Per-question scores of a run's best config on its own dev evaluation: the last accepted experiment
    (where the best ref points), else the baseline. ValueError when its scored rows are gone."""
    from research.evaluation.diagnosis import read_rows
    from research.evaluation.stats import per_question
    from research.report.data import load_run

    run = load_run(Path(run_dir))
    kept = [r for r in run.records if r.decision in ("baseline", "proceed") and r.eval_dir]
    if not kept:
        raise ValueError(f"{run_dir}: no evaluated baseline or accepted experiment")
    best = kept[-1]
    rows = read_rows(Path(run_dir) / best.eval_dir)
    if not rows:
        raise ValueError(f"{Path(run_dir) / best.eval_dir}: no scored rows (predictions.jsonl missing or empty)")
    return per_question(best.objective, rows)


def paired_between(runs: Sequence[RunStats], a: str, b: str) -> dict[str, Any]:
    """a's best minus b's best on the same questions, per seed both ran, and over those seeds pooled (each
    (seed, question) a unit: the mean difference of a seed-averaged comparison)."""
    from research.evaluation.stats import paired_test

    by = {(r.proposer, r.seed): r for r in runs if r.run_dir}
    seeds = sorted({s for p, s in by if p == a and (b, s) in by}, key=lambda s: (s is None, s))
    out: dict[str, Any] = {"a": a, "b": b, "seeds": {}, "pooled": None, "warnings": []}
    pooled_a: dict[str, float] = {}
    pooled_b: dict[str, float] = {}
    for seed in seeds:
        try:
            sa, sb = best_scores(Path(by[(a, seed)].run_dir)), best_scores(Path(by[(b, seed)].run_dir))
        except ValueError as exc:
            out["warnings"].append(str(exc))
            continue
        out["seeds"][str(seed)] = paired_test(sa, sb).to_dict()
        pooled_a.update({f"{seed}:{q}": v for q, v in sa.items()})
        pooled_b.update({f"{seed}:{q}": v for q, v in sb.items()})
    if len(out["seeds"]) > 1:
        out["pooled"] = paired_test(pooled_a, pooled_b).to_dict()
    return out


def paired_lines(paired: dict[str, Any]) -> str:
    """The comparison as markdown lines (difference, 95% CI, one-sided p that a is better / worse, n)."""
    a, b = paired["a"], paired["b"]
    lines = [f"\n## {a} best - {b} best, same dev questions (paired)\n"]
    items = [(f"seed {s}", t) for s, t in paired["seeds"].items()]
    if paired["pooled"]:
        items.append(("seeds pooled", paired["pooled"]))
    for label, t in items:
        lines.append(f"- {label}: {t['mean_delta']:+.4f} [{t['ci_low']:+.4f}, {t['ci_high']:+.4f}], "
                     f"p_better {t['p_better']:.4g}, p_worse {t['p_worse']:.4g}, n {t['n']}")
    lines += [f"- warning: {w}" for w in paired["warnings"]]
    return "\n".join(lines) + "\n"


# --- across seeds -------------------------------------------------------------------
@dataclass
class ProposerStats:
    proposer: str
    runs: list[str]
    seeds: list[int | None]
    mean_curve: list[float | None]  # mean over seeds; a run that stopped early keeps its last best
    final_best_mean: float | None
    final_best_sd: float | None
    gain_mean: float | None
    gain_rel_mean: float | None
    rejected_before_eval_mean: float | None
    evaluated_noops_mean: float | None
    wall_s_per_experiment_mean: float | None  # over every experiment of every seed
    test_gain_mean: float | None  # held-out confirmation, over the seeds that ran it


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def _sd(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.stdev(known) if len(known) > 1 else None


def mean_curve(curves: Sequence[Sequence[float | None]]) -> list[float | None]:
    length = max((len(c) for c in curves), default=0)
    padded = [list(c) + [c[-1]] * (length - len(c)) for c in curves if c]
    return [_mean([c[i] for c in padded]) for i in range(length)]


def proposer_stats(proposer: str, runs: Sequence[RunStats]) -> ProposerStats:
    walls = [w for r in runs for w in r.wall_s_per_experiment]
    return ProposerStats(
        proposer=proposer, runs=[r.run_id for r in runs], seeds=[r.seed for r in runs],
        mean_curve=mean_curve([r.curve for r in runs]),
        final_best_mean=_mean([r.final_best for r in runs]), final_best_sd=_sd([r.final_best for r in runs]),
        gain_mean=_mean([r.gain for r in runs]), gain_rel_mean=_mean([r.gain_rel for r in runs]),
        rejected_before_eval_mean=_mean([r.rejected_before_eval for r in runs]),
        evaluated_noops_mean=_mean([r.evaluated_noops for r in runs]),
        wall_s_per_experiment_mean=statistics.fmean(walls) if walls else None,
        test_gain_mean=_mean([(r.confirmation or {}).get("test_gain") for r in runs]))


def group(runs: Sequence[RunStats], order: Sequence[str] = ()) -> list[ProposerStats]:
    """One row per proposer: those of ``order`` first, then the others as they appear."""
    names = [p for p in order if any(r.proposer == p for r in runs)]
    names += [p for p in dict.fromkeys(r.proposer for r in runs) if p not in names]
    return [proposer_stats(p, [r for r in runs if r.proposer == p]) for p in names]


# --- outputs ------------------------------------------------------------------------
def _f(v: float | None, digits: int = 4, sign: bool = False) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    return f"{v:+.{digits}f}" if sign else f"{v:.{digits}f}"


def markdown_table(rows: Sequence[ProposerStats], objective: str) -> str:
    head = (f"| proposer | seeds | final best {objective} (mean ± sd) | gain | gain % | rejected before eval. "
            "| evaluated no-ops | s / experiment | held-out test gain |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        sd = f" ± {_f(r.final_best_sd)}" if r.final_best_sd is not None else ""
        pct = "-" if r.gain_rel_mean is None else f"{r.gain_rel_mean * 100:+.1f}%"
        lines.append(f"| {r.proposer} | {len(r.runs)} | {_f(r.final_best_mean)}{sd} | {_f(r.gain_mean, sign=True)} | {pct} "
                     f"| {_f(r.rejected_before_eval_mean, 1)} | {_f(r.evaluated_noops_mean, 1)} "
                     f"| {_f(r.wall_s_per_experiment_mean, 1)} | {_f(r.test_gain_mean, sign=True)} |")
    return "\n".join(lines) + "\n"


def plot_curves(rows: Sequence[ProposerStats], runs: Sequence[RunStats], path: Path, objective: str) -> Path:
    """Best so far against the experiment index: the mean over seeds per proposer, each seed faint."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(9, 4.6), dpi=110)
    ax = fig.add_subplot()
    ax.grid(True, color="#e6e6e6", lw=0.7)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    colours = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
    for row, colour in zip(rows, colours * 4):
        for run in (r for r in runs if r.proposer == row.proposer):
            pts = [(i, v) for i, v in enumerate(run.curve) if v is not None]
            if pts:
                ax.step(*zip(*pts), where="post", color=colour, lw=0.9, alpha=0.25)
        pts = [(i, v) for i, v in enumerate(row.mean_curve) if v is not None]
        if pts:
            seeds = f"{len(row.runs)} seed{'s' if len(row.runs) != 1 else ''}"
            ax.step(*zip(*pts), where="post", color=colour, lw=2.2, label=f"{row.proposer} ({seeds})")
    if any(r.mean_curve for r in rows):
        ax.legend(loc="lower right", frameon=False, fontsize=9)
    else:
        ax.text(0.5, 0.5, "no experiments recorded", ha="center", va="center", transform=ax.transAxes, color="#777777")
    ax.set_xlabel("experiment")
    ax.set_ylabel(f"best so far ({objective})")
    ax.set_title("best so far per proposer (mean over seeds; faint: single seeds)", fontsize=11)
    fig.savefig(path, format="png", bbox_inches="tight")
    return path


def write_outputs(runs: Sequence[RunStats], setup: dict[str, Any], out: Path, order: Sequence[str] = (),
                  paired: dict[str, Any] | None = None) -> list[Path]:
    """The JSON, PNG and markdown of a comparison; returns their paths."""
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = group(runs, order)
    objective = next((r.objective for r in runs if r.objective), "objective")
    png, md = out.with_suffix(".png"), out.with_suffix(".md")
    plot_curves(rows, runs, png, objective)
    extra = paired_lines(paired) if paired else ""
    md.write_text(f"# Proposer comparison ({objective})\n\n{markdown_table(rows, objective)}{extra}", encoding="utf-8")
    data = {"setup": setup, "objective": objective, "proposers": [asdict(r) for r in rows],
            "runs": [asdict(r) for r in runs], "paired": paired, "figure": str(png), "table": str(md)}
    out.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return [out, png, md]


# --- running ------------------------------------------------------------------------
def run_command(proposer: str, seed: int, *, sample: str, experiments: int, confirm: bool, run_id: str,
                extra: Sequence[str] = ()) -> list[str]:
    return [sys.executable, "-m", "launcher.main", "run", *BASE_OVERRIDES, f"sample={sample}",
            f"research.proposer={proposer}", f"research.seed={seed}", f"research.budget.experiments={experiments}",
            f"research.confirm.enabled={str(confirm).lower()}", f"run_id={run_id}", *extra]


def run_one(cmd: list[str], log_path: Path) -> tuple[int, float]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.run(cmd, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, check=False)
    return proc.returncode, time.perf_counter() - t0


def _resolve(run: str) -> Path:
    path = Path(run)
    return path if path.is_dir() else runs_dir() / run


def _words(text: str) -> list[str]:
    return [w.strip() for w in text.split(",") if w.strip()]


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--proposers", default=",".join(PROPOSERS), help="comma-separated (default: %(default)s)")
    ap.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="comma-separated (default: %(default)s)")
    ap.add_argument("--sample", default="full", help="named dev sample: tiny, small, full (default: %(default)s)")
    ap.add_argument("--experiments", type=int, default=20, help="experiment budget per run (default: %(default)s)")
    ap.add_argument("--confirm", action=argparse.BooleanOptionalAction, default=True,
                    help="held-out confirmation at the end of each run (default: on)")
    ap.add_argument("--out", type=Path, default=None, help=f"JSON path (default: runs/bench/{OUT_NAME}.json)")
    ap.add_argument("--dry-run", action="store_true", help="run nothing: read the run folders given by --runs")
    ap.add_argument("--runs", default="", help="--dry-run: comma-separated run ids (under runs/) or folders")
    ap.add_argument("--paired", default="", help="a,b: a's best config against b's per seed, same dev questions")
    a, rest = ap.parse_known_args(argv)
    extra = [w for w in rest if "=" in w and not w.startswith("-")]
    unknown = [w for w in rest if w not in extra]
    if unknown:
        ap.error(f"unrecognized arguments: {' '.join(unknown)} (overrides are key=value words)")
    if a.dry_run and not _words(a.runs):
        ap.error("--dry-run reads existing runs: give them with --runs a,b,c")
    if a.paired and len(_words(a.paired)) != 2:
        ap.error(f"--paired takes two proposers, a,b (got {a.paired!r})")
    return a, extra


def main(argv: Sequence[str] | None = None) -> int:
    a, extra = parse_args(argv)
    out = a.out or runs_dir() / "bench" / f"{OUT_NAME}.json"
    proposers = _words(a.proposers)
    setup: dict[str, Any] = {"proposers": proposers, "seeds": [int(s) for s in _words(a.seeds)], "sample": a.sample,
                             "experiments": a.experiments, "confirm": a.confirm, "overrides": [*BASE_OVERRIDES, *extra],
                             "dry_run": a.dry_run, "measured": time.strftime("%Y-%m-%dT%H:%M:%S"), "cpus": os.cpu_count()}
    runs: list[RunStats] = []
    if a.dry_run:
        setup = {"dry_run": True, "runs": _words(a.runs), "measured": setup["measured"]}
        runs = [read_run(_resolve(r)) for r in _words(a.runs)]
        proposers = []
    else:
        stamp = time.strftime("%m%d-%H%M%S")
        if not any(w.startswith("research.repo=") for w in extra):
            from research.workspace.repo import make_scratch_repo

            repo = make_scratch_repo(runs_dir() / "bench" / f"{OUT_NAME}-repo-{stamp}")
            extra = [*extra, f"research.repo={repo}"]
            setup["repo"] = str(repo)
        # seeds outer: a bench stopped early still compares every proposer on the seeds it finished
        for seed in setup["seeds"]:
            for proposer in proposers:
                run_id = f"bench-{proposer}-{seed}-{stamp}"
                cmd = run_command(proposer, seed, sample=a.sample, experiments=a.experiments, confirm=a.confirm,
                                  run_id=run_id, extra=extra)
                log_path = runs_dir() / "bench" / f"{OUT_NAME}-logs" / f"{run_id}.log"
                print(f"{run_id}: running (log {log_path})", flush=True)
                rc, wall = run_one(cmd, log_path)
                stats = read_run(runs_dir() / run_id)
                stats.returncode, stats.run_wall_s = rc, round(wall, 1)
                runs.append(stats)
                print(f"{run_id}: exit {rc} in {wall:.0f}s; best {_f(stats.final_best)} "
                      f"(gain {_f(stats.gain, sign=True)})", flush=True)
    paired = paired_between(runs, *_words(a.paired)) if a.paired else None
    paths = write_outputs(runs, setup, out, proposers, paired)
    print(Path(paths[2]).read_text(encoding="utf-8"))
    for label, path in zip(("json", "figure", "table"), paths):
        print(f"{label}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
