"""Merge strategies for dense and sparse hit lists. Pure functions.

``merge_set_union`` is the pipeline's discovery (docs/design.md section 2): the dense list in its
own order, then the BM25-only hits in BM25 order; dense order is never re-sorted.
``rrf`` and ``linear`` are the conventional score fusions the paper found worse;
they stay so the ablation can be rerun.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

Hit = tuple[int, float]  # (position in store, score)


@dataclass
class Candidate:
    position: int
    dense_score: float | None = None  # cosine if found by FAISS
    sparse_score: float | None = None  # BM25 score if found by BM25
    fused_score: float = 0.0  # the score the merge ordered by (for display)
    sources: set[str] = field(default_factory=set)  # "dense" | "sparse" | "graph"


def _index(dense: Sequence[Hit], sparse: Sequence[Hit]) -> dict[int, Candidate]:
    cands: dict[int, Candidate] = {}
    for pos, s in dense:
        c = cands.setdefault(pos, Candidate(pos))
        c.dense_score = s
        c.sources.add("dense")
    for pos, s in sparse:
        c = cands.setdefault(pos, Candidate(pos))
        c.sparse_score = s
        c.sources.add("sparse")
    return cands


def merge_set_union(dense: Sequence[Hit], sparse: Sequence[Hit], k: int, **_: float) -> list[Candidate]:
    """R(q) = D(q) followed by K(q) \\ D(q).

    ``k`` cuts the dense list D(q) (the paper's top-k), never the union: cutting the union
    at k would drop every BM25-only hit whenever FAISS returns k results, i.e. always,
    and set-union would silently become dense-only. K(q) is already cut at sparse_k.
    """
    dense = list(dense)[:k]
    cands = _index(dense, sparse)
    order = [pos for pos, _ in dense]
    seen = set(order)
    order += [pos for pos, _ in sparse if pos not in seen]
    out = []
    for rank, pos in enumerate(order):
        c = cands[pos]
        c.fused_score = c.dense_score if c.dense_score is not None else 0.0
        out.append(c)
    return out


def merge_rrf(dense: Sequence[Hit], sparse: Sequence[Hit], k: int, rrf_k: float = 60, **_: float) -> list[Candidate]:
    """Reciprocal rank fusion: sum of 1/(rrf_k + rank) over the lists a hit is in."""
    cands = _index(dense, sparse)
    for lst in (dense, sparse):
        for rank, (pos, _) in enumerate(lst, start=1):
            cands[pos].fused_score += 1.0 / (rrf_k + rank)
    return _sorted(cands, k)


def _minmax(hits: Sequence[Hit]) -> dict[int, float]:
    if not hits:
        return {}
    vals = [s for _, s in hits]
    lo, hi = min(vals), max(vals)
    span = hi - lo
    return {pos: (1.0 if span == 0 else (s - lo) / span) for pos, s in hits}


def merge_linear(dense: Sequence[Hit], sparse: Sequence[Hit], k: int, alpha: float = 0.5, **_: float) -> list[Candidate]:
    """alpha * minmax(dense) + (1 - alpha) * minmax(bm25); a missing score counts 0."""
    cands = _index(dense, sparse)
    nd, ns = _minmax(dense), _minmax(sparse)
    for pos, c in cands.items():
        c.fused_score = alpha * nd.get(pos, 0.0) + (1 - alpha) * ns.get(pos, 0.0)
    return _sorted(cands, k)


def merge_dense_only(dense: Sequence[Hit], sparse: Sequence[Hit], k: int, **_: float) -> list[Candidate]:
    return merge_set_union(dense, [], k)


def merge_bm25_only(dense: Sequence[Hit], sparse: Sequence[Hit], k: int, **_: float) -> list[Candidate]:
    out = []
    for pos, s in sparse[:k]:
        c = Candidate(pos, sparse_score=s, fused_score=s, sources={"sparse"})
        out.append(c)
    return out


def _sorted(cands: dict[int, Candidate], k: int) -> list[Candidate]:
    # ties broken by position so results are deterministic
    return sorted(cands.values(), key=lambda c: (-c.fused_score, c.position))[:k]


MERGERS: dict[str, Callable[..., list[Candidate]]] = {
    "set_union": merge_set_union,
    "rrf": merge_rrf,
    "linear": merge_linear,
    "dense_only": merge_dense_only,
    "bm25_only": merge_bm25_only,
}


def needs(strategy: str) -> tuple[bool, bool]:
    """(needs dense search, needs sparse search) for a strategy."""
    return strategy != "bm25_only", strategy != "dense_only"
