"""A memory store is a directory.

    manifest.json   format/version, embedder, counts and checksums of the index files
    hot.sqlite      hot tier: MAU records, embeddings, graph tables (source of truth)
    cold/           cold tier: content-addressed raw content
    dense.faiss     FAISS index snapshot (derived: a prefix of the hot tier's rows)
    sparse.tantivy/ durable incremental BM25 index (derived; issue #16)

SQLite is the source of truth and commits every batch in one transaction, so a
killed process loses at most the batch in flight; index files are derived data,
written atomically, and on open they catch up from the hot tier: the rows they
lack are added (a stale index costs the lag, not a rebuild), and a missing or
damaged one is rebuilt. That is what makes every state a killed process can leave
behind openable. Stores written before issue #16 open the same way: their scope
table and tantivy index are built from the hot tier on the first read-write open.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, MutableSequence, Sequence

import numpy as np

from memsys.config import IndexConfig
from memsys.errors import (
    DuplicateIdError,
    InputError,
    StoreCorruptError,
    StoreError,
    StoreReadOnlyError,
)
from memsys.index.dense import DenseIndex
from memsys.index.scope import Scope, ScopeFields, scope_fields
from memsys.index.sparse import SparseIndex, make_sparse_index
from memsys.index.tantivy_bm25 import IndexedText, TantivyIndex
from memsys.ingest.index_text import LEGACY_INDEX_TEXT, index_text
from memsys.records import MAU, Status
from memsys.store.atomic import atomic_write_json, sha256_file
from memsys.store.codec import mau_from_json, mau_to_json
from memsys.store.cold import ColdStore
from memsys.store.files import MANIFEST, STORE_FORMAT, STORE_VERSION, connect_read_only, read_manifest
from memsys.store.lazy import LazyMAUs, LazyPositions

log = logging.getLogger(__name__)

HOT = "hot.sqlite"
DENSE = "dense.faiss"
SPARSE = "sparse.json"  # written by stores before issue #16; ignored now
TANTIVY = "sparse.tantivy"
QUICK_CHECK_MAX_BYTES = 256 * 2**20  # hot tiers up to this size are fully checked on open

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS maus (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    record TEXT NOT NULL,
    embedding BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS mau_scope (
    seq INTEGER PRIMARY KEY,
    user TEXT,
    conversation TEXT,
    ts INTEGER,
    session TEXT,
    archived INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS mau_scope_user ON mau_scope (user, ts);
CREATE INDEX IF NOT EXISTS mau_scope_conversation ON mau_scope (conversation, ts);
CREATE INDEX IF NOT EXISTS mau_scope_ts ON mau_scope (ts);
CREATE TABLE IF NOT EXISTS sparse_todo (seq INTEGER PRIMARY KEY);
"""


def sparse_text(m: MAU, fields: str, index_fields: str = LEGACY_INDEX_TEXT) -> str:
    """What BM25 indexes for a MAU: its summary, and optionally the detail text, headed by the
    speaker (and date) when ``index_fields`` asks (memsys.ingest.index_text)."""
    if fields == "summary":
        body = m.summary
    else:
        full = m.full_text
        body = m.summary if full == m.summary else f"{m.summary}\n{full}"
    return body if index_fields == LEGACY_INDEX_TEXT else index_text(m, index_fields, body)


def _encodable_record(m: MAU) -> str:
    """The JSON record of a MAU, refused (before any write) if SQLite cannot store it as UTF-8."""
    record = mau_to_json(m)
    try:
        record.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"MAU {m.id!r} has text that is not valid UTF-8 ({exc.reason}: {exc.object[exc.start:exc.end]!r})") from exc
    return record


def _scope_row(seq: int, m: MAU, f: ScopeFields | None = None) -> tuple:
    f = f or scope_fields(m)
    return (seq, f.user, f.conversation, f.ts, m.session_id, int(m.status == Status.ARCHIVED))


def _indexed_text(pos: int, m: MAU, fields: tuple[str, str], f: ScopeFields | None = None) -> IndexedText:
    f = f or scope_fields(m)
    return IndexedText(pos, sparse_text(m, *fields), f.user, f.conversation, f.ts)


