"""Can a reader-free signal tell Mem-Gallery's unanswerable questions (AR) from the rest? (issue #14)

Why: AR ("answer refusal", 184 of Mem-Gallery's 1,711 questions, every gold "Not mentioned.") scores
only when the system declines, and the embedded reader never does. LoCoMo's category 5 was bought
with who-said-it signals (memsys/retrieve/support.py, the attribution check), but Mem-Gallery's
questions are about one user and the assistant: an AR question asks whether the user mentioned
something they did not ("Did Julian mention any AI companies used in mental health care?"). So the
candidates here are about coverage, not attribution:

- ``top1``: the best dense similarity among the preset's retrieval candidates (what a retrieval
  abstention would read: low when nothing in memory is about the question);
- ``top5``: the mean of the five best, steadier than one turn;
- ``coverage``: the share of the question's content words (the sparse index's tokenizer, stemmed)
  found anywhere in its conversation as ingested (turns, replies, captions).

For each signal: its AUC (the chance that a random answerable question scores higher than a random
AR one; 0.5 is no separation), and, abstaining below thresholds at AR's own quantiles, the share of
AR and of the other questions that would abstain. ``f1_change`` estimates Mem-Gallery's F1 over all
questions if an abstention scored ``f1(ABSTAIN_TEXT, "Not mentioned.")`` on AR and cost the reader's
mean F1 (``--reader-f1``, default 0.410: ``omni`` with image ids on dev ``small``, docs/results.md)
on any other question, and an AR question answered scored 0 (it does with this reader). An estimate;
the reader decides.

Stores are built as an evaluation builds them (benchmarks/perf/stores.py), on ``--split`` (default
``all``: the question is whether the signal exists; calibrating a threshold would be on dev).

Usage: ``python -m benchmarks.perf.bench_refusal [--split all] [--preset omni] [--out runs/bench/refusal.json]``
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from tqdm import tqdm

from benchmarks.metrics.memgallery import memgallery_f1
from benchmarks.metrics.text import stem_tokens
from benchmarks.perf.stores import memsys_turns, split_memories
from harness.bench_output import write_json
from harness.paths import runs_dir
from memsys.index.sparse import tokenize

SIGNALS = ("top1", "top5", "coverage")
REFUSAL = "AR"
QUANTILES = (0.1, 0.25, 0.5, 0.75)


@dataclass(frozen=True)
class Signals:
    question_id: str
    category: str
    top1: float
    top5: float
    coverage: float


def _content_words(text: str) -> set[str]:
    """The sparse index's tokens of ``text`` (stop words out), stemmed as the scorer stems them."""
    return set(stem_tokens(tokenize(text)))


def coverage(question: str, vocabulary: set[str]) -> float:
    """Share of the question's content words that occur in ``vocabulary``; 1.0 for a question without
    content words (nothing is missing). Pure."""
    words = _content_words(question)
    return 1.0 if not words else len(words & vocabulary) / len(words)


def conversation_vocabulary(texts: Sequence[str]) -> set[str]:
    return set().union(*(_content_words(t) for t in texts))


def measure(split: str, preset: str, overrides: Sequence[str] = ()) -> list[Signals]:
    out: list[Signals] = []
    stores = split_memories(split, preset, [*overrides, "memory.answer.abstain=off"], benchmark="memgallery")
    for conv, mem in tqdm(stores, desc=f"memgallery {split} stores", unit="conv", file=sys.stderr):
        vocab = conversation_vocabulary([f"{t.text} {t.image_caption or ''}" for t in memsys_turns(conv)])
        for q in conv.questions:
            sims = sorted((c.similarity for c in mem.retrieve(q.question).candidates), reverse=True) or [0.0]
            out.append(Signals(q.id, q.category, float(sims[0]), float(np.mean(sims[:5])),
                               coverage(q.question, vocab)))
    return out


def auc(positive: Sequence[float], negative: Sequence[float]) -> float:
    """P(a positive scores above a negative), ties half: the Mann-Whitney U over both sizes. Pure."""
    from scipy.stats import mannwhitneyu

    if not positive or not negative:
        raise ValueError("auc needs questions on both sides")
    return float(mannwhitneyu(positive, negative).statistic) / (len(positive) * len(negative))


def separation(rows: Sequence[Signals], signal: str, *, reader_f1: float, abstain_f1: float) -> dict[str, Any]:
    """How well abstaining below a threshold of ``signal`` picks out AR. Pure."""
    ar = [getattr(r, signal) for r in rows if r.category == REFUSAL]
    other = [getattr(r, signal) for r in rows if r.category != REFUSAL]
    n = len(ar) + len(other)
    table = []
    for qt in QUANTILES:
        th = float(np.quantile(ar, qt))
        a, o = sum(v < th for v in ar), sum(v < th for v in other)
        table.append({"threshold": round(th, 4), "ar_abstain": a / len(ar), "other_abstain": o / len(other),
                      "f1_change": (a * abstain_f1 - o * reader_f1) / n})
    return {"signal": signal, "auc": auc(other, ar), "ar_mean": float(np.mean(ar)),
            "other_mean": float(np.mean(other)), "thresholds": table}


def report(rows: Sequence[Signals], *, reader_f1: float) -> dict[str, Any]:
    from memsys.answer.generate import ABSTAIN_TEXT

    abstain_f1 = memgallery_f1(ABSTAIN_TEXT, "Not mentioned.")
    return {"questions": len(rows), "ar": sum(r.category == REFUSAL for r in rows), "reader_f1": reader_f1,
            "abstain_f1": abstain_f1,
            "signals": [separation(rows, s, reader_f1=reader_f1, abstain_f1=abstain_f1) for s in SIGNALS]}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", default="all", choices=("dev", "test", "all"))
    ap.add_argument("--preset", default="omni")
    ap.add_argument("--override", action="append", default=[], help="a memory.* override, repeatable")
    ap.add_argument("--reader-f1", type=float, default=0.410)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    rows = measure(a.split, a.preset, a.override)
    out = {"bench": "refusal", "benchmark": "memgallery", "split": a.split, "preset": a.preset,
           "overrides": a.override, **report(rows, reader_f1=a.reader_f1),
           "rows": [asdict(r) for r in rows]}
    path = a.out or runs_dir() / "bench" / "refusal.json"
    write_json(path, out)
    for s in out["signals"]:
        cells = ", ".join(f"<{t['threshold']}: AR {t['ar_abstain']:.2f} other {t['other_abstain']:.2f} "
                          f"F1 {t['f1_change']:+.3f}" for t in s["thresholds"])
        print(f"{s['signal']:>8}  AUC {s['auc']:.3f}  AR {s['ar_mean']:.3f} other {s['other_mean']:.3f}  {cells}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
