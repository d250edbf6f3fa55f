"""Figures of the benchmark harness (issue: benchmark harness). JSON to runs/bench/eval.json.

  quality   reader-free table: evidence recall@{5,10,20} and context tokens for every
            baseline and preset, LoCoMo (all questions) and Mem-Gallery (caption mode)
  e2e       LoCoMo dev evaluation with the local model: F1 per category, seconds per
            question, throughput with 1, 2 and 4 workers (LLM cache off)
  warm      the same evaluation twice: cold caches, then warm (target: warm < 10% of cold)

    python -m research.perf.bench_eval quality
    python -m research.perf.bench_eval e2e --sample small --workers 1 2 4
    python -m research.perf.bench_eval warm --sample small
    python -m research.perf.bench_eval format --sample small    (Memory.ask, response_format on vs off)
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

SYSTEMS = [("omni", "memsys"), ("naive", "memsys"), ("naive_rag", "memsys"), ("bm25_only", "memsys"),
           ("naive_rag", "recent_window"), ("naive_rag", "full_context")]


EXTRA: list[str] = []  # overrides every evaluation of this invocation gets (e.g. the budget)


def _eval(overrides: list[str], llm=None):
    from benchmarks.config import load_eval_setup
    from research.evaluation.fixed import run_in_process

    setup = load_eval_setup([*overrides, *EXTRA])
    return run_in_process(setup, [*overrides, *EXTRA], llm=llm)


def quality(out: dict) -> None:
    rows = []
    for bench in ("locomo", "memgallery"):
        for preset, system in SYSTEMS:
            t0 = time.perf_counter()
            r = _eval([f"benchmark={bench}", "split=all", f"memory={preset}", f"system={system}", "reader=none",
                       "mlflow=false", "resume=false", f"run_id=bench-quality-{bench}-{system}-{preset}", "workers=2"])
            m = r.metrics
            name = preset if system == "memsys" else m["system"]  # full_context that did not fit: recent_window
            rows.append({"benchmark": bench, "system": name, "asked": system, "n": m.get("n"),
                         "whole_conversations": m.get("whole_conversations"), "depth": round(m.get("context_depth", 0.0), 1),
                         **{f"recall_at_{k}": round(m.get(f"recall_at_{k}", 0.0), 4) for k in (5, 10, 20)},
                         "mrr": round(m.get("mrr", 0.0), 4), "context_recall": round(m.get("context_recall", 0.0), 4), "context_tokens": round(m.get("context_tokens", 0.0), 1),
                         "wall_s": round(time.perf_counter() - t0, 1)})
            print(json.dumps(rows[-1]), flush=True)
    out["quality"] = rows


def e2e(out: dict, sample: str, workers: list[int], preset: str) -> None:
    from memsys.config import LLMConfig, validate
    from memsys.llm.client import open_llm

    res = []
    cfg = validate(LLMConfig, {"backend": "local", "cache": False})
    with open_llm(cfg, cache=None) as llm:
        for w in workers:
            t0 = time.perf_counter()
            r = _eval(["benchmark=locomo", "split=dev", f"sample={sample}", f"memory={preset}", "reader=llm",
                       f"workers={w}", "mlflow=false", "resume=false", "llm.cache=false",
                       f"run_id=bench-e2e-{sample}-{preset}-w{w}"], llm=llm)
            wall = time.perf_counter() - t0
            m = r.metrics
            row = {"workers": w, "questions": r.n_questions, "wall_s": round(wall, 1),
                   "questions_per_s": round(r.n_questions / wall, 3),
                   "seconds_per_question": round(m.get("seconds_per_question", 0.0), 2),
                   "f1_cat1_4": m.get("f1_cat1_4"), "f1_cat5": m.get("f1_cat5"), "all_honest": m.get("all_honest"),
                   "all_paper_protocol": m.get("all_paper_protocol"),
                   **{f"f1_cat{c}": m.get(f"f1_cat{c}") for c in "12345"}, "reader_errors": r.n_errors,
                   "answer_words_mean": m.get("answer_words_mean")}
            res.append(row)
            print(json.dumps(row), flush=True)
    out["e2e"] = {"sample": sample, "preset": preset, "overrides": EXTRA, "rows": res}


def warm(out: dict, sample: str, preset: str) -> None:
    from memsys.config import LLMConfig, validate
    from memsys.llm.client import open_llm

    cache = Path(tempfile.mkdtemp(prefix="memsys-bench-cache-"))
    os.environ["MEMSYS_CACHE_DIR"] = str(cache)  # cold: no embeddings, stores or LLM replies
    cfg = validate(LLMConfig, {"backend": "local"})
    times = []
    with open_llm(cfg) as llm:
        for n in range(2):
            t0 = time.perf_counter()
            _eval(["benchmark=locomo", "split=dev", f"sample={sample}", f"memory={preset}", "reader=llm", "workers=2",
                   "mlflow=false", "resume=false", f"run_id=bench-warm-{sample}-{n}"], llm=llm)
            times.append(time.perf_counter() - t0)
    out["warm"] = {"sample": sample, "preset": preset, "overrides": EXTRA, "cold_s": round(times[0], 1), "warm_s": round(times[1], 1),
                   "warm_over_cold": round(times[1] / times[0], 4),
                   "note": "cold = fresh cache dir (embedding, store, LLM reply caches empty); the local server start is excluded"}
    print(json.dumps(out["warm"]), flush=True)


def response_format(out: dict, sample: str, preset: str) -> None:
    """Memory.ask through the harness on the same questions with JSON output on vs off."""
    from memsys.config import LLMConfig, validate
    from memsys.llm.client import open_llm

    rows = []
    cfg = validate(LLMConfig, {"backend": "local"})
    with open_llm(cfg) as llm:
        for on in (True, False):
            r = _eval(["benchmark=locomo", "split=dev", f"sample={sample}", f"memory={preset}", "reader=llm",
                       f"memory.answer.response_format={'true' if on else 'false'}", "workers=2", "mlflow=false",
                       "resume=false", f"run_id=bench-format-{sample}-{preset}-{'on' if on else 'off'}"], llm=llm)
            m = r.metrics
            rows.append({"response_format": on, "questions": r.n_questions, "f1_cat1_4": m.get("f1_cat1_4"),
                         "f1_cat5": m.get("f1_cat5"), "all_honest": m.get("all_honest"),
                         "answer_words_mean": m.get("answer_words_mean"), "reader_errors": r.n_errors})
            print(json.dumps(rows[-1]), flush=True)
    out["response_format"] = {"sample": sample, "preset": preset, "overrides": EXTRA, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("parts", nargs="+", choices=["quality", "e2e", "warm", "format"])
    ap.add_argument("--sample", default="small")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--preset", default="omni")
    ap.add_argument("--budget", type=int, default=None, help="memory.pyramid.budget_tokens for the LLM parts "
                    "(the 1.5B CPU model reads ~50-70 prompt tokens/s, so B=6000 costs ~1 min per question)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    from harness.paths import runs_dir

    if a.budget:
        EXTRA.append(f"memory.pyramid.budget_tokens={a.budget}")
    path = Path(a.out) if a.out else runs_dir() / "bench" / "eval.json"
    out = json.loads(path.read_text()) if path.exists() else {}
    if "quality" in a.parts:
        quality(out)
    if "e2e" in a.parts:
        e2e(out, a.sample, a.workers, a.preset)
    if "format" in a.parts:
        response_format(out, a.sample, a.preset)
    if "warm" in a.parts:
        warm(out, a.sample, a.preset)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
