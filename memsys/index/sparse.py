"""Sparse index: BM25 over MAU text.

Two interchangeable backends on the same tokenizer, so they can be compared on the
same data (benchmarks/perf/bench_memsys.py): ``bm25s`` (default, measured faster)
and ``rank_bm25`` (BM25Okapi, the reference implementation).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import Sequence

import numpy as np

_TOKEN_RE = re.compile(r"[a-z0-9]+")
# A compact English stop list: BM25 gains nothing from these and they dominate queries.
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me more most my myself no nor not now of off on once only or other our ours ourselves out over
    own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves""".split()
)


def tokenize(text: str) -> list[str]:
    return [t for t in _TOKEN_RE.findall(text.lower()) if t not in STOPWORDS]


class SparseIndex(ABC):
    name: str

    @abstractmethod
    def build(self, texts: Sequence[str]) -> None: ...

    @abstractmethod
    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """Top-k positions with BM25 score > 0, best first."""

    def __len__(self) -> int:
        return self._n

    _n = 0


class Bm25sIndex(SparseIndex):
    name = "bm25s"

    def __init__(self, k1: float = 1.5, b: float = 0.75):
        self.k1, self.b = k1, b
        self._model = None

    def build(self, texts: Sequence[str]) -> None:
        import bm25s

        self._n = len(texts)
        # Lucene IDF stays positive for terms in over half the documents (Robertson's goes
        # negative there, and BM25Okapi floors it), which matters for small stores.
        self._model = bm25s.BM25(k1=self.k1, b=self.b, method="lucene")
        corpus = [tokenize(t) or ["\u0000"] for t in texts]
        if corpus:
            self._model.index(corpus, show_progress=False)

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        q = tokenize(query)
        if not q or self._n == 0 or k <= 0:
            return []
        vocab = self._model.vocab_dict
        q = [t for t in q if t in vocab]
        if not q:
            return []
        scores = self._model.get_scores(q)
        return _top(scores, k)


class RankBm25Index(SparseIndex):
    name = "rank_bm25"

    def __init__(self, k1: float = 1.5, b: float = 0.75):
        self.k1, self.b = k1, b
        self._model = None

    def build(self, texts: Sequence[str]) -> None:
        from rank_bm25 import BM25Okapi

        self._n = len(texts)
        corpus = [tokenize(t) or ["\u0000"] for t in texts]
        self._model = BM25Okapi(corpus, k1=self.k1, b=self.b) if corpus else None

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        q = tokenize(query)
        if not q or self._model is None or k <= 0:
            return []
        return _top(np.asarray(self._model.get_scores(q)), k)


def _top(scores: np.ndarray, k: int) -> list[tuple[int, float]]:
    scores = np.asarray(scores, dtype=np.float64)
    k = min(k, len(scores))
    if k == 0:
        return []
    # every position scoring at least the k-th best score, so ties at the cut are all
    # candidates (argpartition alone picks an arbitrary subset of them)
    kth = np.partition(-scores, k - 1)[k - 1]
    cand = np.flatnonzero(-scores <= kth)
    order = cand[np.lexsort((cand, -scores[cand]))][:k]  # score desc, position asc: deterministic ties
    return [(int(i), float(scores[i])) for i in order if scores[i] > 0]


def make_sparse_index(backend: str) -> SparseIndex:
    if backend == "bm25s":
        return Bm25sIndex()
    if backend == "rank_bm25":
        return RankBm25Index()
    from memsys.errors import ConfigError

    raise ConfigError(f"unknown sparse backend '{backend}' (bm25s | rank_bm25)")
