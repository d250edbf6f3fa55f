"""What a level-1 summary costs: ``cut`` vs ``extractive`` (pyramid.summary_mode) on LoCoMo turns.

Why: the extractive summary is meant to be cheap enough to run on every candidate of every
question (no LLM); this measures its time per candidate next to the cut's, and the tokens level 1
then spends, and how many of the gold answer's words an evidence turn's summary still holds (a
reader-free proxy: id-level context recall cannot see a sentence dropped from a summary). Per question, the candidates are the question's evidence turns plus turns of its
conversation drawn with a fixed seed, ``--pool`` in all (omni keeps 40), so the figure does not
depend on a retrieval run. Times are the median over ``--repeats`` passes over all questions, on
the real cl100k token counter, in one process.

Usage: ``python -m benchmarks.perf.bench_summary [--split dev] [--pool 40] [--cap 64] [--repeats 5]
[--out runs/bench/summary.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from benchmarks.datasets import load_benchmark
from benchmarks.splits import load_benchmark_config, select
from harness.bench_output import write_json
from harness.paths import runs_dir
from harness.tokens import count_tokens
from memsys.config import PyramidConfig
from memsys.index.sparse import tokenize
from memsys.records import MAU
from memsys.retrieve.pyramid import RankedCandidate, level1_summarizer


@dataclass(frozen=True)
class Pool:
    question: str
    answer: str  # gold, "" for category 5
    evidence: frozenset[str]
    candidates: list[RankedCandidate]


def pools(split: str, size: int, seed: int) -> list[Pool]:
    """A pool for every question of the split: its evidence turns, then random turns."""
    bench = select(load_benchmark("locomo"), split, None, load_benchmark_config("locomo"))
    rng = random.Random(seed)
    out = []
    for conv in bench.conversations:
        turns = {t.id: t for s in conv.sessions for t in s.turns}
        ids = list(turns)
        for q in conv.questions:
            chosen = [i for i in q.evidence if i in turns][:size]
            rest = [i for i in rng.sample(ids, min(len(ids), size + len(chosen))) if i not in chosen]
            chosen += rest[: size - len(chosen)]
            out.append(Pool(q.question, str(q.answer or ""), frozenset(q.evidence),
                            [RankedCandidate(MAU(id=i, summary=turns[i].text, speaker=turns[i].speaker), 0.0, {"dense"})
                             for i in chosen]))
    return out


def run(mode: str, cap: int, questions: list[Pool]) -> tuple[float, list[str]]:
    """Seconds for one pass (weights and summaries of every candidate), and the summaries."""
    cfg = PyramidConfig(summary_mode=mode, summary_max_tokens=cap)
    out: list[str] = []
    t0 = time.perf_counter()
    for p in questions:
        summarize = level1_summarizer(p.question, p.candidates, cfg, count_tokens)
        out.extend(summarize(c.mau) for c in p.candidates)
    return time.perf_counter() - t0, out


def answer_words_kept(questions: list[Pool], summaries: list[str]) -> float | None:
    """A reader-free proxy for "the summary kept the evidence": over the evidence turns whose text holds
    words of the gold answer, the share of those words still in the summary (mean per turn)."""
    shares, k = [], 0
    for p in questions:
        gold = set(tokenize(p.answer))
        for c in p.candidates:
            summary, k = summaries[k], k + 1
            in_text = gold & set(tokenize(c.mau.summary))
            if c.mau.id in p.evidence and in_text:
                shares.append(len(in_text & set(tokenize(summary))) / len(in_text))
    return round(sum(shares) / len(shares), 4) if shares else None


def measure(questions: list[Pool], cap: int, repeats: int) -> dict[str, Any]:
    n = sum(len(p.candidates) for p in questions)
    full = [c.mau.summary for p in questions for c in p.candidates]
    full_tokens = sum(count_tokens(t) for t in full)
    report: dict[str, Any] = {"candidates": n, "full_text_tokens_per_candidate": round(full_tokens / n, 2)}
    for mode in ("cut", "extractive"):
        run(mode, cap, questions[:20])  # warm the token counter and regex caches
        times, summaries = [], []
        for _ in range(repeats):
            seconds, summaries = run(mode, cap, questions)
            times.append(seconds)
        tokens = sum(count_tokens(s) for s in summaries)
        report[mode] = {"us_per_candidate": round(statistics.median(times) / n * 1e6, 2),
                        "us_per_candidate_min": round(min(times) / n * 1e6, 2),
                        "tokens_per_candidate": round(tokens / n, 2),
                        "share_shorter_than_full_text": round(sum(s != t for s, t in zip(summaries, full)) / n, 4),
                        "evidence_answer_words_kept": answer_words_kept(questions, summaries)}
    return report


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--split", default="dev")
    p.add_argument("--pool", type=int, default=40)
    p.add_argument("--cap", type=int, default=64, help="pyramid.summary_max_tokens")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(runs_dir() / "bench" / "summary.json"))
    args = p.parse_args(argv)
    questions = pools(args.split, args.pool, args.seed)
    report = {"split": args.split, "questions": len(questions), "pool": args.pool, "cap": args.cap,
              "repeats": args.repeats, "load_avg": os.getloadavg(), "python": platform.python_version(),
              **measure(questions, args.cap, args.repeats)}
    out = Path(args.out)
    write_json(out, report)
    print(json.dumps(report, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
