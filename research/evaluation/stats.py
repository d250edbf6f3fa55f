"""Is a candidate better than its parent on the questions both answered? Pure functions.

An objective is a mean over questions, so the uncertainty of a comparison is which
questions were drawn: on a 12-question slice one flipped answer moves the score by
several percent while a temperature-0 reader repeats itself exactly. The test is
therefore paired by question:

- ``per_question`` turns the trusted scorer's rows (``predictions.jsonl`` of an
  evaluation folder, written by ``benchmarks.scoring.score_row``) into each question's
  contribution to the objective, such that their mean is the aggregate that
  ``benchmarks.runner.aggregate`` reports;
- ``paired_test`` compares two such maps on their common questions: a bootstrap
  confidence interval of the mean difference and a sign-flip permutation test (under
  "no effect" each question's difference is as likely to have the other sign).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from benchmarks.metrics.locomo import ADVERSARIAL, ANSWERABLE
from benchmarks.metrics.locomo import CATEGORIES as LOCOMO_CATEGORIES
from benchmarks.metrics.memgallery import CATEGORIES as MEMGALLERY_CATEGORIES
from benchmarks.metrics.memgallery import METRICS as MEMGALLERY_METRICS
from benchmarks.metrics.retrieval import evidence_hit_at_k, evidence_precision, evidence_recall_at_k, mrr
from harness.errors import ConfigError, InputError

Row = Mapping[str, Any]
#: a question's contribution to the objective, or None when the question does not count towards it
Contribution = Callable[[Row], "float | None"]


class StatsInputError(InputError, ValueError):
    """Rows or score maps the comparison cannot use (missing scores, no common questions)."""


#: exact enumeration of the 2^k sign patterns up to this many non-zero differences (2^20 sums, 8 MB)
EXACT_MAX_NONZERO = 20
_CHUNK = 1000  # resamples per vectorized batch (bounds memory on large slices)


# --- each question's contribution ------------------------------------------------
def _score(name: str) -> Contribution:
    def get(row: Row) -> float:
        scores = row.get("scores")
        if not isinstance(scores, Mapping) or name not in scores:
            raise StatsInputError(f"row {row.get('question_id')!r} has no reader score {name!r} (evaluated with reader=none?)")
        return float(scores[name])
    return get


def _in_categories(categories: Sequence[str], inner: Contribution) -> Contribution:
    wanted = set(categories)
    return lambda row: inner(row) if str(row["category"]).strip() in wanted else None


def _judge(row: Row) -> float | None:
    """The LLM judge's score of a question (``judge``, the mean verdict over its runs, written by
    benchmarks.judge.run); None for a category the judge does not grade (LoCoMo 5), so the mean is J."""
    if "judge" not in row:
        raise StatsInputError(f"row {row.get('question_id')!r} has no judge score (evaluated without judge=...?)")
    value = row["judge"]
    return None if value is None else float(value)


def _paper_protocol(row: Row) -> float:
    """LoCoMo ``all_paper_protocol``: category 5 counts 1.0 whatever the answer."""
    return 1.0 if str(row["category"]).strip() == ADVERSARIAL else _score("f1")(row)


def _context_recall(row: Row) -> float | None:
    """Evidence the reader sees, as ``aggregate`` counts it: the context cut at the scorer's budget."""
    evidence = set(row["evidence"])
    if not evidence:
        return None
    context = set(row.get("context_ids", row["retrieved_ids"]))
    return len(evidence & context) / len(evidence)


def _retrieval(fn: Callable[[Sequence[str], Sequence[str]], float | None]) -> Contribution:
    """A metric of ``aggregate_retrieval``: counted over questions with evidence, None read as 0."""
    return lambda row: (fn(row["retrieved_ids"], row["evidence"]) or 0.0) if row["evidence"] else None


_RETRIEVAL = re.compile(r"^(recall|hit)_at_(\d+)$")


def _retrieval_contribution(name: str) -> Contribution | None:
    if name == "precision":
        return _retrieval(evidence_precision)
    if name == "mrr":
        return _retrieval(mrr)
    m = _RETRIEVAL.match(name)
    if not m or int(m.group(2)) < 1:
        return None
    k = int(m.group(2))
    metric = evidence_recall_at_k if m.group(1) == "recall" else evidence_hit_at_k
    return _retrieval(lambda retrieved, evidence: metric(retrieved, evidence, k))


def contribution(objective: str) -> Contribution:
    """The function giving one row's contribution to ``objective``; ConfigError when it is not a mean over questions."""
    name, per_category, category = objective.partition("/")
    if per_category:  # per-category retrieval keys of aggregate_retrieval, e.g. recall_at_10/2
        inner = _retrieval_contribution(name)
        if inner is not None and category:
            return _in_categories([category], inner)
    else:
        fixed: dict[str, Contribution] = {
            "all_honest": _score("f1"),  # every question, category 5 on its actual answer
            "all_honest_lenient": _score("f1_lenient"),  # f1_lenient equals f1 outside category 5
            "all_paper_protocol": _paper_protocol,
            "f1": _score("f1"),  # Mem-Gallery's overall f1 (on LoCoMo the same mean as all_honest)
            "f1_cat1_4": _in_categories(ANSWERABLE, _score("f1")),
            "f1_cat5_lenient": _in_categories([ADVERSARIAL], _score("f1_lenient")),
            "context_recall": _context_recall,
            "judge_accuracy": _judge,  # J: the metric "j" of benchmarks.judge.run
            **{f"j_cat{c}": _in_categories([c], _judge) for c in (*LOCOMO_CATEGORIES, *MEMGALLERY_CATEGORIES)},
            **{f"f1_cat{c}": _in_categories([c], _score("f1")) for c in LOCOMO_CATEGORIES},
            **{m: _score(m) for m in MEMGALLERY_METRICS if m != "f1"},
            **{f"{m}_{c}": _in_categories([c], _score(m)) for m in MEMGALLERY_METRICS for c in MEMGALLERY_CATEGORIES},
        }
        found = fixed.get(name) or _retrieval_contribution(name)
        if found is not None:
            return found
    raise ConfigError(f"objective {objective!r} has no per-question form (per-question means: all_honest, f1*, em*, "
                      "bleu*, context_recall, judge_accuracy, j_cat<c>, recall_at_<k>, hit_at_<k>, precision, mrr); "
                      "only the relative bar can judge it")


