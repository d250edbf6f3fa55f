"""Reader-independent retrieval metrics from the datasets' evidence annotations.

LoCoMo ``evidence`` and Mem-Gallery ``clue`` name the turns an answer rests on, so
whether retrieval found them needs no LLM: deterministic, cheap, and the right
objective for fast offline loops and CI.

Inputs are turn ids (``DatasetTurn.id``) in the order the retriever ranked them. A
retrieved memory that covers several turns (a compressed restatement) should be
expanded into its source turn ids in order by the runner. Repeated ids count once,
at their first rank (as Mem-Gallery's own retrieval metric does). Questions without
evidence (most LoCoMo adversarial questions, Mem-Gallery refusals) have no defined
recall: the functions return None and aggregates skip them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from benchmarks.metrics.text import mean
from harness.errors import InputError

DEFAULT_KS: tuple[int, ...] = (1, 5, 10, 20)


def _unique(ids: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(str(i) for i in ids))


def _check_k(k: int) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise InputError(f"k must be a positive integer, got {k!r}")


def evidence_recall_at_k(retrieved: Sequence[str], evidence: Sequence[str], k: int) -> float | None:
    """Fraction of the evidence ids found among the first ``k`` retrieved ids; None without evidence."""
    _check_k(k)
    gold = set(_unique(evidence))
    if not gold:
        return None
    top = set(_unique(retrieved)[:k])
    return len(gold & top) / len(gold)


def evidence_hit_at_k(retrieved: Sequence[str], evidence: Sequence[str], k: int) -> float | None:
    """1.0 if any evidence id is among the first ``k`` retrieved ids; None without evidence."""
    _check_k(k)
    gold = set(_unique(evidence))
    if not gold:
        return None
    return 1.0 if gold & set(_unique(retrieved)[:k]) else 0.0


def evidence_precision(retrieved: Sequence[str], evidence: Sequence[str]) -> float | None:
    """Fraction of the retrieved ids (all of them, as handed to the reader) that are evidence.

    None without evidence; 0.0 when nothing was retrieved but evidence exists.
    """
    gold = set(_unique(evidence))
    if not gold:
        return None
    ranked = _unique(retrieved)
    if not ranked:
        return 0.0
    return sum(1 for r in ranked if r in gold) / len(ranked)


def mrr(retrieved: Sequence[str], evidence: Sequence[str]) -> float | None:
    """Reciprocal rank of the first evidence id (0.0 if none retrieved); None without evidence."""
    gold = set(_unique(evidence))
    if not gold:
        return None
    for rank, r in enumerate(_unique(retrieved), start=1):
        if r in gold:
            return 1.0 / rank
    return 0.0


def budgeted_key(metric: str, budget: int) -> str:
    """``context_recall@1000``: the metric's name with the context budget it was counted at, so two figures
    measured under different budgets never sit under one name (MLflow logs it as ``context_recall_1000``)."""
    return f"{metric}@{budget}"


def one_budget(budgets: Iterable[int | None]) -> int | None:
    """The single context budget a set of scored rows was cut at (None: no cut).

    Rows cut at different budgets count different evidence, so a mean over them measures nothing: refused."""
    found = set(budgets)
    if len(found) > 1:
        raise InputError(f"scored rows were cut at different context budgets: {sorted(found, key=str)}")
    return next(iter(found), None)


@dataclass(frozen=True, slots=True)
class RetrievalRecord:
    """What one question's retrieval produced, as the runner measured it."""

    question_id: str
    category: str
    retrieved: tuple[str, ...]  # turn ids in ranked order
    evidence: tuple[str, ...]  # gold turn ids
    context_tokens: int = 0  # tokens of the context handed to the reader (counted by the runner)


def aggregate_retrieval(
    records: Iterable[RetrievalRecord], ks: Sequence[int] = DEFAULT_KS, *, by_category: bool = True
) -> dict[str, float | int]:
    """Means over questions.

    Keys (valid MLflow metric names): ``recall_at_<k>`` and ``hit_at_<k>`` for every k, ``precision``, ``mrr`` (over the
    ``n_with_evidence`` questions that have evidence), ``context_tokens`` (mean over
    all ``n`` questions); with ``by_category`` the same keys suffixed ``/<category>``
    (e.g. ``recall_at_10/2``). Keys are present only when defined (never NaN).
    """
    for k in ks:
        _check_k(k)
    rows = list(records)
    for r in rows:
        if not isinstance(r.context_tokens, int) or isinstance(r.context_tokens, bool) or r.context_tokens < 0:
            raise InputError(f"context_tokens for question {r.question_id} must be a non-negative int")
    out = _summarize(rows, ks, "")
    if by_category:
        for cat in sorted({r.category for r in rows}):
            out.update(_summarize([r for r in rows if r.category == cat], ks, f"/{cat}"))
    return out


def _summarize(rows: list[RetrievalRecord], ks: Sequence[int], suffix: str) -> dict[str, float | int]:
    with_evidence = [r for r in rows if r.evidence]
    out: dict[str, float | int] = {f"n{suffix}": len(rows), f"n_with_evidence{suffix}": len(with_evidence)}
    if rows:
        out[f"context_tokens{suffix}"] = mean([r.context_tokens for r in rows])
    if not with_evidence:
        return out
    # every row here has evidence, so the per-question functions never return None
    for k in ks:
        out[f"recall_at_{k}{suffix}"] = mean([evidence_recall_at_k(r.retrieved, r.evidence, k) or 0.0
                                              for r in with_evidence])
        out[f"hit_at_{k}{suffix}"] = mean([evidence_hit_at_k(r.retrieved, r.evidence, k) or 0.0 for r in with_evidence])
    out[f"precision{suffix}"] = mean([evidence_precision(r.retrieved, r.evidence) or 0.0 for r in with_evidence])
    out[f"mrr{suffix}"] = mean([mrr(r.retrieved, r.evidence) or 0.0 for r in with_evidence])
    return out
