"""Calibrating retrieval abstention on LoCoMo dev, reader-free (issue #14).

Why: category 5 (22% of LoCoMo) scores only when the system abstains, and every abstention on
categories 1-4 throws that question's F1 away. The retrieval signal (memsys/retrieve/support.py:
the named speaker's best content match minus anyone else's) is computed for every dev question;
for each threshold we report how many category-5 and category-1-4 questions would abstain, and the
change of ``all_honest`` it implies if an abstained category 1-4 question had scored the reader's
mean F1 (``--reader-f1``, default 0.461: omni's category 1-4 F1 in issue #14) — an estimate,
to be checked with the reader (docs/history.md, "Calibrated abstention", says which).

``--signal`` picks the margin (``answer.abstain_signal``): ``speaker`` (who said the best turn) or
``subject`` (whom the best statement is about). ``attribution`` is the check made after the reply
(``answer.abstain_attribution``, memsys/answer/attribution.py), fed the answer a reader would give if
it answered from the evidence: the gold one for categories 1-4 (how often a right answer is dropped)
and LoCoMo's trap answer for category 5 (how often a reader that falls for the trap is caught). It
needs no reader, so it also runs on the held-out test split; its rule acts at margin 0.

The signal's own cost is reported too (``signal_ms``: mean, p50, p95 per question), because ``omni``
pays it on every retrieval: the subject margin embeds each candidate's statements. The embedding
cache is a fresh one (the cost a first evaluation pays; later questions of a conversation reuse the
statements already embedded) unless ``--warm-cache`` keeps the shared one.

Usage: ``python -m benchmarks.perf.bench_abstention [--split dev] [--signal subject] [--warm-cache]
[--out runs/bench/abstention.json]``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from tqdm import tqdm

from benchmarks.perf.stores import split_memories
from harness.bench_output import command, load_average, write_json
from harness.paths import runs_dir
from memsys.retrieve.support import SIGNALS

THRESHOLDS = (0.0, 0.02, 0.04, 0.06, 0.08, 0.1, 0.12, 0.15, 0.2, 0.3)


def stand_in(q: Any) -> str:
    """The answer a reader would give if it answered from the evidence: the gold one, or for category 5
    the trap answer the question leads to (LoCoMo's ``adversarial_answer``)."""
    return (q.adversarial_answer or "") if q.category == "5" else q.answer


def margins(split: str, preset: str, overrides: Sequence[str], signal: str = "subject",
            seconds: list[float] | None = None) -> list[tuple[str, str, float | None]]:
    """(question id, category, margin) for every question of the split; each margin's wall time is
    appended to ``seconds`` when given. ``attribution`` judges the stand-in answer (``stand_in``) in the
    preset's context, as ``answer.abstain_attribution`` judges the reader's."""
    from memsys.answer.attribution import answer_margin

    out: list[tuple[str, str, float | None]] = []
    for conv, mem in split_memories(split, preset, [*overrides, "memory.answer.abstain=off"]):
        for q in tqdm(conv.questions, desc=conv.id, unit="q"):
            r = mem.retrieve(q.question)
            t0 = time.perf_counter()
            if signal == "attribution":
                margin = answer_margin(q.question, stand_in(q), r.context.items, r.context.speakers)
            else:
                margin = SIGNALS[signal].margin(q.question, r.candidates, mem.retriever.speakers, mem.embedder.embed)
            if seconds is not None:
                seconds.append(time.perf_counter() - t0)
            out.append((q.id, q.category, margin))
    return out


def sweep(rows: list[tuple[str, str, float | None]], reader_f1: float) -> list[dict[str, Any]]:
    n5 = sum(c == "5" for _, c, _ in rows)
    n14 = len(rows) - n5
    table = []
    for t in THRESHOLDS:
        a5 = sum(c == "5" and m is not None and m < -t for _, c, m in rows)
        a14 = sum(c != "5" and m is not None and m < -t for _, c, m in rows)
        table.append({"margin": t, "cat5_abstained": round(a5 / n5, 4), "cat1_4_abstained": round(a14 / n14, 4),
                      "est_cat1_4_f1_lost": round(reader_f1 * a14 / n14, 4),
                      "est_all_honest_delta": round((a5 - reader_f1 * a14) / len(rows), 4)})
    return table


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--split", default="dev")
    p.add_argument("--preset", default="omni")
    p.add_argument("--signal", choices=[*sorted(SIGNALS), "attribution"], default="subject",
                   help="attribution: the answer-side check, with the gold answer (categories 1-4) or the "
                        "trap answer (category 5) standing in for the reader's")
    p.add_argument("--reader-f1", type=float, default=0.461)
    p.add_argument("--out", default=str(runs_dir() / "bench" / "abstention.json"))
    p.add_argument("--warm-cache", action="store_true", help="keep the shared embedding cache (default: a fresh one)")
    args = p.parse_args(argv)
    seconds: list[float] = []
    shared = os.environ.get("MEMSYS_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="bench-abstain-cache-") as cache:
        if not args.warm_cache:
            os.environ["MEMSYS_CACHE_DIR"] = cache
        try:
            rows = margins(args.split, args.preset, (), args.signal, seconds)
        finally:
            if shared is None:
                os.environ.pop("MEMSYS_CACHE_DIR", None)
            else:
                os.environ["MEMSYS_CACHE_DIR"] = shared
    table = sweep(rows, args.reader_f1)
    best = max(table, key=lambda r: r["est_all_honest_delta"])
    ms = np.array(seconds) * 1e3
    report = {"command": command("benchmarks.perf.bench_abstention", argv),
              "split": args.split, "preset": args.preset, "signal": args.signal, "reader_f1": args.reader_f1, "n": len(rows),
              "named_one_speaker": sum(m is not None for _, _, m in rows), "sweep": table, "best": best,
              "signal_ms": {"cache": "warm" if args.warm_cache else "fresh", "mean": round(float(ms.mean()), 1),
                            "p50": round(float(np.percentile(ms, 50)), 1), "p95": round(float(np.percentile(ms, 95)), 1)},
              "load_average_end": load_average()}
    out = Path(args.out)
    write_json(out, report)
    for r in table:
        print(r)
    print(f"best: {best}\nsignal_ms: {report['signal_ms']}\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