class MemoryStore:
    """Hot + cold tiers and indices of one memory. Use :meth:`create` or :meth:`open`."""

    def __init__(self, path: Path, manifest: dict[str, Any], conn: sqlite3.Connection, read_only: bool):
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
        self._conn = conn
        self._write_lock = threading.Lock()
        self._sparse_lock = threading.Lock()
        self._read_lock = threading.Lock()
        self.maus: MutableSequence[MAU] = []
        self.positions: Any = {}
        self._active = np.ones(0, bool)
        self.dense = DenseIndex(self.dim, self.index_cfg)
        self._tantivy: TantivyIndex | None = None
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
        if path.exists() and any(path.iterdir()):
            raise StoreError(f"cannot create store: {path} exists and is not empty (open it instead)")
        path.mkdir(parents=True, exist_ok=True)
        from dataclasses import asdict

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
        conn = sqlite3.connect(path / HOT, check_same_thread=False, isolation_level=None)
        conn.executescript(_SCHEMA)
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('format', ?)", (f"{STORE_FORMAT}/{STORE_VERSION}",))
        atomic_write_json(path / MANIFEST, manifest)  # written last: its presence marks a store
        store = cls(path, manifest, conn, read_only=False)
        store._open_tantivy()
        return store

    @classmethod
    def open(cls, path: str | Path, *, read_only: bool = False) -> "MemoryStore":
        path = Path(path)
        manifest = read_manifest(path)
        hot = path / HOT
        if not hot.exists():
            raise StoreCorruptError(f"store hot tier missing: {hot}")
        try:
            if read_only:
                conn = connect_read_only(hot)
            else:
                conn = sqlite3.connect(hot, check_same_thread=False, isolation_level=None)
            # quick_check reads every page: most of a large store's open time (measured: 0.76 of 1.0 s
            # at 100k MAUs, about a minute at 1M); above the limit only the schema is read, and
            # damaged pages surface as StoreCorruptError when they are read
            check = conn.execute("PRAGMA quick_check" if hot.stat().st_size <= QUICK_CHECK_MAX_BYTES
                                 else "SELECT 'ok' FROM sqlite_master LIMIT 1").fetchone()
            if check is None or check[0] != "ok":
                raise sqlite3.DatabaseError(check[0] if check else "empty schema")
            if not read_only:
                conn.executescript(_SCHEMA)
            count, top = conn.execute("SELECT COUNT(*), COALESCE(MAX(seq), 0) FROM maus").fetchone()
        except sqlite3.DatabaseError as exc:
            raise StoreCorruptError(f"corrupt hot tier {hot}: {exc}") from exc
        if count != top:
            raise StoreCorruptError(f"{hot}: MAU sequence has gaps ({count} rows, last seq {top}); re-ingest the data")
        store = cls(path, manifest, conn, read_only)
        try:
            store._load_records(count)
            if not read_only:
                store._backfill_scope()
            store._load_or_catch_up_dense()
            store._open_tantivy()
        except sqlite3.DatabaseError as exc:
            raise StoreCorruptError(f"corrupt hot tier {hot}: {exc}") from exc
        return store

    def _load_records(self, count: int) -> None:
        """All records in memory for a small store (as before); on demand above the threshold."""
        if count > self.index_cfg.lazy_records_above:
            self.maus = [None] * count  # type: ignore[list-item]  # only its length, for _go_lazy
            self._go_lazy()
            self._active = np.ones(count, bool)
            if self._has_table("mau_scope"):
                archived = [r[0] - 1 for r in self._conn.execute("SELECT seq FROM mau_scope WHERE archived = 1")]
                self._active[archived] = False
            return
        rows = self._conn.execute("SELECT id, record, embedding FROM maus ORDER BY seq").fetchall()
        for i, (mid, record, blob) in enumerate(rows):
            try:
                m = mau_from_json(record)
            except (json.JSONDecodeError, KeyError, ValueError) as exc:
                raise StoreCorruptError(f"corrupt MAU record {mid!r} in {self.path / HOT}: {exc}") from exc
            vec = np.frombuffer(blob, dtype=np.float32)
            if vec.shape[0] != self.dim:
                raise StoreCorruptError(f"MAU {mid!r} in {self.path / HOT} has a {vec.shape[0]}-d embedding, store is {self.dim}-d")
            m.embedding = vec
            self.positions[m.id] = i
            self.maus.append(m)
        self._active = np.array([m.status != Status.ARCHIVED for m in self.maus], dtype=bool)

    def _go_lazy(self) -> None:
        lazy = LazyMAUs(self._conn, self._read_lock, len(self.maus), self.index_cfg.record_cache)
        self.maus, self.positions = lazy, LazyPositions(self._conn, self._read_lock, lazy)

    def _has_table(self, name: str) -> bool:
        return self._conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone() is not None

    def _backfill_scope(self) -> None:
        """Scope rows for MAUs written before issue #16 (or by nothing else): one transaction."""
        have = self._conn.execute("SELECT COUNT(*) FROM mau_scope").fetchone()[0]
        if have == len(self.maus):
            return
        log.info("store %s: building the scope table for %d MAUs", self.path, len(self.maus) - have)
        rows = [_scope_row(i + 1, m) for i, m in enumerate(self.maus)]
        self._transaction([("INSERT OR REPLACE INTO mau_scope VALUES (?, ?, ?, ?, ?, ?)", rows)])

    def _rows_from(self, start: int, chunk: int = 20_000) -> Iterable[tuple[int, np.ndarray]]:
        """(first position, vectors) chunks of the hot tier's embeddings from ``start`` on."""
        n = len(self.maus)
        for lo in range(start, n, chunk):
            with self._read_lock:
                blobs = self._conn.execute("SELECT embedding FROM maus WHERE seq > ? AND seq <= ? ORDER BY seq",
                                           (lo, min(lo + chunk, n))).fetchall()
            vecs = np.frombuffer(b"".join(b[0] for b in blobs), dtype=np.float32)
            if vecs.size != len(blobs) * self.dim:
                raise StoreCorruptError(f"{self.path / HOT}: an embedding is not {self.dim}-d")
            yield lo, vecs.reshape(len(blobs), self.dim)

    def _load_or_catch_up_dense(self) -> None:
        info = self.manifest.get("indices", {}).get("dense")
        fpath = self.path / DENSE
        n = len(self.maus)
        self.dense = DenseIndex(self.dim, self.index_cfg)
        if info and fpath.exists() and 0 < int(info.get("count", -1)) <= n:
            try:
                loaded = DenseIndex.read(fpath, self.dim, self.index_cfg)
                if len(loaded) == info["count"]:
                    self.dense = loaded
                else:
                    log.warning("dense index %s holds %d vectors, manifest says %s; rebuilding", fpath, len(loaded), info["count"])
            except Exception as exc:  # a damaged snapshot is rebuilt, not fatal
                log.warning("dense index %s unreadable (%s); rebuilding from hot tier", fpath, exc)
        elif n:
            log.info("dense index stale or missing (%s); rebuilding from hot tier", fpath)
        self._saved_dense = len(self.dense)
        for _, vecs in self._rows_from(len(self.dense)):
            self.dense.add(vecs)

    def _open_tantivy(self) -> None:
        """Open the durable BM25 index and add what it lacks (rows after its last commit, and
        rows whose text changed in a batch it did not commit). A damaged index is rebuilt."""
        if not self.index_cfg.sparse_incremental:
            return
        tpath = self.path / TANTIVY
        if self.read_only and not tpath.exists():
            return
        try:
            self._tantivy = TantivyIndex(tpath, writable=not self.read_only)
        except (ValueError, OSError) as exc:
            if self.read_only:
                log.warning("sparse index %s unreadable (%s); using the in-memory BM25", tpath, exc)
                return
            log.warning("sparse index %s unreadable (%s); rebuilding from hot tier", tpath, exc)
            shutil.rmtree(tpath, ignore_errors=True)
            self._tantivy = TantivyIndex(tpath)
        lag = len(self.maus) - self._tantivy.indexed_upto()
        todo = [] if self.read_only else [r[0] - 1 for r in self._conn.execute("SELECT seq FROM sparse_todo")]
        if self.read_only:
            if lag:  # cannot write here: the in-memory BM25 answers until a read-write open catches up
                log.warning("sparse index %s lags %d MAUs; read-only, so the in-memory BM25 answers", tpath, lag)
                self._tantivy = None
            return
        if todo:
            self._tantivy.delete(todo, commit=False)
        start = self._tantivy.indexed_upto()
        redo = [p for p in todo if p < start]
        self._tantivy.add([_indexed_text(p, self.maus[p], self._own_text) for p in redo], commit=False)
        for lo in range(start, len(self.maus), 20_000):
            batch = self.maus[lo: lo + 20_000]
            self._tantivy.add([_indexed_text(lo + i, m, self._own_text) for i, m in enumerate(batch)], commit=False)
        self._tantivy.commit()
        if todo:
            self._transaction([("DELETE FROM sparse_todo", [()])])

    # ----------------------------------------------------------------- writes
    def _check_writable(self) -> None:
        if self.read_only:
            raise StoreReadOnlyError(f"store {self.path} was opened read-only")

    def add(self, maus: Sequence[MAU]) -> None:
        """Append MAUs (with embeddings) in one transaction; the indices take the batch after it."""
        self._check_writable()
        if not maus:
            return
        seen: set[str] = set()
        for m in maus:
            if m.id in seen or m.id in self.positions:
                raise DuplicateIdError(f"duplicate MAU id {m.id!r} in store {self.path}")
            seen.add(m.id)
            if m.embedding is None or np.asarray(m.embedding).shape != (self.dim,):
                raise StoreError(f"MAU {m.id!r} has no {self.dim}-d embedding")
        vecs = np.stack([np.asarray(m.embedding, np.float32) for m in maus])
        rows = [(m.id, _encodable_record(m), vecs[i].tobytes()) for i, m in enumerate(maus)]
        with self._write_lock:
            base = len(self.maus)
            fields = [scope_fields(m) for m in maus]
            scope = [_scope_row(base + i + 1, m, f) for i, (m, f) in enumerate(zip(maus, fields))]
            self._transaction([("INSERT INTO maus (id, record, embedding) VALUES (?, ?, ?)", rows),
                               ("INSERT OR REPLACE INTO mau_scope VALUES (?, ?, ?, ?, ?, ?)", scope)])
            for i, m in enumerate(maus):
                m.embedding = vecs[i]
                self.positions[m.id] = base + i
                self.maus.append(m)
            self._active = np.concatenate([self._active, [m.status != Status.ARCHIVED for m in maus]])
            if isinstance(self.maus, list) and len(self.maus) > self.index_cfg.lazy_records_above:
                self._go_lazy()  # a growing store stops holding every record in memory
            self.dense.add(vecs)
            if self._tantivy is not None:
                self._tantivy.add([_indexed_text(base + i, m, self._own_text, f)
                                   for i, (m, f) in enumerate(zip(maus, fields))])
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
        rows = [(_encodable_record(m), m.id) for m in maus]
        pos = [self.positions[m.id] for m in maus]
        scope = [_scope_row(p + 1, m) for p, m in zip(pos, maus)]
        todo = [(p + 1,) for p in pos] if self._tantivy is not None else []
        with self._write_lock:
            self._transaction([("UPDATE maus SET record = ? WHERE id = ?", rows),
                               ("INSERT OR REPLACE INTO mau_scope VALUES (?, ?, ?, ?, ?, ?)", scope),
                               ("INSERT OR IGNORE INTO sparse_todo VALUES (?)", todo)])
            for p, m in zip(pos, maus):
                self.maus[p] = m
                self._active[p] = m.status != Status.ARCHIVED
            if self._tantivy is not None:
                self._tantivy.delete(pos, commit=False)
                self._tantivy.add([_indexed_text(p, m, self._own_text) for p, m in zip(pos, maus)])
                self._transaction([("DELETE FROM sparse_todo", [()])])
            self._invalidate_sparse()

    def _transaction(self, statements: Sequence[tuple[str, list[tuple]]]) -> None:
        """Run statements over their rows in one transaction; on any failure roll back,
        so a failed write never leaves the connection inside a transaction."""
        try:
            with self._read_lock:
                self._conn.execute("BEGIN IMMEDIATE")
                for sql, rows in statements:
                    if rows:
                        self._conn.executemany(sql, rows)
                self._conn.execute("COMMIT")
        except BaseException as exc:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"cannot write to {self.path / HOT}: {exc}") from exc
            raise

    def _snapshot(self) -> None:
        """Write the dense index beside its final name, then rename it in and record it."""
        tmp = self.path / f".{DENSE}.tmp"
        self.dense.write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, self.path / DENSE)
        self._saved_dense = len(self.dense)
        self.manifest["count"] = len(self.maus)
        self.manifest["saved"] = datetime.now(timezone.utc).isoformat()
        self.manifest["indices"] = {
            "dense": {"file": DENSE, "count": len(self.dense), "kind": self.dense.kind,
                      "bytes": (self.path / DENSE).stat().st_size},
            "sparse": {"file": TANTIVY if self._tantivy is not None else None, "backend": self.sparse_backend},
        }
        atomic_write_json(self.path / MANIFEST, self.manifest)

    def save(self) -> None:
        """Snapshot the dense index and the manifest (the hot tier and tantivy are already durable)."""
        self._check_writable()
        with self._write_lock:
            self._snapshot()

    def close(self) -> None:
        if self._tantivy is not None:
            self._tantivy.close()
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
        with self._read_lock:
            rows = self._conn.execute(
                "SELECT s.session, m.id FROM (SELECT session, MAX(seq) AS seq FROM mau_scope "
                "WHERE session IS NOT NULL GROUP BY session) s JOIN maus m ON m.seq = s.seq").fetchall()
        return dict(rows)

    def scope_positions(self, scope: Scope) -> np.ndarray:
        """Positions of the MAUs inside ``scope`` (an indexed query on the hot tier's scope table)."""
        where, args = [], []
        for col, val in (("user", scope.user), ("conversation", scope.conversation)):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(val)
        lo, hi = scope.bounds()
        if lo is not None:
            where.append("ts >= ?")
            args.append(lo)
        if hi is not None:
            where.append("ts <= ?")
            args.append(hi)
        sql = "SELECT seq - 1 FROM mau_scope" + (" WHERE " + " AND ".join(where) if where else "")
        with self._read_lock:
            if self._conn.execute("SELECT COUNT(*) FROM mau_scope").fetchone()[0] < len(self.maus):
                raise StoreError(f"store {self.path} predates scoped queries: open it read-write once to index its scopes")
            found = np.fromiter((r[0] for r in self._conn.execute(sql, args)), dtype=np.int64)
        return found[found < len(self.maus)]

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
