"""A memory store is a directory.

    manifest.json   format/version, embedder, counts and checksums of the index files
    hot.sqlite      hot tier: MAU records, embeddings, graph tables (source of truth)
    cold/           cold tier: content-addressed raw content
    dense.faiss     FAISS index snapshot (derived: rebuilt from hot.sqlite if stale)
    sparse.json     BM25 corpus snapshot (derived)

SQLite is the source of truth and commits every batch in one transaction, so a
killed process loses at most the batch in flight; index files are derived data,
written atomically and checked against the manifest on open, and rebuilt from the
hot tier when they are missing or stale. That is what makes every state a killed
process can leave behind openable.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from memsys.errors import (
    DuplicateIdError,
    InputError,
    StoreCorruptError,
    StoreError,
    StoreReadOnlyError,
    StoreVersionError,
)
from memsys.index.dense import DenseIndex
from memsys.index.sparse import SparseIndex, make_sparse_index
from memsys.records import MAU, Status
from memsys.store.atomic import atomic_write_bytes, atomic_write_json, sha256_bytes, sha256_file
from memsys.store.codec import mau_from_json, mau_to_json
from memsys.store.cold import ColdStore

log = logging.getLogger(__name__)

STORE_FORMAT = "memsys-store"
STORE_VERSION = 1
MANIFEST = "manifest.json"
HOT = "hot.sqlite"
DENSE = "dense.faiss"
SPARSE = "sparse.json"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS maus (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    record TEXT NOT NULL,
    embedding BLOB NOT NULL
);
"""


def sparse_text(m: MAU, fields: str) -> str:
    """What BM25 indexes for a MAU: its summary, and optionally the detail text."""
    if fields == "summary":
        return m.summary
    full = m.full_text
    return m.summary if full == m.summary else f"{m.summary}\n{full}"


def _encodable_record(m: MAU) -> str:
    """The JSON record of a MAU, refused (before any write) if SQLite cannot store it as UTF-8."""
    record = mau_to_json(m)
    try:
        record.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"MAU {m.id!r} has text that is not valid UTF-8 ({exc.reason}: {exc.object[exc.start:exc.end]!r})") from exc
    return record


def _connect_read_only(hot: Path) -> sqlite3.Connection:
    """A read-only connection, after rolling back a transaction left by a killed writer.

    A read-only SQLite connection cannot replay a hot rollback journal and fails with
    "attempt to write a readonly database"; rolling it back is what any read-write
    open does first, and it only ever removes the uncommitted batch.
    """
    # as_uri() percent-escapes '?', '#' and '%' in the path (an f-string URI would not)
    uri = f"{hot.resolve().as_uri()}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
    journal = hot.with_name(hot.name + "-journal")
    try:
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # the first read meets a hot journal
        return conn
    except sqlite3.OperationalError:
        conn.close()
        if not journal.exists():
            raise
    try:
        rw = sqlite3.connect(hot, isolation_level=None)
        try:
            rw.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # replays the journal
        finally:
            rw.close()
    except sqlite3.Error as exc:
        raise StoreError(
            f"{hot} has a rollback journal ({journal.name}) from a writer that was killed or is still running, "
            f"and it cannot be recovered here ({exc}); open the store read-write once where it is writable"
        ) from exc
    return sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)


