"""Retrieval metrics from evidence ids, hand-computed."""

from __future__ import annotations

import pytest

from benchmarks.metrics.retrieval import (
    RetrievalRecord,
    aggregate_retrieval,
    evidence_hit_at_k,
    evidence_precision,
    evidence_recall_at_k,
    mrr,
)
from harness.errors import InputError

RANKED = ["D1:2", "D3:4", "D1:2", "D2:1", "D5:5"]  # D1:2 repeated: counts once, at rank 1
EVIDENCE = ["D2:1", "D3:4"]


def test_recall_at_k():
    assert evidence_recall_at_k(RANKED, EVIDENCE, 1) == 0.0
    assert evidence_recall_at_k(RANKED, EVIDENCE, 2) == 0.5
    assert evidence_recall_at_k(RANKED, EVIDENCE, 3) == 1.0  # unique ranks: D1:2, D3:4, D2:1
    assert evidence_recall_at_k(RANKED, EVIDENCE, 100) == 1.0
    assert evidence_recall_at_k([], EVIDENCE, 5) == 0.0
    assert evidence_recall_at_k(RANKED, [], 5) is None
    assert evidence_recall_at_k(RANKED, ["D3:4", "D3:4"], 2) == 1.0


def test_hit_precision_mrr():
    assert evidence_hit_at_k(RANKED, EVIDENCE, 1) == 0.0
    assert evidence_hit_at_k(RANKED, EVIDENCE, 2) == 1.0
    assert evidence_precision(RANKED, EVIDENCE) == pytest.approx(2 / 4)  # 4 unique retrieved, 2 are evidence
    assert evidence_precision([], EVIDENCE) == 0.0
    assert evidence_precision(RANKED, []) is None
    assert mrr(RANKED, EVIDENCE) == 0.5
    assert mrr(["x", "y", "D2:1"], EVIDENCE) == pytest.approx(1 / 3)
    assert mrr(["x"], EVIDENCE) == 0.0
    assert mrr(RANKED, []) is None


def test_bad_k():
    for k in (0, -1, 1.5, True):
        with pytest.raises(InputError):
            evidence_recall_at_k(RANKED, EVIDENCE, k)


def test_aggregate():
    records = [
        RetrievalRecord("a", "1", tuple(RANKED), tuple(EVIDENCE), context_tokens=100),
        RetrievalRecord("b", "1", ("D2:1",), ("D2:1",), context_tokens=50),
        RetrievalRecord("c", "5", ("D9:9",), (), context_tokens=30),  # no evidence: skipped by recall
    ]
    out = aggregate_retrieval(records, ks=(1, 2))
    assert out["n"] == 3 and out["n_with_evidence"] == 2
    assert out["recall_at_1"] == pytest.approx((0 + 1) / 2)
    assert out["recall_at_2"] == pytest.approx((0.5 + 1) / 2)
    assert out["hit_at_2"] == 1.0
    assert out["precision"] == pytest.approx((0.5 + 1) / 2)
    assert out["mrr"] == pytest.approx((0.5 + 1) / 2)
    assert out["context_tokens"] == pytest.approx(60)
    assert out["recall_at_2/1"] == out["recall_at_2"]
    assert out["n/5"] == 1 and out["n_with_evidence/5"] == 0 and "recall_at_1/5" not in out
    assert out["context_tokens/5"] == 30
    assert "recall_at_1/1" not in aggregate_retrieval(records, ks=(1,), by_category=False)
    assert aggregate_retrieval([]) == {"n": 0, "n_with_evidence": 0}


def test_context_tokens_must_be_counted():
    with pytest.raises(InputError, match="context_tokens for question a"):
        aggregate_retrieval([RetrievalRecord("a", "1", (), ("x",), context_tokens=-1)])
