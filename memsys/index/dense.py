"""Dense index: FAISS inner product over L2-normalized embeddings (= cosine).

Rows are positions in the store's MAU list; FAISS read-only search is safe to
call from many threads at once, which is what the benchmark runner does.

Exact (flat) while the store is small; once it passes ``IndexConfig.dense_flat_max``
the vectors move, once, into an approximate index (HNSW or IVF) that then grows
incrementally: an added batch costs time proportional to the batch. The index holds
the only in-memory copy of the vectors (``vectors()`` / ``gather()``), so a 1M-MAU store
does not keep them twice.

A scoped query (``ids``: the positions allowed) is answered inside the index: exactly
over the scope's own vectors when the scope is small, else by the ANN search with
an id selector, so it never returns an out-of-scope row and never post-filters.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from memsys.config import IndexConfig
from memsys.index.blas import faiss_native_env

with faiss_native_env():  # FAISS's OpenBLAS kernels and OpenMP waiting (memsys.index.blas)
    import faiss

ANN_KINDS = ("hnsw", "ivf", "none")


def _check_cfg(cfg: IndexConfig) -> None:
    if cfg.dense_ann not in ANN_KINDS:
        from memsys.errors import ConfigError

        raise ConfigError(f"unknown index.dense_ann '{cfg.dense_ann}' ({' | '.join(ANN_KINDS)})")


def top_k_exact(vectors: np.ndarray, query: np.ndarray, k: int, ids: np.ndarray | None = None) -> list[tuple[int, float]]:
    """Exact top-k rows of ``vectors`` by inner product; ``ids`` maps rows to positions."""
    if len(vectors) == 0 or k <= 0:
        return []
    scores = vectors @ query
    k = min(k, len(scores))
    part = np.argpartition(-scores, k - 1)[:k]
    order = part[np.lexsort((part, -scores[part]))]
    pos = order if ids is None else ids[order]
    return [(int(p), float(scores[o])) for p, o in zip(pos, order)]


class DenseIndex:
    def __init__(self, dim: int, cfg: IndexConfig | None = None):
        self.dim = dim
        self.cfg = cfg or IndexConfig(dense_ann="none")
        _check_cfg(self.cfg)
        self._index: faiss.Index = faiss.IndexFlatIP(dim)

    def __len__(self) -> int:
        return int(self._index.ntotal)

    @property
    def kind(self) -> str:
        """"flat", "hnsw" or "ivf": what answers queries now."""
        if isinstance(self._index, faiss.IndexHNSW):
            return "hnsw"
        return "ivf" if isinstance(self._index, faiss.IndexIVF) else "flat"

    def add(self, vectors: np.ndarray) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError(f"expected vectors of shape [n, {self.dim}], got {vectors.shape}")
        if self.kind == "flat" and self.cfg.dense_ann != "none" and len(self) + len(vectors) > self.cfg.dense_flat_max:
            self._to_ann(vectors)
            return
        self._index.add(vectors)

    def _to_ann(self, new: np.ndarray) -> None:
        """Move every vector into the configured ANN index (once, when the store outgrows flat)."""
        old = self.vectors().copy()
        allv = np.concatenate([old, new]) if len(old) else new
        cfg = self.cfg
        if cfg.dense_ann == "hnsw":
            index = faiss.IndexHNSWFlat(self.dim, cfg.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = cfg.hnsw_ef_construction
        else:
            quantizer = faiss.IndexFlatIP(self.dim)
            nlist = min(cfg.ivf_nlist, max(1, len(allv) // 39))  # FAISS wants >= 39 points per centroid
            index = faiss.IndexIVFFlat(quantizer, self.dim, nlist, faiss.METRIC_INNER_PRODUCT)
            index.train(allv)
            index.make_direct_map()
        index.add(allv)
        self._index = index

    # ----------------------------------------------------------------- vectors
    def vectors(self) -> np.ndarray:
        """A read-only view of all vectors, row = position (no copy for flat and HNSW).
        Valid until the next ``add``."""
        n = len(self)
        if n == 0:
            return np.zeros((0, self.dim), np.float32)
        kind = self.kind
        if kind == "ivf":
            return self._index.reconstruct_n(0, n)
        flat = self._index if kind == "flat" else faiss.downcast_index(self._index.storage)
        view = faiss.rev_swig_ptr(flat.get_xb(), n * self.dim).reshape(n, self.dim)
        view.flags.writeable = False
        return view

    def gather(self, positions: np.ndarray) -> np.ndarray:
        positions = np.asarray(positions, dtype=np.int64)
        if self.kind == "ivf":
            return self._index.reconstruct_batch(positions)
        return self.vectors()[positions]

    # ----------------------------------------------------------------- search
    def search(self, query: np.ndarray, k: int, ids: np.ndarray | None = None) -> list[tuple[int, float]]:
        """Top-k positions with similarity, best first; only among ``ids`` when given."""
        if len(self) == 0 or k <= 0:
            return []
        q = np.ascontiguousarray(np.asarray(query, np.float32).reshape(1, -1))
        if ids is not None:
            ids = np.unique(np.asarray(ids, dtype=np.int64))
            if len(ids) == 0:
                return []
            if self.kind == "flat" or len(ids) <= self.cfg.scope_exact_max:
                return top_k_exact(self.gather(ids), q[0], k, ids)
        params = self._params(ids)
        scores, found = self._index.search(q, min(k, len(self)), params=params)
        return [(int(i), float(s)) for i, s in zip(found[0], scores[0]) if i >= 0]

    def _params(self, ids: np.ndarray | None) -> faiss.SearchParameters | None:
        kind = self.kind
        sel = faiss.IDSelectorBatch(ids) if ids is not None else None
        if kind == "hnsw":
            return faiss.SearchParametersHNSW(efSearch=self.cfg.hnsw_ef_search, sel=sel)
        if kind == "ivf":
            return faiss.SearchParametersIVF(nprobe=self.cfg.ivf_nprobe, sel=sel)
        return faiss.SearchParameters(sel=sel) if sel is not None else None

    # ----------------------------------------------------------------- persistence
    def to_bytes(self) -> bytes:
        return faiss.serialize_index(self._index).tobytes()

    @classmethod
    def from_bytes(cls, data: bytes, dim: int, cfg: IndexConfig | None = None) -> "DenseIndex":
        idx = cls(dim, cfg)
        idx._index = faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8))
        idx._check_loaded()
        return idx

    def write(self, path: Path) -> None:
        """Write to ``path`` (the caller renames it into place: FAISS writes in one go, not atomically)."""
        faiss.write_index(self._index, str(path))

    @classmethod
    def read(cls, path: Path, dim: int, cfg: IndexConfig | None = None) -> "DenseIndex":
        idx = cls(dim, cfg)
        idx._index = faiss.read_index(str(path))
        idx._check_loaded()
        return idx

    def _check_loaded(self) -> None:
        if self._index.d != self.dim:
            raise ValueError(f"index dim {self._index.d} != {self.dim}")
        if self.kind == "ivf":
            self._index.make_direct_map()