class MemoryStore:
    """Hot + cold tiers and indices of one memory. Use :meth:`create` or :meth:`open`."""

    def __init__(self, path: Path, manifest: dict[str, Any], conn: sqlite3.Connection, read_only: bool):
        self.path = path
        self.manifest = manifest
        self.read_only = read_only
        self.dim: int = int(manifest["embedder"]["dim"])
        self.sparse_fields: str = manifest.get("sparse_fields", "summary_and_details")
        self.sparse_backend: str = manifest.get("sparse_backend", "bm25s")
        self.cold = ColdStore(path / "cold")
        self._conn = conn
        self._write_lock = threading.Lock()
        self._sparse_lock = threading.Lock()
        self.maus: list[MAU] = []
        self.positions: dict[str, int] = {}
        self._emb_chunks: list[np.ndarray] = []
        self._emb: np.ndarray = np.zeros((0, self.dim), np.float32)
        self.dense = DenseIndex(self.dim)
        self._sparse: dict[tuple[str, str], SparseIndex] = {}  # (backend, fields) -> index

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
        extra: dict[str, Any] | None = None,
    ) -> "MemoryStore":
        path = Path(path)
        if path.exists() and any(path.iterdir()):
            raise StoreError(f"cannot create store: {path} exists and is not empty (open it instead)")
        path.mkdir(parents=True, exist_ok=True)
        manifest = {
            "format": STORE_FORMAT,
            "version": STORE_VERSION,
            "created": datetime.now(timezone.utc).isoformat(),
            "embedder": {"name": embedder_name, "dim": dim},
            "sparse_backend": sparse_backend,
            "sparse_fields": sparse_fields,
            "count": 0,
            "indices": {},
            "extra": extra or {},
        }
        conn = sqlite3.connect(path / HOT, check_same_thread=False, isolation_level=None)
        conn.executescript(_SCHEMA)
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('format', ?)", (f"{STORE_FORMAT}/{STORE_VERSION}",))
        atomic_write_json(path / MANIFEST, manifest)  # written last: its presence marks a store
        store = cls(path, manifest, conn, read_only=False)
        return store

    @classmethod
    def open(cls, path: str | Path, *, read_only: bool = False) -> "MemoryStore":
        path = Path(path)
        mpath = path / MANIFEST
        if not path.is_dir():
            raise StoreError(f"no memory store at {path} (not a directory)")
        if not mpath.exists():
            raise StoreCorruptError(f"not a memory store or half-created: {mpath} is missing")
        try:
            manifest = json.loads(mpath.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StoreCorruptError(f"corrupt store manifest {mpath}: {exc}") from exc
        if not isinstance(manifest, dict) or manifest.get("format") != STORE_FORMAT:
            raise StoreCorruptError(f"{mpath} is not a memsys store manifest (format={manifest.get('format') if isinstance(manifest, dict) else None!r})")
        if manifest.get("version") != STORE_VERSION:
            raise StoreVersionError(
                f"{mpath}: store format version {manifest.get('version')} but this memsys reads version {STORE_VERSION}; re-ingest the data"
            )
        embedder = manifest.get("embedder")
        dim = embedder.get("dim") if isinstance(embedder, dict) else None
        if not isinstance(dim, int) or dim <= 0:
            raise StoreCorruptError(f"{mpath} has no valid embedder.dim (got {dim!r})")
        hot = path / HOT
        if not hot.exists():
            raise StoreCorruptError(f"store hot tier missing: {hot}")
        try:
            if read_only:
                conn = _connect_read_only(hot)
            else:
                conn = sqlite3.connect(hot, check_same_thread=False, isolation_level=None)
            check = conn.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise sqlite3.DatabaseError(check)
            if not read_only:
                conn.executescript(_SCHEMA)
            rows = conn.execute("SELECT id, record, embedding FROM maus ORDER BY seq").fetchall()
        except sqlite3.DatabaseError as exc:
            raise StoreCorruptError(f"corrupt hot tier {hot}: {exc}") from exc
        store = cls(path, manifest, conn, read_only)
        store._load_rows(rows, source=str(hot))
        store._load_or_rebuild_dense()
        return store

    def _load_rows(self, rows: Sequence[tuple[str, str, bytes]], source: str) -> None:
        vecs = []
        for i, (mid, record, blob) in enumerate(rows):
            try:
                m = mau_from_json(record)
            except (json.JSONDecodeError, KeyError, ValueError) as exc:
                raise StoreCorruptError(f"corrupt MAU record {mid!r} in {source}: {exc}") from exc
            vec = np.frombuffer(blob, dtype=np.float32)
            if vec.shape[0] != self.dim:
                raise StoreCorruptError(f"MAU {mid!r} in {source} has a {vec.shape[0]}-d embedding, store is {self.dim}-d")
            m.embedding = vec
            self.positions[m.id] = i
            self.maus.append(m)
            vecs.append(vec)
        self._emb = np.stack(vecs).astype(np.float32) if vecs else np.zeros((0, self.dim), np.float32)

    def _load_or_rebuild_dense(self) -> None:
        info = self.manifest.get("indices", {}).get("dense")
        fpath = self.path / DENSE
        if info and fpath.exists() and info.get("count") == len(self.maus):
            data = fpath.read_bytes()
            if sha256_bytes(data) == info.get("sha256"):
                try:
                    self.dense = DenseIndex.from_bytes(data, self.dim)
                    return
                except Exception as exc:  # a damaged snapshot is rebuilt, not fatal
                    log.warning("dense index %s unreadable (%s); rebuilding from hot tier", fpath, exc)
            else:
                log.warning("dense index %s does not match manifest checksum; rebuilding", fpath)
        elif self.maus:
            log.info("dense index stale or missing (%s); rebuilding from hot tier", fpath)
        self.dense = DenseIndex(self.dim)
        if len(self._emb):
            self.dense.add(self._emb)

    # ----------------------------------------------------------------- writes
    def _check_writable(self) -> None:
        if self.read_only:
            raise StoreReadOnlyError(f"store {self.path} was opened read-only")

    def add(self, maus: Sequence[MAU]) -> None:
        """Append MAUs (with embeddings) in one transaction; indices update in memory."""
        self._check_writable()
        if not maus:
            return
        seen: set[str] = set()
        for m in maus:
            if m.id in self.positions or m.id in seen:
                raise DuplicateIdError(f"duplicate MAU id {m.id!r} in store {self.path}")
            seen.add(m.id)
            if m.embedding is None or np.asarray(m.embedding).shape != (self.dim,):
                raise StoreError(f"MAU {m.id!r} has no {self.dim}-d embedding")
        vecs = np.stack([np.asarray(m.embedding, np.float32) for m in maus])
        rows = [(m.id, _encodable_record(m), vecs[i].tobytes()) for i, m in enumerate(maus)]
        with self._write_lock:
            self._transaction("INSERT INTO maus (id, record, embedding) VALUES (?, ?, ?)", rows)
            base = len(self.maus)
            for i, m in enumerate(maus):
                m.embedding = vecs[i]
                self.positions[m.id] = base + i
                self.maus.append(m)
            self._emb = np.concatenate([self._emb, vecs]) if len(self._emb) else vecs
            self.dense.add(vecs)
            self._invalidate_sparse()

    def update(self, maus: Iterable[MAU]) -> None:
        """Rewrite records of existing MAUs (status, links, enrichment); embeddings unchanged."""
        self._check_writable()
        maus = list(maus)
        for m in maus:
            if m.id not in self.positions:
                raise StoreError(f"cannot update unknown MAU {m.id!r}")
        rows = [(_encodable_record(m), m.id) for m in maus]
        with self._write_lock:
            self._transaction("UPDATE maus SET record = ? WHERE id = ?", rows)
            for m in maus:
                self.maus[self.positions[m.id]] = m
            self._invalidate_sparse()

    def _transaction(self, sql: str, rows: list[tuple]) -> None:
        """Run one statement over ``rows`` in one transaction; on any failure roll back,
        so a failed write never leaves the connection inside a transaction."""
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.executemany(sql, rows)
            self._conn.execute("COMMIT")
        except BaseException as exc:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"cannot write to {self.path / HOT}: {exc}") from exc
            raise

    def save(self) -> None:
        """Snapshot the derived indices and the manifest (atomic files)."""
        self._check_writable()
        with self._write_lock:
            dense_bytes = self.dense.to_bytes()
            atomic_write_bytes(self.path / DENSE, dense_bytes)
            texts = [sparse_text(m, self.sparse_fields) for m in self.maus]
            sparse_bytes = json.dumps(texts, ensure_ascii=False).encode()
            atomic_write_bytes(self.path / SPARSE, sparse_bytes)
            self.manifest["count"] = len(self.maus)
            self.manifest["saved"] = datetime.now(timezone.utc).isoformat()
            self.manifest["indices"] = {
                "dense": {"file": DENSE, "count": len(self.maus), "sha256": sha256_bytes(dense_bytes)},
                "sparse": {"file": SPARSE, "count": len(self.maus), "sha256": sha256_bytes(sparse_bytes),
                           "backend": self.sparse_backend},
            }
            atomic_write_json(self.path / MANIFEST, self.manifest)

    def close(self) -> None:
        self._conn.close()

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
        return self._emb

    def similarity(self, query_vec: np.ndarray, positions: Sequence[int]) -> np.ndarray:
        """Cosine of the query with stored MAUs (for candidates found by BM25 only)."""
        if not positions:
            return np.zeros(0, np.float32)
        return self._emb[np.asarray(positions)] @ np.asarray(query_vec, np.float32)

    def sparse(self, backend: str | None = None, fields: str | None = None) -> SparseIndex:
        """The BM25 index for (backend, fields), by default the store's own; built lazily after
        writes and kept per setting, so retrievers configured differently never swap each
        other's index. Safe under concurrent readers."""
        key = (backend or self.sparse_backend, fields or self.sparse_fields)
        with self._sparse_lock:
            idx = self._sparse.get(key)
            if idx is None:
                idx = make_sparse_index(key[0])
                idx.build(self._sparse_corpus(key[1]))
                self._sparse[key] = idx
            return idx

    def use_sparse_backend(self, backend: str) -> None:
        """Change the default backend of :meth:`sparse` (what ``save`` records in the manifest)."""
        with self._sparse_lock:
            self.sparse_backend = backend

    def _invalidate_sparse(self) -> None:
        with self._sparse_lock:
            self._sparse.clear()

    def _sparse_corpus(self, fields: str) -> list[str]:
        info = self.manifest.get("indices", {}).get("sparse")
        fpath = self.path / SPARSE
        if info and fpath.exists() and info.get("count") == len(self.maus) and self.manifest.get("sparse_fields") == fields:
            data = fpath.read_bytes()
            if sha256_bytes(data) == info.get("sha256"):
                return json.loads(data)
        return [sparse_text(m, fields) for m in self.maus]

    def active_mask(self, include_archived: bool = False) -> np.ndarray | None:
        if include_archived:
            return None
        return np.array([m.status != Status.ARCHIVED for m in self.maus], dtype=bool)

    def hot_connection(self) -> sqlite3.Connection:
        """For modules that keep their own tables in the hot tier (the knowledge graph)."""
        return self._conn

    def files_digest(self) -> str:
        """Digest of the saved store (manifest checksums), for caches keyed on a built store."""
        return sha256_file(self.path / MANIFEST)