def per_question(objective: str, rows: Sequence[Row]) -> dict[str, float]:
    """question id -> that question's contribution to ``objective``, for the questions that count towards it.

    For every supported objective the mean of the values is the aggregate
    ``benchmarks.runner.aggregate`` reports. ConfigError for an objective that is not such a
    mean (sums, costs, latencies); InputError for rows that lack what it needs.
    """
    fn = contribution(objective)
    out: dict[str, float] = {}
    for row in rows:
        qid = str(row["question_id"])
        if qid in out:
            raise StatsInputError(f"question {qid!r} appears twice in the scored rows")
        value = fn(row)
        if value is not None:
            out[qid] = float(value)
    return out


# --- the paired test ----------------------------------------------------------------
@dataclass(frozen=True)
class PairedTest:
    """Candidate minus parent on their common questions."""

    n: int  # common questions
    mean_delta: float  # mean of candidate - parent
    ci_low: float  # bootstrap confidence interval of mean_delta
    ci_high: float
    p_better: float  # one-sided sign-flip p-value of "candidate is better" (small: it is)
    p_worse: float  # one-sided p-value of "candidate is worse"
    confidence: float
    method: str
    seed: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def paired_test(candidate: Mapping[str, float], parent: Mapping[str, float], *, confidence: float = 0.95,
                n_resamples: int = 10000, seed: int = 0) -> PairedTest:
    """Paired bootstrap CI of the mean difference and sign-flip permutation p-values, seeded.

    The p-values enumerate all 2^k sign patterns of the k non-zero differences when
    k <= ``EXACT_MAX_NONZERO`` and use ``n_resamples`` seeded random patterns otherwise.
    """
    if not 0.0 < confidence < 1.0:
        raise StatsInputError(f"confidence must be in (0, 1), got {confidence}")
    if n_resamples < 1:
        raise StatsInputError(f"n_resamples must be >= 1, got {n_resamples}")
    common = sorted(set(candidate) & set(parent))
    if not common:
        raise StatsInputError(f"no common questions to compare ({len(candidate)} candidate, {len(parent)} parent): "
                         "were the two evaluated on different slices?")
    diffs = np.array([float(candidate[q]) - float(parent[q]) for q in common])
    n, mean_delta = len(common), float(diffs.mean())
    nonzero = diffs[diffs != 0.0]
    if nonzero.size == 0:
        return PairedTest(n, 0.0, 0.0, 0.0, 1.0, 1.0, confidence, "all differences zero", seed)
    rng = np.random.default_rng(seed)
    ci_low, ci_high = _bootstrap_ci(diffs, confidence, n_resamples, rng)
    p_better, p_worse, how = _sign_flip(nonzero, n_resamples, rng)
    method = f"paired bootstrap percentile CI ({n_resamples} resamples); sign-flip test, {how}"
    return PairedTest(n, mean_delta, ci_low, ci_high, p_better, p_worse, confidence, method, seed)


def _bootstrap_ci(diffs: np.ndarray, confidence: float, n_resamples: int, rng: np.random.Generator) -> tuple[float, float]:
    n = diffs.size
    means = np.concatenate([diffs[rng.integers(0, n, size=(min(_CHUNK, n_resamples - start), n))].mean(axis=1)
                            for start in range(0, n_resamples, _CHUNK)])
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)


def _sign_flip(nonzero: np.ndarray, n_resamples: int, rng: np.random.Generator) -> tuple[float, float, str]:
    """One-sided p-values of the observed sum among sums with random signs (zeros cannot flip)."""
    observed = float(nonzero.sum())
    tol = 1e-9 * float(np.abs(nonzero).sum())  # equal sums must compare equal despite float rounding
    k = nonzero.size
    if k <= EXACT_MAX_NONZERO:
        sums = np.zeros(1)
        for d in np.abs(nonzero):
            sums = np.concatenate([sums + d, sums - d])
        return (float(np.mean(sums >= observed - tol)), float(np.mean(sums <= observed + tol)),
                f"exact over 2^{k} sign patterns of {k} non-zero differences")
    above = below = 0
    for start in range(0, n_resamples, _CHUNK):
        signs = rng.choice(np.array([-1.0, 1.0]), size=(min(_CHUNK, n_resamples - start), k))
        sums = signs @ np.abs(nonzero)
        above += int(np.sum(sums >= observed - tol))
        below += int(np.sum(sums <= observed + tol))
    # (1 + count) / (1 + draws): the observed pattern is one of the possible ones, so p is never 0
    return ((1 + above) / (1 + n_resamples), (1 + below) / (1 + n_resamples),
            f"Monte Carlo over {n_resamples} sign patterns of {k} non-zero differences")
