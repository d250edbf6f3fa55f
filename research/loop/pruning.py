"""Stop a clearly worse candidate on a nested batch of questions, with Optuna's ``WilcoxonPruner``.

Why: with the embedded reader a question costs seconds, and most candidates lose. A candidate is answered
on nested batches (named samples, smallest first: ``research.loop.prune_samples``); after each batch its
per-question scores are reported to Optuna as intermediate values, one step per question, against the
best's scores on the same questions, and Optuna's ``WilcoxonPruner`` (a Wilcoxon signed-rank test,
made for paired per-instance scores) says whether to stop. A stopped candidate is decided on that
evidence; any other goes on to the next batch, and the reader finds the batches already answered in its
reply cache. ``research/perf/bench_pruning.py`` measured this rule against the paired-CI probe it
replaced, on the same candidates (docs/results.md, "Multi-fidelity").

Pure: a verdict from two mappings of question id -> score.
"""

from __future__ import annotations

import warnings
from statistics import mean
from typing import Any, Mapping


def wilcoxon_stops(candidate: Mapping[str, float], best: Mapping[str, float], *, p_threshold: float,
                   n_startup_steps: int) -> bool:
    """Optuna's ``WilcoxonPruner`` on one candidate: the best as a finished trial whose intermediate value at
    step i is its score on question i, the candidate as a running trial reporting its questions so far."""
    import optuna

    steps = {q: i for i, q in enumerate(sorted(best))}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # added in Optuna 3.6, still marked
        pruner = optuna.pruners.WilcoxonPruner(p_threshold=p_threshold, n_startup_steps=n_startup_steps)
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "study created" line per candidate
    try:
        study = optuna.create_study(direction="maximize", pruner=pruner)
        study.add_trial(optuna.trial.create_trial(
            value=mean(best.values()), intermediate_values={steps[q]: float(v) for q, v in best.items()}))
        trial = study.ask()
    finally:
        optuna.logging.set_verbosity(level)
    for q, v in candidate.items():
        if q in steps:
            trial.report(float(v), steps[q])
    return bool(trial.should_prune())


def prune_verdict(candidate: Mapping[str, float], best: Mapping[str, float], *, sample: str, of: int,
                  p_threshold: float, n_startup_steps: int) -> dict[str, Any]:
    """What the journal keeps of one look: the batch, how many questions were paired, the mean difference,
    and whether the pruner stopped the candidate there."""
    shared = sorted(set(candidate) & set(best))
    delta = mean(candidate[q] - best[q] for q in shared) if shared else 0.0
    stopped = bool(shared) and wilcoxon_stops({q: candidate[q] for q in shared}, best,
                                              p_threshold=p_threshold, n_startup_steps=n_startup_steps)
    return {"sample": sample, "questions": len(shared), "of": of, "delta": delta, "rule": "wilcoxon",
            "p_threshold": p_threshold, "stopped": stopped}
