"""A memory store is a directory.

    manifest.json   format/version, embedder, counts and checksums of the index files
    hot.sqlite      hot tier: MAU records, embeddings, graph tables (source of truth; memsys.store.hot)
    cold/           cold tier: content-addressed raw content
    dense.faiss     FAISS index snapshot (derived: a prefix of the hot tier's rows)
    sparse.tantivy/ durable incremental BM25 index (derived; issue #16)

SQLite is the source of truth and commits every batch in one transaction, so a
killed process loses at most the batch in flight; index files are derived data,
written atomically, and on open they catch up from the hot tier (memsys.store.indexes).
Stores written before issue #16 open the same way: their scope table and tantivy index
are built from the hot tier on the first read-write open.

Adding a batch costs time proportional to the batch: one SQLite transaction, one FAISS
add, tantivy documents committed every ``index.sparse_commit_every`` MAUs (and before any
read), and a dense snapshot every ``index.dense_snapshot_every`` MAUs.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, MutableSequence, Sequence

import numpy as np

from memsys.config import IndexConfig
from memsys.errors import DuplicateIdError, StoreCorruptError, StoreError, StoreReadOnlyError
from memsys.index.dense import DenseIndex
from memsys.index.scope import Scope, scope_fields
from memsys.index.sparse import SparseIndex, make_sparse_index
from memsys.index.tantivy_bm25 import TantivyIndex
from memsys.index.text import LEGACY_INDEX_TEXT
from memsys.records import MAU, Status
from memsys.store.atomic import atomic_write_json, sha256_file
from memsys.store.cold import ColdStore
from memsys.store.files import MANIFEST, STORE_FORMAT, STORE_VERSION, connect_read_only, read_manifest
from memsys.store.hot import HOT, QUICK_CHECK_MAX_BYTES, UPSERT_SCOPE, HotTier, encodable_record, scope_row, scope_rows
from memsys.store.indexes import DENSE, SPARSE, TANTIVY, indexed_text, load_dense, open_tantivy, sparse_text, write_dense
from memsys.store.lazy import LazyMAUs, LazyPositions

__all__ = ["MemoryStore", "STORE_FORMAT", "STORE_VERSION", "HOT", "DENSE", "SPARSE", "TANTIVY",
           "QUICK_CHECK_MAX_BYTES", "sparse_text"]

log = logging.getLogger(__name__)


def half_created(path: Path) -> bool:
    """Whether ``path`` is what a stopped ``create`` leaves: no manifest, nothing but the hot tier's
    files, and no MAU in them. The manifest is written last and nothing is added before it exists, so
    such a folder holds no data, and creating the store again loses nothing. A hot tier that holds
    MAUs, or that SQLite cannot read, is not this: it is left for the user to look at."""
    if not path.is_dir() or (path / MANIFEST).exists():
        return False
    files = {f.name for f in path.iterdir()}
    if HOT not in files or not files <= {HOT, HOT + "-journal", HOT + "-wal", HOT + "-shm"}:
        return False
    try:
        conn = connect_read_only(path / HOT)
    except sqlite3.DatabaseError:
        return False
    try:
        return conn.execute("SELECT COUNT(*) FROM maus").fetchone()[0] == 0
    except sqlite3.OperationalError as exc:  # stopped before the schema was written
        return "no such table" in str(exc)
    except sqlite3.DatabaseError:
        return False
    finally:
        conn.close()

class MemoryStore:
    """Hot + cold tiers and indices of one memory. Use :meth:`create` or :meth:`open`."""

    def __init__(self, path: Path, manifest: dict[str, Any], hot: HotTier, read_only: bool):
        self.path = path
        self.manifest = manifest
        self.read_only = read_only
        self.dim: int = int(manifest["embedder"]["dim"])
        self.sparse_fields: str = manifest.get("sparse_fields", "summary_and_details")
        self.sparse_backend: str = manifest.get("sparse_backend", "bm25s")
        #: the index text of the store's own BM25 index (stores from before index text: the text alone)
        self.sparse_index_text: str = manifest.get("sparse_index_text", LEGACY_INDEX_TEXT)
        self.index_cfg = IndexConfig(**manifest.get("index", {"dense_ann": "none", "sparse_incremental": False}))
        self.cold = ColdStore(path / "cold")
        self.hot = hot
        self._conn, self._read_lock = hot.conn, hot.lock
        self._write_lock = threading.Lock()
        self._sparse_lock = threading.Lock()
        self.maus: MutableSequence[MAU] = []
        self.positions: Any = {}
        self._active_buf = np.ones(0, bool)  # grown by doubling: an added batch never copies the whole mask
        self._active = self._active_buf
        self.dense = DenseIndex(self.dim, self.index_cfg)
        self._tantivy: TantivyIndex | None = None
        self._sparse_todo = False  # rows in sparse_todo wait for the next tantivy commit
        self._sparse: dict[tuple[str, str, str], SparseIndex] = {}  # (backend, fields, index text) -> in memory
        self._saved_dense = int(manifest.get("indices", {}).get("dense", {}).get("count", 0) or 0)

    # ----------------------------------------------------------------- create/open
    @classmethod
    def create(
        cls,
        path: str | Path,
        *,
        embedder_name: str,
        dim: int,
        sparse_backend: str = "bm25s",
        sparse_fields: str = "summary_and_details",
        sparse_index_text: str = LEGACY_INDEX_TEXT,
        extra: dict[str, Any] | None = None,
        index: IndexConfig | None = None,
    ) -> "MemoryStore":
        path = Path(path)
        if half_created(path):  # a create stopped before its manifest: nothing was ever added, start again
            for f in path.iterdir():
                f.unlink()
        elif path.exists() and any(path.iterdir()):
            raise StoreError(f"cannot create store: {path} exists and is not empty (open it instead)")
        path.mkdir(parents=True, exist_ok=True)
        manifest = {
            "format": STORE_FORMAT,
            "version": STORE_VERSION,
            "created": datetime.now(timezone.utc).isoformat(),
            "embedder": {"name": embedder_name, "dim": dim},
            "sparse_backend": sparse_backend,
            "sparse_fields": sparse_fields,
            "sparse_index_text": sparse_index_text,
            "index": asdict(index or IndexConfig()),
            "count": 0,
            "indices": {},
            "extra": extra or {},
        }
        hot = HotTier.create(path, f"{STORE_FORMAT}/{STORE_VERSION}")
        atomic_write_json(path / MANIFEST, manifest)  # written last: its presence marks a store
        store = cls(path, manifest, hot, read_only=False)
        store._open_tantivy()
        return store

    @classmethod
    def open(cls, path: str | Path, *, read_only: bool = False) -> "MemoryStore":
        path = Path(path)
        if half_created(path):
            raise StoreCorruptError(f"{path}: its creation was stopped before it held anything: create it again "
                                    "(rerun the ingest)")
        manifest = read_manifest(path)
        hot, count = HotTier.open(path, read_only)
        store = cls(path, manifest, hot, read_only)
        try:
            store._load_records(count)
            if not read_only:
                store._backfill_scope()
            store.dense, store._saved_dense = load_dense(path, manifest, hot, count, store.dim, store.index_cfg)
            store._open_tantivy()
        except sqlite3.DatabaseError as exc:
            raise StoreCorruptError(f"corrupt hot tier {path / HOT}: {exc}") from exc
        return store

    def _load_records(self, count: int) -> None:
        """All records in memory for a small store (as before); on demand above the threshold."""
        if count > self.index_cfg.lazy_records_above:
            self.maus = [None] * count  # type: ignore[list-item]  # only its length, for _go_lazy
            self._go_lazy()
            self._set_active(np.ones(count, bool))
            if self.hot.has_table("mau_scope"):
                self._active[self.hot.archived_positions()] = False
            return
        self.maus = self.hot.read_all(self.dim)
        self.positions = {m.id: i for i, m in enumerate(self.maus)}
        self._set_active(np.array([m.status != Status.ARCHIVED for m in self.maus], dtype=bool))

    def _go_lazy(self) -> None:
        lazy = LazyMAUs(self._conn, self._read_lock, len(self.maus), self.index_cfg.record_cache)
        self.maus, self.positions = lazy, LazyPositions(self._conn, self._read_lock, lazy)

    def _backfill_scope(self) -> None:
        """Scope rows for MAUs written before issue #16 (or by nothing else): one transaction."""
        have = self.hot.scope_count()
        if have == len(self.maus):
            return
        log.info("store %s: building the scope table for %d MAUs", self.path, len(self.maus) - have)
        rows = [scope_row(i + 1, m) for i, m in enumerate(self.maus)]
        self.hot.transaction([(UPSERT_SCOPE, rows)])

    def _open_tantivy(self) -> None:
        """A read-only store that cannot outgrow ``index.sparse_exact_max`` never consults tantivy, so it
        is not opened: a reader needs tantivy's lock file, which a read-only mount (the sandbox's shared
        store cache) refuses, and the open would only warn and fall back to what answers anyway."""
        if self.read_only and len(self.maus) <= self.index_cfg.sparse_exact_max:
            self._tantivy = None
            return
        if self.index_cfg.sparse_incremental:
            self._tantivy = open_tantivy(self.path, self.hot, self.maus, self._own_text, self.read_only)

    def _set_active(self, flags: np.ndarray) -> None:
        self._active_buf = flags
        self._active = flags

    def _extend_active(self, flags: list[bool]) -> None:
        n, need = len(self._active), len(self._active) + len(flags)
        if need > len(self._active_buf):
            grown = np.ones(max(need, 2 * len(self._active_buf), 1024), bool)
            grown[:n] = self._active
            self._active_buf = grown
        self._active_buf[n:need] = flags
        self._active = self._active_buf[:need]

    # ----------------------------------------------------------------- writes
    def _check_writable(self) -> None:
        if self.read_only:
            raise StoreReadOnlyError(f"store {self.path} was opened read-only")

    def _check_new(self, maus: Sequence[MAU]) -> np.ndarray:
        """The batch's vectors, after refusing duplicate ids and missing embeddings (before any write).
        Ids already in a lazily loaded store are refused by the hot tier's unique index instead."""
        seen: set[str] = set()
        known = self.positions if isinstance(self.positions, dict) else {}
        for m in maus:
            if m.id in seen or m.id in known:
                raise DuplicateIdError(f"duplicate MAU id {m.id!r} in store {self.path}")
            seen.add(m.id)
            if m.embedding is None or np.asarray(m.embedding).shape != (self.dim,):
                raise StoreError(f"MAU {m.id!r} has no {self.dim}-d embedding")
        return np.stack([np.asarray(m.embedding, np.float32) for m in maus])

    def add(self, maus: Sequence[MAU]) -> None:
        """Append MAUs (with embeddings) in one transaction; the indices take the batch after it."""
        self._check_writable()
        if not maus:
            return
        vecs = self._check_new(maus)
        rows = [(m.id, encodable_record(m), vecs[i].tobytes()) for i, m in enumerate(maus)]
        fields = [scope_fields(m) for m in maus]
        with self._write_lock:
            base = len(self.maus)
            self.hot.append(rows, scope_rows(base + 1, maus, fields))
            for i, m in enumerate(maus):
                m.embedding = vecs[i]
                self.positions[m.id] = base + i
                self.maus.append(m)
            self._extend_active([m.status != Status.ARCHIVED for m in maus])
            if isinstance(self.maus, list) and len(self.maus) > self.index_cfg.lazy_records_above:
                self._go_lazy()  # a growing store stops holding every record in memory
            self.dense.add(vecs)
            if self._tantivy is not None:
                self._tantivy.add([indexed_text(base + i, m, self._own_text, f)
                                   for i, (m, f) in enumerate(zip(maus, fields))], commit=False)
                self._commit_sparse(due_only=True)
            self._invalidate_sparse()
            if len(self.dense) - self._saved_dense >= self.index_cfg.dense_snapshot_every:
                self._snapshot()  # bounds what a crash makes the next open re-add

    def update(self, maus: Iterable[MAU]) -> None:
        """Rewrite records of existing MAUs (status, links, enrichment); embeddings unchanged."""
        self._check_writable()
        maus = list(maus)
        for m in maus:
            if m.id not in self.positions:
                raise StoreError(f"cannot update unknown MAU {m.id!r}")
        rows = [(encodable_record(m), m.id) for m in maus]
        pos = [self.positions[m.id] for m in maus]
        scope = [scope_row(p + 1, m) for p, m in zip(pos, maus)]
        todo = [(p + 1,) for p in pos] if self._tantivy is not None else []
        with self._write_lock:
            self.hot.transaction([("UPDATE maus SET record = ? WHERE id = ?", rows), (UPSERT_SCOPE, scope),
                                  ("INSERT OR IGNORE INTO sparse_todo VALUES (?)", todo)])
            for p, m in zip(pos, maus):
                self.maus[p] = m
                self._active[p] = m.status != Status.ARCHIVED
            if self._tantivy is not None:  # sparse_todo names the rows until they are committed
                self._tantivy.delete(pos, commit=False)
                self._tantivy.add([indexed_text(p, m, self._own_text) for p, m in zip(pos, maus)], commit=False)
                self._sparse_todo = True
                self._commit_sparse(due_only=True)
            self._invalidate_sparse()

    def _commit_sparse(self, due_only: bool = False) -> None:
        """Commit the durable BM25 index (``due_only``: once ``index.sparse_commit_every`` changes wait,
        which bounds what a crash makes the next open redo), then forget the rows it had to redo."""
        tv = self._tantivy
        if tv is None or (due_only and tv.pending < self.index_cfg.sparse_commit_every):
            return
        tv.flush()
        if self._sparse_todo:
            self.hot.transaction([("DELETE FROM sparse_todo", [()])])
            self._sparse_todo = False

    def _snapshot(self) -> None:
        """Write the dense index beside its final name, then rename it in and record it."""
        size = write_dense(self.path, self.dense)
        self._saved_dense = len(self.dense)
        self.manifest["count"] = len(self.maus)
        self.manifest["saved"] = datetime.now(timezone.utc).isoformat()
        self.manifest["indices"] = {
            "dense": {"file": DENSE, "count": len(self.dense), "kind": self.dense.kind, "bytes": size},
            "sparse": {"file": TANTIVY if self._tantivy is not None else None, "backend": self.sparse_backend},
        }
        atomic_write_json(self.path / MANIFEST, self.manifest)

    def save(self) -> None:
        """Snapshot the dense index and the manifest, and commit the sparse index (the hot tier is durable)."""
        self._check_writable()
        with self._write_lock:
            self._commit_sparse()
            self._snapshot()

    def close(self) -> None:
        if self._tantivy is not None:
            if not self.read_only:
                with self._write_lock:
                    self._commit_sparse()
            self._tantivy.close()
        self.hot.close()

    # ----------------------------------------------------------------- reads
    def __len__(self) -> int:
        return len(self.maus)

    def get(self, mau_id: str) -> MAU:
        try:
            return self.maus[self.positions[mau_id]]
        except KeyError:
            raise StoreError(f"no MAU {mau_id!r} in store {self.path}") from None

    @property
    def embeddings(self) -> np.ndarray:
        return self.dense.vectors()

    def similarity(self, query_vec: np.ndarray, positions: Sequence[int]) -> np.ndarray:
        """Cosine of the query with stored MAUs (for candidates found by BM25 only)."""
        if not len(positions):
            return np.zeros(0, np.float32)
        return self.dense.gather(np.asarray(positions)) @ np.asarray(query_vec, np.float32)

    def recent_summaries(self, n: int) -> list[str]:
        """Summaries of the last ``n`` MAUs (to prime the novelty gate on open)."""
        return [m.summary for m in self.maus[max(0, len(self.maus) - n):]]

    def last_in_sessions(self) -> dict[str, str]:
        """Session id -> id of its last MAU (to link the next turn of a session)."""
        if isinstance(self.maus, list):
            return {m.session_id: m.id for m in self.maus if m.session_id}
        return self.hot.last_in_sessions()

    def scope_positions(self, scope: Scope) -> np.ndarray:
        """Positions of the MAUs inside ``scope`` (an indexed query on the hot tier's scope table)."""
        return self.hot.scope_positions(scope, len(self.maus))

    def search_dense(self, query_vec: np.ndarray, k: int, scope: Scope | None = None) -> list[tuple[int, float]]:
        ids = None if scope is None or scope.is_empty() else self.scope_positions(scope)
        return self.dense.search(query_vec, k, ids)

    def search_sparse(self, query: str, k: int, scope: Scope | None = None,
                      index: tuple[str, str, str] | None = None) -> list[tuple[int, float]]:
        """BM25 top-k of the index ``index`` = (backend, fields, index text), by default the store's own.
        The own index's tantivy filters the scope inside its query; an exact in-memory BM25 scores the
        whole store, then keeps the scope."""
        scope = None if scope is None or scope.is_empty() else scope
        own = index is None or self.is_own_sparse(*index)
        if own and scope is not None and self._tantivy is not None:
            return self._tantivy.search(query, k, scope)  # filtered inside tantivy at any size
        idx = self.sparse(*(index or ()))
        if isinstance(idx, TantivyIndex):
            return idx.search(query, k, scope)
        if scope is None:
            return idx.search(query, k)
        allowed = set(self.scope_positions(scope).tolist())
        return [h for h in idx.search(query, len(self.maus)) if h[0] in allowed][:k]

    @property
    def _own_text(self) -> tuple[str, str]:
        return (self.sparse_fields, self.sparse_index_text)

    def is_own_sparse(self, backend: str, fields: str, index_fields: str) -> bool:
        """Whether (backend, fields, index text) is the store's own BM25 index (durable at scale)."""
        return (backend, fields, index_fields) == (self.sparse_backend, self.sparse_fields, self.sparse_index_text)

    def sparse(self, backend: str | None = None, fields: str | None = None,
               index_fields: str | None = None) -> SparseIndex:
        """The BM25 index for (backend, fields, index text), by default the store's own. The store's own
        is the durable tantivy index once the store outgrows ``index.sparse_exact_max``; otherwise an
        exact in-memory index built lazily after writes and kept per setting, so retrievers configured
        differently never swap each other's index. Safe under concurrent readers."""
        key = (backend or self.sparse_backend, fields or self.sparse_fields, index_fields or self.sparse_index_text)
        if self.is_own_sparse(*key) and self._tantivy is not None and len(self.maus) > self.index_cfg.sparse_exact_max:
            self._tantivy.flush()  # every added MAU is searchable
            return self._tantivy
        with self._sparse_lock:
            idx = self._sparse.get(key)
            if idx is None:
                idx = make_sparse_index(key[0])
                idx.build([sparse_text(m, key[1], key[2]) for m in self.maus])
                self._sparse[key] = idx
            return idx

    def use_sparse_backend(self, backend: str) -> None:
        """Change the default backend of :meth:`sparse` (what ``save`` records in the manifest)."""
        with self._sparse_lock:
            self.sparse_backend = backend

    def _invalidate_sparse(self) -> None:
        with self._sparse_lock:
            self._sparse.clear()

    def active_mask(self, include_archived: bool = False) -> np.ndarray | None:
        if include_archived:
            return None
        return self._active

    def hot_connection(self) -> sqlite3.Connection:
        """For modules that keep their own tables in the hot tier (the knowledge graph)."""
        return self._conn

    def files_digest(self) -> str:
        """Digest of the saved store (manifest checksums), for caches keyed on a built store."""
        return sha256_file(self.path / MANIFEST)
