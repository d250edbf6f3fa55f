"""Which early stop saves the most evaluation without stopping a winner? (issue #50, multi-fidelity)

Why: the loop answers a candidate on nested batches of its questions before the full sample, and stops a
clearly worse one. Two rules were on the table: the paired probe the loop had (one look at the
``small`` batch: the paired bootstrap CI of the difference below 0 and p_worse < 0.01) and Optuna's
``WilcoxonPruner`` (a look after every batch; ``research/loop/pruning.py``). This bench replays both on
the same candidates from finished evaluations, so no question is answered twice to compare them:

- every ordered pair of runs is one (best, candidate) pair: the candidate as the loop would meet it;
- the full evaluation's decision is the loop's own (``research.loop.decide``: the relative bar and the
  paired test at alpha);
- a rule's cost is the questions the candidate answers: up to the batch where it stopped, or all of them;
- per rule: candidates stopped, **winners stopped** (pairs the full evaluation accepts: must be 0), and
  candidates per hour against full evaluation (questions answered in full / questions answered);
- the ceiling no rule can pass on these candidates: every loser stopped on the first batch and every winner
  answered in full. When winners are common, it lies under a target such as 3x whatever the rule.

Usage::

    python -m research.perf.bench_pruning --sweep runs/<sweep-id> [--batches tiny,small] [--objective auto]
    python -m research.perf.bench_pruning --runs "a=<run-id>,b=<run-id>,..."

The runs must have scored the same benchmark, split and sample; a reader-free sweep of many configs is a
cheap source (``memsys eval sample=half reader=none memory=naive,omni memory.retrieval.top_k=2,5,10,20``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.bench_output import command, utc_now, write_result
from harness.paths import runs_dir

#: the rule the loop had before it: one look at the largest nested batch, paired CI below 0, p_worse < 0.01, >= 10 questions
PROBE_ALPHA = 0.01
PROBE_MIN_QUESTIONS = 10
WILCOXON_THRESHOLDS = (0.01, 0.05, 0.1)


def full_accepts(candidate: Mapping[str, float], best: Mapping[str, float], *, min_rel_improvement: float,
                 alpha: float) -> bool:
    """The loop's decision on the whole sample: proceed or not."""
    from research.evaluation.stats import paired_test
    from research.loop.decide import DecisionState, decide

    best_value = sum(best.values()) / len(best)
    value = sum(candidate.values()) / len(candidate)
    d = decide(DecisionState(best_value), value, paired_test(candidate, best), min_rel_improvement=min_rel_improvement,
               alpha=alpha, max_iterations=99, degradations_to_pivot=99)
    return d.kind == "proceed"


def paired_probe_stops(candidate: Mapping[str, float], best: Mapping[str, float]) -> bool:
    from research.evaluation.stats import paired_test

    t = paired_test(candidate, best)
    return t.n >= PROBE_MIN_QUESTIONS and t.ci_high < 0 and t.p_worse < PROBE_ALPHA


def simulate(scores: Mapping[str, Mapping[str, float]], batches: Sequence[Sequence[str]], *, min_rel_improvement: float,
             alpha: float, n_startup_steps: int = 10) -> dict[str, Any]:
    """Every rule on every ordered (best, candidate) pair. ``batches`` are the nested question sets, smallest
    first, the last one the full sample; Wilcoxon looks after each (at least ``n_startup_steps`` paired, the
    loop's ``probe_min_questions``), the paired probe once, at the largest. Pure."""
    from research.loop.pruning import wilcoxon_stops

    full = list(batches[-1])
    last = len(batches) - 2  # the probe's one look: the largest nested batch (its default was `small`, not `tiny`)
    rules: dict[str, Any] = {"paired_probe": lambda c, b, k: k == last and paired_probe_stops(c, b)}
    for p in WILCOXON_THRESHOLDS:
        rules[f"wilcoxon@{p:g}"] = (lambda p: lambda c, b, k: wilcoxon_stops(c, b, p_threshold=p,
                                                                             n_startup_steps=n_startup_steps))(p)
    out: dict[str, Any] = {name: {"stopped": 0, "winners_stopped": 0, "questions": 0, "stopped_at": {}}
                           for name in rules}
    pairs = winners = 0
    for best_name, best_all in scores.items():
        best = {q: best_all[q] for q in full}
        for cand_name, cand_all in scores.items():
            if cand_name == best_name:
                continue
            pairs += 1
            accepts = full_accepts({q: cand_all[q] for q in full}, best, min_rel_improvement=min_rel_improvement,
                                   alpha=alpha)
            winners += accepts
            for name, stops in rules.items():
                r = out[name]
                spent = len(full)
                for k, batch in enumerate(batches[:-1]):
                    if stops({q: cand_all[q] for q in batch}, best, k):
                        spent = len(batch)
                        r["stopped"] += 1
                        r["winners_stopped"] += accepts
                        r["stopped_at"][str(len(batch))] = r["stopped_at"].get(str(len(batch)), 0) + 1
                        break
                r["questions"] += spent
    for r in out.values():
        r["candidates_per_hour_x"] = round(pairs * len(full) / r["questions"], 3) if r["questions"] else None
    least = winners * len(full) + (pairs - winners) * len(batches[0])  # a perfect rule's cost
    return {"pairs": pairs, "winners": winners, "questions_full": len(full), "batches": [len(b) for b in batches],
            "rules": out, "ceiling_x": round(pairs * len(full) / least, 3) if least else None}


