"""Does the reader-free objective rank configs as the reader's answers do? (issue #50, proxy validity)

Why: the quickstart climbs context recall inside the first B context tokens, an objective that needs no
reader. That is only worth climbing if a config it prefers also gets better answers. This bench answers
the same questions with every config through the real evaluation path (``memsys eval``, via
``research.perf.bench_reader``: resumable run folders, the content-hashed reply cache) and compares, over
the configs, each config's mean reader-free objective with its mean reader F1 on categories 1-4, on the
questions every config answered:

- Spearman's rho and Kendall's tau of the two rankings (``scipy.stats``);
- their 95% bootstrap CIs, resampling questions (``scipy.stats.bootstrap``): the configs are fixed, the
  questions are the sample a new question set would change;
- whether rho reaches the bar the issue sets (0.8).

Both numbers come from the same scored rows: a reader run's rows carry the context the reader was given,
and the scorer cuts it at ``context_budget_tokens`` for context recall as it does in the loop.

Usage::

    python -m research.perf.bench_proxy [--sample tiny] [--budget 1000] [--variants "<bench_reader syntax>"]
        [--out runs/bench/proxy.json]
    python -m research.perf.bench_proxy --runs "naive=<run-id>,omni=<run-id>,..."  (finished reader runs)

The run report (``memsys report``) quotes the latest ``runs/bench/proxy.json`` next to a run whose objective
is the proxy at the same budget.
"""

from __future__ import annotations

import argparse
import platform
import sys
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats

from harness.bench_output import command, utc_now, write_result
from harness.paths import REPO_ROOT, runs_dir

#: from a crippled dense top-2 to omni and its neighbours, the span a quickstart search moves through; kept to
#: contexts the embedded reader answers in 5-50 s a question on 2 cores (about 45 minutes for all 12)
DEFAULT_VARIANTS = ",".join([
    "naive@k2=naive:memory.retrieval.top_k=2;memory.retrieval.dense_k=2",
    "naive",
    "naive@k10=naive:memory.retrieval.top_k=10;memory.retrieval.dense_k=10",
    "naive_rag@k3=naive_rag:memory.retrieval.top_k=3;memory.retrieval.dense_k=3",
    "naive_rag",
    "bm25_only@k3=bm25_only:memory.retrieval.top_k=3;memory.retrieval.sparse_k=3",
    "bm25_only@k5=bm25_only:memory.retrieval.top_k=5;memory.retrieval.sparse_k=5",
    "bm25_only",
    "omni@k5=omni:memory.retrieval.top_k=5",
    "omni@500=omni:memory.pyramid.budget_tokens=500",
    "omni@1000=omni:memory.pyramid.budget_tokens=1000",
    "omni",
])
PROXY = "context_recall"
TARGET = "f1_cat1_4"
BAR = 0.8


def score_matrix(rows: Mapping[str, Sequence[Mapping[str, Any]]], objective: str,
                 questions: Sequence[str]) -> np.ndarray:
    """configs x questions: each config's per-question contribution to ``objective``."""
    from research.evaluation.stats import per_question

    table = {name: per_question(objective, r) for name, r in rows.items()}
    return np.array([[table[name][q] for q in questions] for name in rows], dtype=float)


