"""Dense index: FAISS inner product over L2-normalized embeddings (= cosine).

Rows are positions in the store's MAU list; FAISS read-only search is safe to
call from many threads at once, which is what the benchmark runner does.
"""

from __future__ import annotations

import faiss
import numpy as np


class DenseIndex:
    def __init__(self, dim: int):
        self.dim = dim
        self._index = faiss.IndexFlatIP(dim)

    def __len__(self) -> int:
        return int(self._index.ntotal)

    def add(self, vectors: np.ndarray) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError(f"expected vectors of shape [n, {self.dim}], got {vectors.shape}")
        self._index.add(vectors)

    def search(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """Top-k positions with similarity, best first."""
        if len(self) == 0 or k <= 0:
            return []
        q = np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32)
        scores, ids = self._index.search(q, min(k, len(self)))
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0]) if i >= 0]

    def to_bytes(self) -> bytes:
        return faiss.serialize_index(self._index).tobytes()

    @classmethod
    def from_bytes(cls, data: bytes, dim: int) -> "DenseIndex":
        idx = cls(dim)
        idx._index = faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8))
        if idx._index.d != dim:
            raise ValueError(f"index dim {idx._index.d} != {dim}")
        return idx