def render(result: Mapping[str, Any]) -> str:
    s = result["simulation"]
    lines = [f"early stopping on {s['pairs']} (best, candidate) pairs of {len(result['runs'])} runs, objective "
             f"{result['objective']}; batches {s['batches']} questions; {s['winners']} pairs the full evaluation accepts",
             f"{'rule':<16} {'stopped':>8} {'winners stopped':>16} {'questions':>10} {'candidates/h':>13}"]
    for name, r in s["rules"].items():
        lines.append(f"{name:<16} {r['stopped']:>8} {r['winners_stopped']:>16} {r['questions']:>10} "
                     f"{r['candidates_per_hour_x']:>12.2f}x")
    lines.append(f"ceiling (every loser stopped on the first batch, every winner in full): {s['ceiling_x']:.2f}x")
    return "\n".join(lines)


def nested_batches(benchmark: str, split: str, names: Sequence[str], sample: str) -> list[list[str]]:
    """The question ids of each named sample (smallest first) and of the full sample; each must hold the last."""
    from benchmarks.config import load_eval_setup
    from benchmarks.runner import selection

    out = []
    for name in [*names, sample]:
        bench = selection(load_eval_setup([f"benchmark={benchmark}", f"split={split}", f"sample={name}"]))
        out.append(sorted(q.id for c in bench.conversations for q in c.questions))
    for small, big in zip(out, out[1:]):
        if not set(small) < set(big):
            raise SystemExit(f"the batches {[*names, sample]} are not nested samples")
    return out


def _sweep_runs(folder: Path) -> dict[str, str]:
    """A sweep's configs as name -> run folder, each named by the overrides that tell it from the others."""
    meta = json.loads((folder / "sweep.json").read_text())
    common = set.intersection(*(set(c["overrides"]) for c in meta["configs"]))
    return {"_".join(o.split(".")[-1] for o in c["overrides"] if o not in common) or c["run_id"]: str(folder.parent / c["run_id"])
            for c in meta["configs"]}


def main(argv: Sequence[str] | None = None) -> int:
    from research.evaluation.diagnosis import read_rows
    from research.evaluation.stats import per_question
    from research.perf.bench_reader import finished_runs

    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", type=Path, default=None, help="a `memsys eval` sweep folder (runs/<sweep-id>)")
    ap.add_argument("--runs", default="", help="name=run-id,...: finished evaluations")
    ap.add_argument("--benchmark", default="locomo")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--batches", default="tiny,small", help="nested named samples, smallest first")
    ap.add_argument("--objective", default=None, help="default: the runs' own objective")
    ap.add_argument("--min-rel-improvement", type=float, default=0.005)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if bool(args.sweep) == bool(args.runs):
        raise SystemExit("give exactly one of --sweep and --runs")
    spec = ",".join(f"{k.replace('=', ':')}={v}" for k, v in _sweep_runs(args.sweep).items()) if args.sweep else args.runs
    runs = finished_runs(spec, args.benchmark, args.split)
    metas = {name: meta for name, (_, meta) in runs.items()}
    samples = {m.get("sample") for m in metas.values()}
    if len(samples) != 1:
        raise SystemExit(f"the runs scored different samples: {sorted(map(str, samples))}")
    sample = samples.pop() or "full"
    objective = args.objective or json.loads((next(iter(runs.values()))[0] / "metrics.json").read_text())["objective"]
    scores = {name: per_question(objective, read_rows(run_dir)) for name, (run_dir, _) in runs.items()}
    batches = nested_batches(args.benchmark, args.split, [b for b in args.batches.split(",") if b], sample)
    batches = [[q for q in b if all(q in s for s in scores.values())] for b in batches]
    result = {"command": command("research.perf.bench_pruning", argv), "when": utc_now(),
              "objective": objective, "sample": sample, "runs": {n: d.name for n, (d, _) in runs.items()},
              "simulation": simulate(scores, batches, min_rel_improvement=args.min_rel_improvement, alpha=args.alpha)}
    write_result(args.out or runs_dir() / "bench" / "pruning.json", result, render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
