"""The hot tier: one SQLite file, the store's source of truth.

``maus`` holds every record (JSON) and its embedding, ``mau_scope`` the scope fields queries
filter on (written in the same transaction), ``sparse_todo`` the rows whose BM25 text changed
in a batch the durable sparse index may not have committed. Position = ``seq - 1``: the
table appends without gaps (a rolled-back batch never consumes sequence numbers).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from memsys.errors import DuplicateIdError, InputError, StoreCorruptError, StoreError
from memsys.index.scope import Scope, ScopeFields, scope_fields
from memsys.records import MAU, Status
from memsys.store.codec import mau_from_json, mau_to_json
from memsys.store.files import connect_read_only

HOT = "hot.sqlite"
QUICK_CHECK_MAX_BYTES = 256 * 2**20  # hot tiers up to this size are fully checked on open
# page cache of a connection (KiB): the id and scope indexes of a 1M-MAU store take tens of MB, and
# SQLite's default 2 MB makes every insert into them re-read pages from the OS
CACHE_KIB = 64 * 1024
_IN_CHUNK = 500  # ids per "IN (...)" look-up

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
INSERT_MAU = "INSERT INTO maus (id, record, embedding) VALUES (?, ?, ?)"
UPSERT_SCOPE = "INSERT OR REPLACE INTO mau_scope VALUES (?, ?, ?, ?, ?, ?)"


def encodable_record(m: MAU) -> str:
    """The JSON record of a MAU, refused (before any write) if SQLite cannot store it as UTF-8."""
    record = mau_to_json(m)
    if record.isascii():
        return record
    try:
        record.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"MAU {m.id!r} has text that is not valid UTF-8 ({exc.reason}: {exc.object[exc.start:exc.end]!r})") from exc
    return record


def scope_row(seq: int, m: MAU, f: ScopeFields | None = None) -> tuple:
    f = f or scope_fields(m)
    return (seq, f.user, f.conversation, f.ts, m.session_id, int(m.status == Status.ARCHIVED))


def scope_rows(first_seq: int, maus: Iterable[MAU], fields: Iterable[ScopeFields]) -> list[tuple]:
    """Scope rows of consecutive MAUs from ``first_seq`` on, with their scope fields computed once."""
    return [scope_row(first_seq + i, m, f) for i, (m, f) in enumerate(zip(maus, fields))]


class HotTier:
    """A connection to ``hot.sqlite`` and the statements the store runs on it.

    ``lock`` serialises use of the connection (readers in several threads, one writer).
    """

    def __init__(self, path: Path, conn: sqlite3.Connection, read_only: bool):
        self.path, self.conn, self.read_only = path, conn, read_only
        self.lock = threading.Lock()
        conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")

    @classmethod
    def create(cls, folder: Path, format_tag: str) -> "HotTier":
        conn = sqlite3.connect(folder / HOT, check_same_thread=False, isolation_level=None)
        conn.executescript(_SCHEMA)
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('format', ?)", (format_tag,))
        return cls(folder / HOT, conn, read_only=False)

    @classmethod
    def open(cls, folder: Path, read_only: bool) -> tuple["HotTier", int]:
        """Open and check the hot tier; returns it and its MAU count."""
        hot = folder / HOT
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
        return cls(hot, conn, read_only), count

    def close(self) -> None:
        self.conn.close()

    # ----------------------------------------------------------------- writes
    def transaction(self, statements: Sequence[tuple[str, list[tuple]]]) -> None:
        """Run statements over their rows in one transaction; on any failure roll back,
        so a failed write never leaves the connection inside a transaction."""
        try:
            with self.lock:
                self.conn.execute("BEGIN IMMEDIATE")
                for sql, rows in statements:
                    if rows:
                        self.conn.executemany(sql, rows)
                self.conn.execute("COMMIT")
        except BaseException as exc:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.IntegrityError) and "maus.id" in str(exc):
                raise DuplicateIdError(f"duplicate MAU id in store {self.path.parent}: {exc}") from exc
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"cannot write to {self.path}: {exc}") from exc
            raise

    def append(self, rows: list[tuple], scope: list[tuple]) -> None:
        """Append MAU rows (id, record, embedding) and their scope rows in one transaction.
        An id the table already holds fails the whole batch with DuplicateIdError naming it."""
        try:
            self.transaction([(INSERT_MAU, rows), (UPSERT_SCOPE, scope)])
        except DuplicateIdError:
            taken = self.existing_ids([r[0] for r in rows])
            if taken:
                raise DuplicateIdError(f"duplicate MAU id {taken[0]!r} in store {self.path.parent}") from None
            raise

    def existing_ids(self, ids: Sequence[str]) -> list[str]:
        """Those of ``ids`` the table holds, in the order given."""
        found: set[str] = set()
        with self.lock:
            for lo in range(0, len(ids), _IN_CHUNK):
                part = list(ids[lo: lo + _IN_CHUNK])
                sql = f"SELECT id FROM maus WHERE id IN ({', '.join('?' * len(part))})"
                found.update(r[0] for r in self.conn.execute(sql, part))
        return [i for i in ids if i in found]

    # ----------------------------------------------------------------- reads
    def has_table(self, name: str) -> bool:
        with self.lock:
            return self.conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone() is not None

    def scope_count(self) -> int:
        with self.lock:
            return self.conn.execute("SELECT COUNT(*) FROM mau_scope").fetchone()[0]

    def archived_positions(self) -> list[int]:
        with self.lock:
            return [r[0] - 1 for r in self.conn.execute("SELECT seq FROM mau_scope WHERE archived = 1")]

    def sparse_todo(self) -> list[int]:
        with self.lock:
            return [r[0] - 1 for r in self.conn.execute("SELECT seq FROM sparse_todo")]

    def read_all(self, dim: int) -> list[MAU]:
        """Every record with its embedding, in position order (a small store's open)."""
        with self.lock:
            rows = self.conn.execute("SELECT id, record, embedding FROM maus ORDER BY seq").fetchall()
        out = []
        for mid, record, blob in rows:
            try:
                m = mau_from_json(record)
            except (json.JSONDecodeError, KeyError, ValueError) as exc:
                raise StoreCorruptError(f"corrupt MAU record {mid!r} in {self.path}: {exc}") from exc
            vec = np.frombuffer(blob, dtype=np.float32)
            if vec.shape[0] != dim:
                raise StoreCorruptError(f"MAU {mid!r} in {self.path} has a {vec.shape[0]}-d embedding, store is {dim}-d")
            m.embedding = vec
            out.append(m)
        return out

    def embeddings(self, start: int, stop: int, dim: int, chunk: int = 20_000) -> Iterator[tuple[int, np.ndarray]]:
        """(first position, vectors) chunks of the embeddings at positions start..stop-1."""
        for lo in range(start, stop, chunk):
            with self.lock:
                blobs = self.conn.execute("SELECT embedding FROM maus WHERE seq > ? AND seq <= ? ORDER BY seq",
                                          (lo, min(lo + chunk, stop))).fetchall()
            vecs = np.frombuffer(b"".join(b[0] for b in blobs), dtype=np.float32)
            if vecs.size != len(blobs) * dim:
                raise StoreCorruptError(f"{self.path}: an embedding is not {dim}-d")
            yield lo, vecs.reshape(len(blobs), dim)

    def scope_positions(self, scope: Scope, count: int) -> np.ndarray:
        """Positions (< ``count``) of the MAUs inside ``scope``: an indexed query on the scope table."""
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
        with self.lock:
            if self.conn.execute("SELECT COUNT(*) FROM mau_scope").fetchone()[0] < count:
                raise StoreError(f"store {self.path.parent} predates scoped queries: open it read-write once to index its scopes")
            found = np.fromiter((r[0] for r in self.conn.execute(sql, args)), dtype=np.int64)
        return found[found < count]

    def last_in_sessions(self) -> dict[str, str]:
        """Session id -> id of its last MAU."""
        with self.lock:
            rows = self.conn.execute(
                "SELECT s.session, m.id FROM (SELECT session, MAX(seq) AS seq FROM mau_scope "
                "WHERE session IS NOT NULL GROUP BY session) s JOIN maus m ON m.seq = s.seq").fetchall()
        return dict(rows)
