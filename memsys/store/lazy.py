"""Records of a large store, read from the hot tier on demand.

Why: parsing a million JSON records at open takes tens of seconds and gigabytes; a
query needs twenty. ``LazyMAUs`` behaves like the list of MAUs (index, slice, iterate,
reverse) and keeps recently read records in a bounded cache; ``LazyPositions`` maps
ids to positions through the hot tier's unique index. Position = ``seq - 1`` (the hot
tier appends without gaps: a rolled-back batch never consumes sequence numbers).
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from memsys.records import MAU
from memsys.store.codec import mau_from_json

_CHUNK = 2000


def decode_row(record: str, blob: bytes) -> MAU:
    m = mau_from_json(record)
    m.embedding = np.frombuffer(blob, dtype=np.float32)
    return m


class LazyMAUs(Sequence[MAU]):
    def __init__(self, conn: sqlite3.Connection, lock: threading.Lock, count: int, cache_size: int):
        self._conn, self._lock, self._n = conn, lock, count
        self._cache: OrderedDict[int, MAU] = OrderedDict()
        self._cache_size = max(1, cache_size)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            start, stop, step = index.indices(self._n)
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            return list(self._range(start, stop))
        i = index + self._n if index < 0 else index
        if not 0 <= i < self._n:
            raise IndexError(f"MAU position {index} out of range ({self._n})")
        with self._lock:
            m = self._cache.get(i)
            if m is not None:
                self._cache.move_to_end(i)
                return m
            row = self._conn.execute("SELECT record, embedding FROM maus WHERE seq = ?", (i + 1,)).fetchone()
        m = decode_row(*row)
        self._remember(i, m)
        return m

    def __iter__(self) -> Iterator[MAU]:
        return self._range(0, self._n)

    def _range(self, first: int, stop: int) -> Iterator[MAU]:
        """Positions first..stop-1 in order, read in chunks (cached records win: they may be newer)."""
        for start in range(first, stop, _CHUNK):
            with self._lock:
                rows = self._conn.execute(
                    "SELECT seq, record, embedding FROM maus WHERE seq > ? AND seq <= ? ORDER BY seq",
                    (start, min(start + _CHUNK, stop))).fetchall()
            for seq, record, blob in rows:
                yield self._cache.get(seq - 1) or decode_row(record, blob)

    def __reversed__(self) -> Iterator[MAU]:
        for i in range(self._n - 1, -1, -1):
            yield self[i]

    def _remember(self, i: int, m: MAU) -> None:
        with self._lock:
            self._cache[i] = m
            self._cache.move_to_end(i)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def append(self, m: MAU) -> None:
        """Called after the record was committed to the hot tier."""
        self._remember(self._n, m)
        self._n += 1

    def __setitem__(self, i: int, m: MAU) -> None:
        self._remember(i, m)


class LazyPositions(Mapping[str, int]):
    """MAU id -> position, answered by the hot tier (its ``id`` column is indexed)."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.Lock, maus: LazyMAUs):
        self._conn, self._lock, self._maus = conn, lock, maus

    def __getitem__(self, mau_id: str) -> int:
        with self._lock:
            row = self._conn.execute("SELECT seq FROM maus WHERE id = ?", (mau_id,)).fetchone()
        if row is None or row[0] > len(self._maus):
            raise KeyError(mau_id)
        return int(row[0]) - 1

    def __contains__(self, mau_id: object) -> bool:
        try:
            self[mau_id]  # type: ignore[index]
            return True
        except KeyError:
            return False

    def __len__(self) -> int:
        return len(self._maus)

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self._maus), _CHUNK):
            with self._lock:
                rows = self._conn.execute("SELECT id FROM maus WHERE seq > ? AND seq <= ? ORDER BY seq",
                                          (start, start + _CHUNK)).fetchall()
            yield from (r[0] for r in rows)

    def __setitem__(self, mau_id: str, pos: int) -> None:
        """Nothing to keep: the committed row already answers."""
