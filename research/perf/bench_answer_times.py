"""Relative times in answers made absolute (``answer.resolve_times``), exact on measured reader runs.

Why: the rewrite (memsys/answer/times.py) acts after the reply, from the reply's text and the context the
reader was given. So a reader run made without it gives its figure with it at no reader time: rebuild
each question's context with the run's preset, check it is the one the run gave the reader (the ids the
run recorded), rewrite the run's own answer, and score it with the scorer. Retrieval abstention composes
the same way (it decides before the reader is asked): where the rebuilt context abstains, the answer is
the abstention text. The answer attribution check (``answer.abstain_attribution``,
memsys/answer/attribution.py) also acts after the reply, from the answer and that context, so it
composes too: where it finds the answer is another speaker's, the row becomes the abstention text (the
reader was asked: its context stays). So ``--presets omni=omni`` on a run made with ``answer.abstain=off``
gives the shipped ``omni``'s figure, with or without the two levers on in the run. Each run is compared with the composed run on the same questions with the
loop's paired test (research.evaluation.stats).

Usage::

    python -m research.perf.bench_answer_times --runs omni=bench-reader-omni-c16dc7ee[,naive_rag=<id>]
        [--presets omni=omni:memory.answer.abstain=off,naive_rag=naive_rag] [--split dev]
        [--against naive_rag=<run id>] [--out runs/bench/answer_times.json]

A run's preset defaults to its name; ``--presets`` gives overrides (';'-separated) to rebuild its contexts.
This drives research/ helpers (an entry point, not part of the scorer package).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from statistics import mean
from typing import Any, Mapping, Sequence

from tqdm import tqdm

from harness.bench_output import command, write_result
from harness.paths import runs_dir
from memsys.answer.generate import ABSTAIN_TEXT
from research.evaluation.stats import per_question
from research.perf.reader_runs import abstained, format_paired, mean4, named, paired, presets, read_run

OBJECTIVES = ("f1_cat1_4", "all_honest")


def contexts(split: str, preset: str, overrides: Sequence[str], question_ids: set[str]) -> dict[str, Any]:
    """question id -> (the question, the Context the preset gives it, the preset's memory config), for the
    listed questions of the split."""
    from benchmarks.perf.stores import split_memories

    out: dict[str, Any] = {}
    for conv, mem in split_memories(split, preset, overrides, question_ids):
        for q in tqdm([q for q in conv.questions if q.id in question_ids], desc=conv.id, unit="q"):
            out[q.id] = (q.question, mem.context(q.question), mem.cfg)
    return out


def rewrite(rows: Sequence[Mapping[str, Any]], ctxs: Mapping[str, Any], score
            ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The run's rows with each answer rewritten as ``answer.resolve_times`` would, then dropped where
    ``answer.abstain_attribution`` (when the preset has it) finds it is another speaker's; the rewritten
    answers; the dropped ones."""
    from memsys.answer.attribution import attributed_elsewhere
    from memsys.answer.times import resolve_answer_times
    from memsys.predict import reader_input_digest

    out: list[dict[str, Any]] = []
    changed: list[dict[str, Any]] = []
    attributed: list[dict[str, Any]] = []
    for row in rows:
        qid = str(row["question_id"])
        question, ctx, cfg = ctxs[qid]
        if cfg.answer.abstains_by_confidence():
            raise SystemExit(f"answer.abstain={cfg.answer.abstain} decides from the reply's log-probabilities: "
                             "compose it with research.perf.bench_abstention_reader --signal confidence|both")
        if ctx.abstain_reason:  # retrieval abstains: the reader is not asked, the answer is fixed
            out.append(abstained(row, score(qid, ABSTAIN_TEXT)))
            continue
        ids = list(ctx.source_ids)
        if row.get("context_ids") is not None and ids != list(row["context_ids"]):
            raise SystemExit(f"{qid}: the rebuilt context differs from the run's ({len(ids)} vs "
                             f"{len(row['context_ids'])} items): wrong preset or overrides?")
        # the run's reader was sent exactly these messages (same hash as memsys.predict records), so the
        # run's answer is this context's answer; a run made with a post-reply lever on already holds its result
        asked = {(times, attribution): reader_input_digest(question, ctx, replace(cfg, answer=replace(
                    cfg.answer, resolve_times=times, abstain_attribution=attribution)))
                 for times in (False, True) for attribution in (False, True)}
        recorded = row.get("input_sha256")
        made_with = next((levers for levers, digest in asked.items() if digest == recorded), (False, False))
        if recorded and recorded not in asked.values():
            raise SystemExit(f"{qid}: the rebuilt reader input differs from the run's (same memories, other "
                             "text or prompt): the run was made by other code or config")
        pred = str(row.get("prediction") or "")
        new = resolve_answer_times(pred, ctx.items) if not (row.get("error") or made_with[0]) else pred
        if new != pred:
            scores = score(qid, new)
            changed.append({"question_id": qid, "category": str(row.get("category")), "before": pred, "after": new,
                            "f1_before": row["scores"]["f1"], "f1_after": scores["f1"]})
            row = {**row, "prediction": new, "scores": scores}
        if cfg.answer.abstain_attribution and not (row.get("error") or made_with[1]) and new != ABSTAIN_TEXT \
                and (reason := attributed_elsewhere(question, new, ctx.items, ctx.speakers)):
            # the reader was asked and saw the context: only the answer changes
            attributed.append({"question_id": qid, "category": str(row.get("category")), "answer": new,
                               "f1_before": row["scores"]["f1"], "reason": reason})
            row = {**row, "prediction": ABSTAIN_TEXT, "scores": score(qid, ABSTAIN_TEXT), "abstained": True}
        out.append(dict(row))
    return out, changed, attributed


def figures(rows: Sequence[Mapping[str, Any]], base: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for obj in OBJECTIVES:
        cand, ref = per_question(obj, rows), per_question(obj, base)
        out[obj], out[f"{obj}_as_run"] = mean4(cand), mean4(ref)
        if (d := paired(cand, ref)) is not None:
            out[f"{obj}_delta"] = d
    out["abstained"] = {"cat5": sum(bool(r.get("abstained")) and str(r.get("category")) == "5" for r in rows),
                        "cat1_4": sum(bool(r.get("abstained")) and str(r.get("category")) != "5" for r in rows)}
    out["f1_cat2"] = mean4({str(r["question_id"]): r["scores"]["f1"] for r in rows if str(r.get("category")) == "2"})
    return out


def against(rows: Sequence[Mapping[str, Any]], ref: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The composed rows against another system's run on the questions both answered (e.g. ``naive_rag``)."""
    out: dict[str, Any] = {}
    for obj in OBJECTIVES:
        cand, base = per_question(obj, rows), per_question(obj, ref)
        shared = set(cand) & set(base)
        if shared:
            c, b = mean(cand[q] for q in shared), mean(base[q] for q in shared)
            out[obj] = {"composed": round(c, 4), "reference": round(b, 4), "ratio": round(c / max(b, 1e-9), 3),
                        **(paired(cand, base) or {})}
    return out


def render(result: dict[str, Any]) -> str:
    lines = ["| run | rewritten answers | abstained (cat 5, cat 1-4) | F1 cat 1-4 as run -> composed | paired (95% CI) "
             "| all_honest as run -> composed | paired (95% CI) |", "| --- " * 7 + "|"]

    for name, r in result["runs"].items():
        f = r["figures"]
        lines.append(f"| {name} | {len(r['changed'])} | {f['abstained']['cat5']}, {f['abstained']['cat1_4']} | "
                     f"{f['f1_cat1_4_as_run']} -> {f['f1_cat1_4']} | {format_paired(f.get('f1_cat1_4_delta'))} | "
                     f"{f['all_honest_as_run']} -> {f['all_honest']} | {format_paired(f.get('all_honest_delta'))} |")
    for name, r in result["runs"].items():
        for obj, a in r.get("against", {}).items():
            lines.append(f"- {name} composed vs {result['against']}, {obj}: {a['composed']} vs {a['reference']} "
                         f"({a['ratio']}x), {format_paired(a)} ({a['n']} q.)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.datasets import load_benchmark
    from benchmarks.scoring import score_question

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", required=True, help="name=run id (or folder), comma-separated: measured reader runs")
    ap.add_argument("--presets", default="", help="name=preset:override;override, comma-separated (default: the name)")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--against", default="", help="name=run id (or folder): compare each composed run with it "
                                                  "on the shared questions (e.g. naive_rag=<run id>)")
    ap.add_argument("--out", type=Path, default=runs_dir() / "bench" / "answer_times.json")
    args = ap.parse_args(argv)
    runs, run_presets = named(args.runs), presets(args.presets)
    questions = {q.id: q for conv in load_benchmark("locomo").conversations for q in conv.questions}

    def score(qid: str, text: str) -> dict[str, float]:
        return score_question("locomo", text, questions[qid])

    ref_name, _, ref_spec = args.against.partition("=")
    ref_rows = read_run(ref_spec)[1] if ref_spec else None
    out_runs: dict[str, Any] = {}
    for name, spec in runs.items():
        run_dir, rows = read_run(spec)
        preset, overrides = run_presets.get(name, (name, []))
        ctxs = contexts(args.split, preset, [*overrides, "memory.answer.resolve_times=true"],
                        {str(r["question_id"]) for r in rows})
        new_rows, changed, attributed = rewrite(rows, ctxs, score)
        out_runs[name] = {"run_id": run_dir.name, "preset": preset, "overrides": overrides, "n": len(rows),
                          "figures": figures(new_rows, rows), "changed": changed, "attributed": attributed}
        if ref_rows is not None:
            out_runs[name]["against"] = against(new_rows, ref_rows)
    result = {"command": command("research.perf.bench_answer_times", argv),
              "when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "split": args.split,
              "against": ref_name or None, "runs": out_runs}
    write_result(args.out, result, render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