def shared_questions(rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """Questions that count towards both objectives in every config, in a fixed order."""
    from research.evaluation.stats import per_question

    sets = [set(per_question(PROXY, r)) & set(per_question(TARGET, r)) for r in rows.values()]
    return sorted(set.intersection(*sets)) if sets else []


def _rank_stats(proxy: np.ndarray, target: np.ndarray) -> tuple[float, float]:
    x, y = proxy.mean(axis=1), target.mean(axis=1)
    with warnings.catch_warnings():  # no spread on one side: NaN, counted by rank_agreement
        warnings.simplefilter("ignore", stats.ConstantInputWarning)
        return float(stats.spearmanr(x, y).statistic), float(stats.kendalltau(x, y).statistic)


def rank_agreement(proxy: np.ndarray, target: np.ndarray, *, n_resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Spearman and Kendall between the configs' mean proxy and mean target, with bootstrap CIs over questions.
    Pure; a resample where one side has no spread has no rank correlation and is left out (counted)."""
    rho, tau = _rank_stats(proxy, target)

    def statistic(idx: np.ndarray, axis: int = -1) -> np.ndarray:
        cols = idx.astype(int)
        return np.array(_rank_stats(proxy[:, cols], target[:, cols]))

    # scipy draws the resamples; its own interval cannot skip the undefined ones, so the percentiles are taken here
    with warnings.catch_warnings():  # its interval over undefined resamples warns; it is not used
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        res = stats.bootstrap((np.arange(proxy.shape[1]),), statistic, vectorized=False, paired=False,
                              n_resamples=n_resamples, confidence_level=0.95, method="percentile",
                              random_state=np.random.default_rng(seed))
    dist = np.asarray(res.bootstrap_distribution)
    finite = np.isfinite(dist).all(axis=0)
    lo, hi = (np.percentile(dist[:, finite], [2.5, 97.5], axis=1) if finite.any()
              else (np.full(2, np.nan), np.full(2, np.nan)))
    return {"spearman": round(rho, 4), "spearman_ci": [round(float(lo[0]), 4), round(float(hi[0]), 4)],
            "kendall": round(tau, 4), "kendall_ci": [round(float(lo[1]), 4), round(float(hi[1]), 4)],
            "resamples": n_resamples, "undefined_resamples": int((~finite).sum()),
            "meets_bar": bool(rho >= BAR), "bar": BAR}


def render(result: Mapping[str, Any]) -> str:
    lines = [f"proxy validity: {PROXY}@{result['budget']} vs reader {TARGET} on {result['questions']} shared "
             f"questions ({result['sample']}), {len(result['configs'])} configs",
             f"{'config':<16} {'proxy':>7} {'F1 1-4':>7} {'ctx tok':>8} {'prompt':>7}"]
    for name, c in result["configs"].items():
        lines.append(f"{name:<16} {c['proxy']:>7.3f} {c['f1']:>7.3f} {c['context_tokens']:>8.0f} {c['prompt_tokens']:>7.0f}")
    a = result["agreement"]
    verdict = "meets" if a["meets_bar"] else "does NOT meet"
    lines.append(f"Spearman rho {a['spearman']:+.3f} [{a['spearman_ci'][0]:+.3f}, {a['spearman_ci'][1]:+.3f}], "
                 f"Kendall tau {a['kendall']:+.3f} [{a['kendall_ci'][0]:+.3f}, {a['kendall_ci'][1]:+.3f}] "
                 f"(95% bootstrap over questions): {verdict} the bar rho >= {a['bar']}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from research.evaluation.caches import code_namespace
    from research.evaluation.diagnosis import read_rows, row_mean
    from research.perf.bench_reader import evaluate, finished_runs, parse_variants

    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", default="locomo")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--sample", default="tiny")
    ap.add_argument("--budget", type=int, default=1000, help="the scorer's context budget B of the proxy")
    ap.add_argument("--variants", default=None, help="bench_reader's variant syntax; default: 12 configs")
    ap.add_argument("--runs", default="", help="name=run-id,...: finished reader runs instead of --variants")
    ap.add_argument("--llm", default="local")
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    out = args.out or runs_dir() / "bench" / "proxy.json"
    log_dir = out.parent / "reader-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    common = [f"benchmark={args.benchmark}", f"split={args.split}", f"sample={args.sample}", f"llm={args.llm}",
              "reader=llm", f"context_budget_tokens={args.budget}"]
    dirs: dict[str, Path] = {}
    if args.runs:
        dirs = {name: run_dir for name, (run_dir, _) in finished_runs(args.runs, args.benchmark, args.split).items()}
    else:
        code = code_namespace(REPO_ROOT)
        for v in parse_variants(args.variants or DEFAULT_VARIANTS):
            dirs[v.name] = evaluate(v, common, log_dir, code)
    if len(dirs) < 3:
        raise SystemExit(f"a rank correlation needs at least 3 configs, got {len(dirs)}")
    rows = {name: read_rows(d) for name, d in dirs.items()}
    budgets = {r.get("context_budget_tokens") for rs in rows.values() for r in rs}
    if budgets != {args.budget}:
        raise SystemExit(f"the runs were scored at context budgets {sorted(map(str, budgets))}, not {args.budget}")
    questions = shared_questions(rows)
    if len(questions) < 2:
        raise SystemExit("the runs share fewer than 2 scored questions")
    proxy, target = score_matrix(rows, PROXY, questions), score_matrix(rows, TARGET, questions)
    configs = {name: {"run_id": dirs[name].name, "proxy": round(float(proxy[i].mean()), 4),
                      "f1": round(float(target[i].mean()), 4),
                      "context_tokens": round(row_mean(rows[name], "context_tokens") or 0.0, 1),
                      "prompt_tokens": round(row_mean(rows[name], "prompt_tokens") or 0.0, 1)}
               for i, name in enumerate(rows)}
    result = {"command": command("research.perf.bench_proxy", argv),
              "when": utc_now(), "machine": platform.platform(),
              "benchmark": args.benchmark, "split": args.split, "sample": args.sample, "budget": args.budget,
              "proxy": PROXY, "target": TARGET, "questions": len(questions), "configs": configs,
              "agreement": rank_agreement(proxy, target, n_resamples=args.resamples)}
    write_result(out, result, render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
