"""Merge strategies for dense and BM25 hit lists (memsys.retrieve.merge), hand-computed."""

from __future__ import annotations

import random

import pytest

from memsys.config import RetrievalConfig
from memsys.retrieve.merge import (
    MERGERS,
    merge_bm25_only,
    merge_dense_only,
    merge_linear,
    merge_rrf,
    merge_set_union,
    needs,
)

# dense hits (position, cosine) in similarity order; BM25 hits (position, score) in score order
DENSE = [(3, 0.9), (1, 0.8), (7, 0.5)]
SPARSE = [(5, 12.0), (1, 10.0), (9, 8.0), (3, 4.0)]


def positions(cands):
    return [c.position for c in cands]


# ------------------------------------------------------------------ set union
def test_set_union_keeps_dense_order_then_bm25_only_hits_in_bm25_order():
    out = merge_set_union(DENSE, SPARSE, k=20)
    assert positions(out) == [3, 1, 7, 5, 9]
    by_pos = {c.position: c for c in out}
    assert by_pos[3].sources == {"dense", "sparse"} and by_pos[3].sparse_score == 4.0
    assert by_pos[7].sources == {"dense"} and by_pos[7].sparse_score is None
    assert by_pos[5].sources == {"sparse"} and by_pos[5].dense_score is None
    # fused score is the dense similarity (0 for BM25-only hits): for display only
    assert [c.fused_score for c in out] == [0.9, 0.8, 0.5, 0.0, 0.0]


def test_set_union_never_resorts_the_dense_list():
    dense = [(4, 0.30), (2, 0.95), (8, 0.60)]  # whatever order the dense list comes in
    assert positions(merge_set_union(dense, [(6, 3.0), (2, 2.0)], k=10)) == [4, 2, 8, 6]


@pytest.mark.parametrize("k, expected", [(5, [3, 1, 7, 5, 9]), (2, [3, 1, 5, 9]), (1, [3, 5, 1, 9]), (0, [5, 1, 9, 3])])
def test_set_union_cuts_the_dense_list_at_k_never_the_union(k, expected):
    # k is the paper's top-k of D(q); every BM25-only hit of K(q) is still appended
    assert positions(merge_set_union(DENSE, SPARSE, k=k)) == expected


def test_set_union_can_exceed_each_list_length():
    dense = [(i, 1 - i / 100) for i in range(20)]
    sparse = [(100 + i, 20.0 - i) for i in range(20)]
    assert len(merge_set_union(dense, sparse, k=20)) == 40
    assert positions(merge_set_union(dense, sparse, k=20))[:20] == list(range(20))


# ------------------------------------------------------------------ reciprocal rank fusion
def test_rrf_hand_computed():
    out = merge_rrf(DENSE, SPARSE, k=20, rrf_k=60)
    # ranks: dense 3,1,7 = 1,2,3; bm25 5,1,9,3 = 1,2,3,4
    # 1: 1/62 + 1/62 = .0322581   3: 1/61 + 1/64 = .0320184   5: 1/61 = .0163934
    # 7: 1/63 = .0158730          9: 1/63 (tie with 7: lower position first)
    assert positions(out) == [1, 3, 5, 7, 9]
    expected = {1: 2 / 62, 3: 1 / 61 + 1 / 64, 5: 1 / 61, 7: 1 / 63, 9: 1 / 63}
    for c in out:
        assert c.fused_score == pytest.approx(expected[c.position], rel=1e-12)


def test_rrf_small_constant_changes_the_order():
    # rrf_k = 1: 3: 1/2 + 1/5 = .7   1: 1/3 + 1/3 = .667   5: 1/2   7: 1/4   9: 1/4
    out = merge_rrf(DENSE, SPARSE, k=3, rrf_k=1)
    assert positions(out) == [3, 1, 5]
    assert [c.fused_score for c in out] == pytest.approx([0.7, 2 / 3, 0.5])


