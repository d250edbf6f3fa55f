"""Pure scoring functions: answers (per benchmark) and retrieval (from evidence ids)."""

from benchmarks.metrics.locomo import aggregate_locomo, score_locomo, score_locomo_answer
from benchmarks.metrics.memgallery import aggregate_memgallery, score_memgallery, score_memgallery_question
from benchmarks.metrics.retrieval import (
    RetrievalRecord,
    aggregate_retrieval,
    evidence_hit_at_k,
    evidence_precision,
    evidence_recall_at_k,
    mrr,
)
from benchmarks.metrics.text import PredictionTypeError

__all__ = [
    "PredictionTypeError",
    "RetrievalRecord",
    "aggregate_locomo",
    "aggregate_memgallery",
    "aggregate_retrieval",
    "evidence_hit_at_k",
    "evidence_precision",
    "evidence_recall_at_k",
    "mrr",
    "score_locomo",
    "score_locomo_answer",
    "score_memgallery",
    "score_memgallery_question",
]
