"""Abstention on measured reader runs: its exact end-to-end figure at every threshold (issue #14).

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

The reader's token confidence (``answer.abstain=confidence``) is exact the same way: it decides
after the reply, from the reply's own log-probabilities, so a run made with
``answer.record_logprobs=true`` (its rows carry ``answer_logprobs``) gives its figure at every
``answer.abstain_logprob`` (``--signal confidence``).

Each composed row is compared with its base run on the same questions, using the loop's paired
test (research.evaluation.stats). The margins come from the retriever's own signal (memsys.retrieve.support)
over the same preset's candidates (benchmarks.perf.bench_abstention.margins).

Usage::

    python -m research.perf.bench_abstention_reader --runs omni=bench-reader-omni-0ddd2b0a,\\
        reader=bench-reader-omni+abstain-4ee42884 [--margins 0,0.04,0.08,0.12,0.2] [--preset omni]
        [--out runs/bench/abstention_reader.json]
    python -m research.perf.bench_abstention_reader --signal confidence --runs omni=<run with logprobs> \\
        [--thresholds -0.25,-0.5,-1,-1.5,-2] [--out runs/bench/abstention_confidence.json]
    python -m research.perf.bench_abstention_reader --signal both --runs omni=<run with logprobs> \
        [--margins ...] [--thresholds ...] [--out runs/bench/abstention_both.json]

This drives research/ helpers (an entry point, not part of the scorer package).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from harness.bench_output import command, write_result
from harness.paths import runs_dir
from memsys.answer.generate import ABSTAIN_TEXT
from research.evaluation.stats import per_question
from research.perf.reader_runs import abstained as abstained_row
from research.perf.reader_runs import format_paired, mean4, named, paired, read_run

MARGINS = (0.0, 0.04, 0.06, 0.08, 0.1, 0.12, 0.15, 0.2)
LOGPROBS = (-0.25, -0.5, -0.75, -1.0, -1.5, -2.0)
ScoreAbstain = Callable[[str], dict[str, float]]  # question id -> the scorer's scores for ABSTAIN_TEXT


@dataclass(frozen=True)
class Composed:
    """One reader run with abstention at one threshold."""

    threshold: float | str  # a margin or log-probability; "margin / logprob / rule" for a combination
    rows: list[dict[str, Any]]
    abstained: dict[str, int]  # "cat5" / "cat1_4" -> questions newly abstained
    ids: list[str]  # those questions


def by_margin(margins: Mapping[str, float | None], margin: float) -> set[str]:
    """``answer.abstain=retrieval`` at ``abstain_margin=margin``: the named speaker trails by more than it."""
    return {q for q, m in margins.items() if m is not None and m < -margin}


def mean_logprob(row: Mapping[str, Any]) -> float | None:
    lps = row.get("answer_logprobs")
    return sum(lps) / len(lps) if lps else None


def by_confidence(rows: Sequence[Mapping[str, Any]], threshold: float) -> set[str]:
    """``answer.abstain=confidence`` at ``abstain_logprob=threshold`` (memsys.answer.generate's rule)."""
    out = set()
    for row in rows:
        c = mean_logprob(row)
        if c is not None and c < threshold:
            out.add(str(row["question_id"]))
    return out


def by_both(margins: Mapping[str, float | None], rows: Sequence[Mapping[str, Any]], margin: float, threshold: float,
            rule: str) -> set[str]:
    """Retrieval's margin and the reader's confidence together: abstain when either doubts (``or``:
    ``answer.abstain=or_confidence``), or only when both do (``and``: ``and_confidence``, where a weak
    margin alone does not silence a confident reader)."""
    weak, unsure = by_margin(margins, margin), by_confidence(rows, threshold)
    return weak | unsure if rule == "or" else weak & unsure


def compose(rows: Sequence[Mapping[str, Any]], abstain: set[str], threshold: float | str,
            score_abstain: ScoreAbstain) -> Composed:
    """The run's scored rows as they would be had the questions in ``abstain`` been abstained on: the
    abstention text, scored by the scorer, and no context."""
    out: list[dict[str, Any]] = []
    abstained, ids = {"cat5": 0, "cat1_4": 0}, []
    for row in rows:
        qid = str(row["question_id"])
        if qid not in abstain:
            out.append(dict(row))
            continue
        abstained["cat5" if str(row.get("category")) == "5" else "cat1_4"] += 1
        ids.append(qid)
        out.append(abstained_row(row, score_abstain(qid)))
    return Composed(threshold, out, abstained, ids)


def figures(c: Composed, base: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The composed row's F1 figures, and its paired difference from the base run on the same questions."""
    out: dict[str, Any] = {"threshold": c.threshold, "abstained": c.abstained, "abstained_ids": c.ids}
    for obj in ("f1_cat1_4", "f1_cat5", "all_honest"):
        cand, ref = per_question(obj, c.rows), per_question(obj, base)
        out[obj] = mean4(cand)
        if obj != "f1_cat5" and (d := paired(cand, ref)) is not None:
            out[f"{obj}_vs_base"] = d
    return out


def sweep(rows: Sequence[Mapping[str, Any]], margins: Mapping[str, float | None] | None, thresholds: Sequence[float],
          score_abstain: ScoreAbstain) -> list[dict[str, Any]]:
    """Each threshold's figures: speaker margins when ``margins`` is given, else the rows' own confidence."""
    def chosen(t: float) -> set[str]:
        return by_margin(margins, t) if margins is not None else by_confidence(rows, t)

    return [figures(compose(rows, chosen(t), t, score_abstain), rows) for t in thresholds]


def sweep_both(rows: Sequence[Mapping[str, Any]], margins: Mapping[str, float | None], margin_list: Sequence[float],
               thresholds: Sequence[float], score_abstain: ScoreAbstain) -> list[dict[str, Any]]:
    """Every (margin, abstain_logprob, rule) of the grid, both rules: ``--signal both``."""
    return [figures(compose(rows, by_both(margins, rows, m, t, rule), f"{m:.2f} / {t:.2f} / {rule}", score_abstain), rows)
            for rule in ("or", "and") for m in margin_list for t in thresholds]


def render(result: dict[str, Any]) -> str:
    head = {"margin": "margin", "confidence": "abstain_logprob"}.get(result.get("signal", "margin"),
                                                                     "margin / abstain_logprob / rule")
    lines = [f"| run | {head} | cat 5 abstained | cat 1-4 abstained | F1 cat 1-4 | cat 5 | all_honest | "
             "all_honest vs the run (95% CI) | F1 cat 1-4 vs the run |", "| --- " * 9 + "|"]
    for name, run in result["runs"].items():
        n5, n14 = run["n_cat5"], run["n_cat1_4"]
        base = run["as_run"]
        lines.append(f"| {name} | (as run) | | | {base['f1_cat1_4']} | {base['f1_cat5']} | {base['all_honest']} | | |")
        for r in run["sweep"]:
            ah, f14 = r.get("all_honest_vs_base"), r.get("f1_cat1_4_vs_base")
            lines.append(
                f"| {name} | {r['threshold'] if isinstance(r['threshold'], str) else format(r['threshold'], '.2f')} | {r['abstained']['cat5']} of {n5} | {r['abstained']['cat1_4']} of {n14} | "
                f"{r['f1_cat1_4']} | {r['f1_cat5']} | {r['all_honest']} | "
                + f"{format_paired(ah)} | "
                + (f"{f14['delta']:+.3f} |" if f14 else "- |"))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.datasets import load_benchmark
    from benchmarks.perf.bench_abstention import margins as retrieval_margins
    from benchmarks.scoring import score_question

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", required=True, help="name=run id (or folder), comma-separated: measured reader runs")
    ap.add_argument("--signal", choices=("margin", "confidence", "both"), default="margin",
                    help="retrieval's speaker margin, the reader's mean answer-token log-probability, or every "
                         "pair of the two (--margins x --thresholds, abstaining on either or on both)")
    ap.add_argument("--abstain-signal", default="subject", help="the retrieval margin (answer.abstain_signal): "
                    "subject (whom the best statement is about) or speaker (who said the best turn)")
    ap.add_argument("--margins", default=",".join(str(m) for m in MARGINS))
    ap.add_argument("--thresholds", default=",".join(str(t) for t in LOGPROBS), help="abstain_logprob values (confidence)")
    ap.add_argument("--preset", default="omni", help="the preset the runs retrieved with (its margins are computed)")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--out", type=Path, default=None, help="default runs/bench/abstention_reader.json "
                                                             "(abstention_confidence.json with --signal confidence)")
    args = ap.parse_args(argv)
    runs = named(args.runs)
    needs_logprobs, needs_margins = args.signal in ("confidence", "both"), args.signal in ("margin", "both")
    margin_list = [float(x) for x in args.margins.split(",") if x]
    logprob_list = [float(x) for x in args.thresholds.split(",") if x]
    out_path = args.out or runs_dir() / "bench" / {"margin": "abstention_reader.json", "confidence":
                                                   "abstention_confidence.json", "both": "abstention_both.json"}[args.signal]
    questions = {q.id: q for conv in load_benchmark("locomo").conversations for q in conv.questions}
    margin_of = {qid: m for qid, _, m in retrieval_margins(args.split, args.preset, (), args.abstain_signal)} \
        if needs_margins else None

    def score_abstain(qid: str) -> dict[str, float]:
        return score_question("locomo", ABSTAIN_TEXT, questions[qid])

    out_runs: dict[str, Any] = {}
    for name, spec in runs.items():
        run_dir, rows = read_run(spec)
        missing = [str(r["question_id"]) for r in rows
                   if str(r["question_id"]) not in (questions if margin_of is None else margin_of)]
        if missing:
            raise SystemExit(f"{name}: {len(missing)} questions are not in split {args.split!r} (e.g. {missing[0]})")
        if needs_logprobs and not any(r.get("answer_logprobs") for r in rows):
            raise SystemExit(f"{name}: no answer_logprobs in {run_dir.name}'s rows (run it with "
                             "memory.answer.record_logprobs=true)")
        as_run = {obj: mean4(per_question(obj, rows)) for obj in ("f1_cat1_4", "f1_cat5", "all_honest")}
        out_runs[name] = {"run_id": run_dir.name, "n": len(rows),
                          "n_cat5": sum(str(r.get("category")) == "5" for r in rows),
                          "n_cat1_4": sum(str(r.get("category")) != "5" for r in rows), "as_run": as_run,
                          "sweep": sweep_both(rows, margin_of, margin_list, logprob_list, score_abstain)
                          if args.signal == "both" else
                          sweep(rows, margin_of, logprob_list if needs_logprobs else margin_list, score_abstain)}
    result = {"command": command("research.perf.bench_abstention_reader", argv),
              "when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "preset": args.preset,
              "split": args.split, "signal": args.signal,
              "abstain_signal": args.abstain_signal if needs_margins else None, "runs": out_runs}
    write_result(out_path, result, render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
