"""Persistent response cache for LLM calls (SQLite).

Why: benchmark reruns and research-loop experiments ask the same questions of the
same model over and over; with temperature 0 and a seed the answer is a function of
the request, so replaying it costs nothing and makes reruns reproducible. The key
is the sha256 of the canonical JSON of everything that shapes the reply (model,
messages, response_format, temperature, max_tokens, seed) and nothing that does
not (base_url, API key, timeouts), so the same model reached by another URL hits.

Only successful replies are stored (the client decides). The database runs in WAL
mode so several processes can read while one writes; a writer that stays locked
past ``busy_timeout_s`` becomes a :class:`CacheError`. A corrupt file is never
silently deleted: it is renamed to ``<file>.corrupt-<timestamp>`` with a warning
and an empty cache starts in its place (or, with ``on_corrupt="raise"``, the error
is raised). One connection guarded by a lock serves all threads: a lookup takes
tens of microseconds, far below any contention that matters next to LLM latency.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.errors import CacheError, ConfigError
from harness.paths import cache_dir

#: bump when the key payload or the stored reply layout changes
KEY_VERSION = 1
DEFAULT_FILENAME = "llm_cache.sqlite"
_CORRUPT_CODES = {"SQLITE_CORRUPT", "SQLITE_NOTADB"}
_CORRUPT_PHRASES = ("file is not a database", "malformed", "not a database")
_BUSY_CODES = {"SQLITE_BUSY", "SQLITE_LOCKED"}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS replies (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    created_at REAL NOT NULL,
    reply TEXT NOT NULL
)
"""


def default_cache_path() -> Path:
    return cache_dir() / DEFAULT_FILENAME


def request_key(
    *,
    model: str,
    messages: Sequence[Mapping[str, Any]],
    response_format: Mapping[str, Any] | None,
    temperature: float,
    max_tokens: int,
    seed: int | None,
    logprobs: bool = False,
) -> str:
    """sha256 hex of the canonical JSON of the reply-shaping fields of a chat request. ``logprobs``
    joins the key only when asked for, so the keys of every reply cached before it existed still hold."""
    payload = {
        "v": KEY_VERSION,
        "model": model,
        "messages": list(messages),
        "response_format": response_format,
        "temperature": float(temperature),  # 0 and 0.0 must be one key
        "max_tokens": int(max_tokens),
        "seed": seed,
    }
    if logprobs:
        payload["logprobs"] = True
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class CacheStats:
    hits: int
    misses: int
    writes: int
    moved_aside: int


def _is_corrupt(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorname", "")
    return code in _CORRUPT_CODES or any(p in str(exc).lower() for p in _CORRUPT_PHRASES)


def _is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorname", "")
    return code in _BUSY_CODES or "locked" in str(exc).lower()


class ResponseCache:
    """SQLite-backed map from :func:`request_key` to a stored reply (a JSON object)."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        busy_timeout_s: float = 10.0,
        on_corrupt: str = "move_aside",
    ) -> None:
        if on_corrupt not in ("move_aside", "raise"):
            raise ConfigError(f"ResponseCache on_corrupt must be 'move_aside' or 'raise', got {on_corrupt!r}")
        self.path = Path(path) if path is not None else default_cache_path()
        self.busy_timeout_s = busy_timeout_s
        self.on_corrupt = on_corrupt
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._hits = self._misses = self._writes = self._moved = 0
        with self._lock:
            self._guarded(self._connect)

    # --- connection management ------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self.path, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute(_SCHEMA)
            conn.execute("SELECT count(*) FROM replies WHERE key = ''").fetchone()
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _move_aside(self, exc: sqlite3.Error) -> None:
        """Rename the corrupt file (and its WAL/SHM companions) so nothing is lost."""
        if self._conn is not None:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
            self._conn = None
        stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
        target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        for suffix in ("", "-wal", "-shm"):
            src = Path(str(self.path) + suffix)
            if src.exists():
                os.replace(src, Path(str(target) + suffix))
        self._moved += 1
        warnings.warn(
            f"LLM cache {self.path} is corrupt ({exc}); moved it to {target.name} and started an empty cache",
            RuntimeWarning,
            stacklevel=4,
        )

    def _guarded(self, op: Any, *args: Any) -> Any:
        """Run ``op`` under the lock, mapping SQLite failures to one-line CacheErrors.

        A corrupt file is moved aside once and the operation retried on a fresh file.
        """
        for attempt in (0, 1):
            try:
                return op(*args)
            except sqlite3.Error as exc:
                if _is_corrupt(exc):
                    if self.on_corrupt == "raise" or attempt == 1:
                        raise CacheError(f"LLM cache {self.path} is corrupt: {exc}") from exc
                    self._move_aside(exc)
                    continue
                if _is_busy(exc):
                    raise CacheError(
                        f"LLM cache {self.path} is locked by another writer (waited {self.busy_timeout_s:g} s): {exc}"
                    ) from exc
                raise CacheError(f"LLM cache {self.path}: {exc.__class__.__name__}: {exc}") from exc
        raise AssertionError("unreachable")

    # --- public API -----------------------------------------------------------
    def get(self, key: str) -> dict[str, Any] | None:
        """The stored reply for ``key``, or None."""

        def op() -> str | None:
            row = self._connect().execute("SELECT reply FROM replies WHERE key = ?", (key,)).fetchone()
            return None if row is None else row[0]

        with self._lock:
            raw = self._guarded(op)
            if raw is None:
                self._misses += 1
                return None
            self._hits += 1
        return json.loads(raw)

    def put(self, key: str, model: str, reply: Mapping[str, Any]) -> None:
        """Store a successful reply (last write wins; identical requests give identical replies)."""
        raw = json.dumps(dict(reply), ensure_ascii=False, separators=(",", ":"))

        def op() -> None:
            self._connect().execute(
                "INSERT OR REPLACE INTO replies (key, model, created_at, reply) VALUES (?, ?, ?, ?)",
                (key, model, time.time(), raw),
            )

        with self._lock:
            self._guarded(op)
            self._writes += 1

    def __len__(self) -> int:
        with self._lock:
            return int(self._guarded(lambda: self._connect().execute("SELECT count(*) FROM replies").fetchone()[0]))

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(hits=self._hits, misses=self._misses, writes=self._writes, moved_aside=self._moved)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> "ResponseCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.path)!r})"
