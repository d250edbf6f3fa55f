"""Retrieval abstention on measured reader runs: its exact end-to-end figure at every margin (issue #14).

Why: ``answer.abstain=retrieval`` decides before the reader is asked. When the named speaker's best
content match trails another speaker's by more than the margin, the retriever empties the context
and the answer is the fixed abstention text without a reader call
(memsys.retrieve.retriever, memsys.answer.generate). So on a question answered by a measured reader
run, the same config with retrieval abstention gives one of two things. Either the run's own answer
is kept, or the abstention text is scored by the scorer. That makes the end-to-end figure exact at
any margin, at no reader time.

``bench_abstention`` could only estimate it, by charging an abstained question a mean F1. Here each
abstained question loses its own measured score. ``answer.abstain=both`` is the same composition on
a run made with ``answer.abstain=reader``.

Each composed row is compared with its base run on the same questions, using the loop's paired
test (research.stats). The margins come from the retriever's own signal (memsys.retrieve.support)
over the same preset's candidates (benchmarks.perf.bench_abstention.margins).

Usage::

    python -m research.perf.bench_abstention_reader --runs omni=bench-reader-omni-0ddd2b0a,\\
        reader=bench-reader-omni+abstain-4ee42884 [--margins 0,0.04,0.08,0.12,0.2] [--preset omni]
        [--out runs/bench/abstention_reader.json]

This drives research/ helpers (an entry point, not part of the scorer package).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from statistics import mean
from typing import Any, Callable, Mapping, Sequence

from harness.atomic import atomic_write_json, atomic_write_text
from harness.paths import runs_dir
from memsys.answer.generate import ABSTAIN_TEXT
from research.diagnosis import read_rows
from research.stats import paired_test, per_question

MARGINS = (0.0, 0.04, 0.08, 0.12, 0.2)
ScoreAbstain = Callable[[str], dict[str, float]]  # question id -> the scorer's scores for ABSTAIN_TEXT


@dataclass(frozen=True)
class Composed:
    """One reader run with retrieval abstention at one margin."""

    margin: float
    rows: list[dict[str, Any]]
    abstained: dict[str, int]  # "cat5" / "cat1_4" -> questions newly abstained by retrieval
    ids: list[str]  # those questions


def compose(rows: Sequence[Mapping[str, Any]], margins: Mapping[str, float | None], margin: float,
            score_abstain: ScoreAbstain) -> Composed:
    """The run's scored rows as they would be with ``answer.abstain_margin=margin`` added: a question whose
    speaker margin is below -margin gets the abstention text, scored by the scorer, and no context."""
    out: list[dict[str, Any]] = []
    abstained, ids = {"cat5": 0, "cat1_4": 0}, []
    for row in rows:
        qid = str(row["question_id"])
        m = margins.get(qid)
        if m is None or m >= -margin:
            out.append(dict(row))
            continue
        abstained["cat5" if str(row.get("category")) == "5" else "cat1_4"] += 1
        ids.append(qid)
        out.append({**row, "prediction": ABSTAIN_TEXT, "scores": score_abstain(qid), "context_ids": [],
                    "context_tokens": 0, "prompt_tokens": 0})
    return Composed(margin, out, abstained, ids)


def _mean(values: Mapping[str, float]) -> float | None:
    return round(mean(values.values()), 4) if values else None


def figures(c: Composed, base: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The composed row's F1 figures, and its paired difference from the base run on the same questions."""
    out: dict[str, Any] = {"margin": c.margin, "abstained": c.abstained, "abstained_ids": c.ids}
    for obj in ("f1_cat1_4", "f1_cat5", "all_honest"):
        cand, ref = per_question(obj, c.rows), per_question(obj, base)
        out[obj] = _mean(cand)
        if obj != "f1_cat5" and set(cand) & set(ref):
            t = paired_test(cand, ref)
            out[f"{obj}_vs_base"] = {"delta": round(t.mean_delta, 4), "ci": [round(t.ci_low, 4), round(t.ci_high, 4)],
                                     "p_better": round(t.p_better, 4), "p_worse": round(t.p_worse, 4), "n": t.n}
    return out