# ------------------------------------------------------------------ weighted linear fusion
def test_linear_hand_computed():
    # minmax(dense): 3 -> 1, 1 -> (0.8-0.5)/0.4 = .75, 7 -> 0
    # minmax(bm25):  5 -> 1, 1 -> (10-4)/8 = .75, 9 -> .5, 3 -> 0
    # alpha .5: 1 -> .75, 3 -> .5, 5 -> .5 (tie: position 3 first), 9 -> .25, 7 -> 0
    out = merge_linear(DENSE, SPARSE, k=20, alpha=0.5)
    assert positions(out) == [1, 3, 5, 9, 7]
    assert [c.fused_score for c in out] == pytest.approx([0.75, 0.5, 0.5, 0.25, 0.0])


def test_linear_alpha_extremes():
    # alpha 1: dense only decides; BM25-only hits all score 0 and tie in position order
    assert positions(merge_linear(DENSE, SPARSE, k=20, alpha=1.0)) == [3, 1, 5, 7, 9]
    # alpha 0: BM25 decides; dense-only hit 7 scores 0 and ties with 3 (bm25 min) -> position order
    assert positions(merge_linear(DENSE, SPARSE, k=20, alpha=0.0)) == [5, 1, 9, 3, 7]


def test_linear_single_hit_lists_normalize_to_one():
    out = merge_linear([(4, 0.2)], [(8, 1.5)], k=5, alpha=0.7)
    assert positions(out) == [4, 8]
    assert [c.fused_score for c in out] == pytest.approx([0.7, 0.3])


# ------------------------------------------------------------------ single-list strategies
def test_dense_only_ignores_bm25():
    out = merge_dense_only(DENSE, SPARSE, k=20)
    assert positions(out) == [3, 1, 7]
    assert all(c.sources == {"dense"} and c.sparse_score is None for c in out)
    assert positions(merge_dense_only(DENSE, SPARSE, k=2)) == [3, 1]


def test_bm25_only_ignores_dense():
    out = merge_bm25_only(DENSE, SPARSE, k=20)
    assert positions(out) == [5, 1, 9, 3]
    assert all(c.sources == {"sparse"} and c.dense_score is None for c in out)
    assert [c.fused_score for c in out] == [12.0, 10.0, 8.0, 4.0]
    assert positions(merge_bm25_only(DENSE, SPARSE, k=2)) == [5, 1]


@pytest.mark.parametrize("name", sorted(MERGERS))
def test_empty_inputs(name):
    assert MERGERS[name]([], [], 10) == []


# ------------------------------------------------------------------ determinism and registry
@pytest.mark.parametrize("name", ["rrf", "linear"])
def test_fusion_ties_are_broken_by_position_whatever_the_input_order(name):
    # two hits alone in their lists at rank 1 tie exactly under both fusions (alpha .5)
    a = MERGERS[name]([(10, 0.9)], [(2, 7.0)], 5, rrf_k=60, alpha=0.5)
    b = MERGERS[name]([(2, 0.9)], [(10, 7.0)], 5, rrf_k=60, alpha=0.5)
    assert positions(a) == positions(b) == [2, 10]


@pytest.mark.parametrize("name", sorted(MERGERS))
def test_merges_are_deterministic(name):
    rng = random.Random(3)
    dense = [(p, round(1 - i * 0.01, 2)) for i, p in enumerate(rng.sample(range(200), 20))]
    sparse = [(p, float(20 - i // 3)) for i, p in enumerate(rng.sample(range(200), 20))]  # ties every 3
    runs = [positions(MERGERS[name](dense, sparse, 20, rrf_k=60, alpha=0.5)) for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]
    assert len(runs[0]) == (len({p for p, _ in dense} | {p for p, _ in sparse}) if name == "set_union" else 20)


def test_registry_and_search_needs():
    assert set(MERGERS) == {"set_union", "rrf", "linear", "dense_only", "bm25_only"}
    assert RetrievalConfig().merge in MERGERS
    assert needs("set_union") == needs("rrf") == needs("linear") == (True, True)
    assert needs("dense_only") == (True, False)
    assert needs("bm25_only") == (False, True)