def sweep(rows: Sequence[Mapping[str, Any]], margins: Mapping[str, float | None], thresholds: Sequence[float],
          score_abstain: ScoreAbstain) -> list[dict[str, Any]]:
    return [figures(compose(rows, margins, t, score_abstain), rows) for t in thresholds]


def render(result: dict[str, Any]) -> str:
    lines = ["| run | margin | cat 5 abstained | cat 1-4 abstained | F1 cat 1-4 | cat 5 | all_honest | "
             "all_honest vs the run (95% CI) | F1 cat 1-4 vs the run |", "| --- " * 9 + "|"]
    for name, run in result["runs"].items():
        n5, n14 = run["n_cat5"], run["n_cat1_4"]
        base = run["as_run"]
        lines.append(f"| {name} | (as run) | | | {base['f1_cat1_4']} | {base['f1_cat5']} | {base['all_honest']} | | |")
        for r in run["sweep"]:
            ah, f14 = r.get("all_honest_vs_base"), r.get("f1_cat1_4_vs_base")
            lines.append(
                f"| {name} | {r['margin']:.2f} | {r['abstained']['cat5']} of {n5} | {r['abstained']['cat1_4']} of {n14} | "
                f"{r['f1_cat1_4']} | {r['f1_cat5']} | {r['all_honest']} | "
                + (f"{ah['delta']:+.3f} [{ah['ci'][0]:+.3f}, {ah['ci'][1]:+.3f}] p={ah['p_better']:.3f} | " if ah else "- | ")
                + (f"{f14['delta']:+.3f} |" if f14 else "- |"))
    return "\n".join(lines)


def _run_dir(spec: str) -> Path:
    p = Path(spec)
    return p if p.is_dir() else runs_dir() / spec


def _read_rows(run_dir: Path) -> list[dict[str, Any]]:
    if not (run_dir / "predictions.jsonl").exists():
        raise SystemExit(f"{run_dir}: no predictions.jsonl (is the run finished and scored?)")
    return read_rows(run_dir)


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.datasets import load_benchmark
    from benchmarks.perf.bench_abstention import margins as speaker_margins
    from benchmarks.scoring import score_question

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", required=True, help="name=run id (or folder), comma-separated: measured reader runs")
    ap.add_argument("--margins", default=",".join(str(m) for m in MARGINS))
    ap.add_argument("--preset", default="omni", help="the preset the runs retrieved with (its margins are computed)")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--out", type=Path, default=runs_dir() / "bench" / "abstention_reader.json")
    args = ap.parse_args(argv)
    runs = dict(item.split("=", 1) for item in args.runs.split(",") if item)
    thresholds = [float(x) for x in args.margins.split(",") if x]
    questions = {q.id: q for conv in load_benchmark("locomo").conversations for q in conv.questions}
    margin_of = {qid: m for qid, _, m in speaker_margins(args.split, args.preset, ())}

    def score_abstain(qid: str) -> dict[str, float]:
        return score_question("locomo", ABSTAIN_TEXT, questions[qid])

    out_runs: dict[str, Any] = {}
    for name, spec in runs.items():
        run_dir = _run_dir(spec)
        rows = _read_rows(run_dir)
        missing = [str(r["question_id"]) for r in rows if str(r["question_id"]) not in margin_of]
        if missing:
            raise SystemExit(f"{name}: {len(missing)} questions are not in split {args.split!r} (e.g. {missing[0]})")
        as_run = {obj: _mean(per_question(obj, rows)) for obj in ("f1_cat1_4", "f1_cat5", "all_honest")}
        out_runs[name] = {"run_id": run_dir.name, "n": len(rows),
                          "n_cat5": sum(str(r.get("category")) == "5" for r in rows),
                          "n_cat1_4": sum(str(r.get("category")) != "5" for r in rows), "as_run": as_run,
                          "sweep": sweep(rows, margin_of, thresholds, score_abstain)}
    result = {"command": "python -m research.perf.bench_abstention_reader " + " ".join(sys.argv[1:] if argv is None else argv),
              "when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "preset": args.preset,
              "split": args.split, "runs": out_runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out, result)
    table = render(result)
    atomic_write_text(args.out.with_suffix(".md"), table + "\n")
    print(table)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
