"""Caches the evaluated code may read but never write, and the trusted merge that grows them.

A sandbox gets its own empty, writable cache folder per evaluation; the shared caches are
offered read-only, and only what the trusted side verifies here is ever shared:
- **built stores** are shared only with later evaluations of byte-identical code: they live
  under a namespace that is the hash of the evaluated tree's ``memsys/`` as the trusted side
  reads it, so an artifact is only ever reused by the exact code that produced it. Presets
  (data, not code) may differ: that code's own store key includes the ingestion config, so a
  config-only experiment (most of them) reuses the stores its retrieval change cannot affect.
  Whatever the code does with its cache, it can only ever feed itself; the held-out
  confirmation reads a cache set of its own;
- **embeddings** are recomputed here with the trusted embedder; a vector is shared only when
  it matches (cosine >= ``min_cosine``) and its key is the hash of its own model and text,
  so a sandbox cannot plant a wrong vector for a text later evaluations will embed;
- LLM replies are never written by a sandbox at all: the host-side gateway caches them.
Files the sandbox wrote are opened without following symlinks and only when they are
regular files under a size cap.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sqlite3
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from harness.surface import MUTABLE_SURFACE

log = logging.getLogger(__name__)

SHARED_DIR = "sandbox-shared"
#: held-out (test split) evaluations share among themselves only: no test text reaches a dev sandbox
HELDOUT_DIR = "sandbox-heldout"
EMBEDDINGS_FILE = "embeddings.sqlite"


@dataclass
class MergeReport:
    stores_merged: int = 0
    stores_refused: int = 0
    embeddings_merged: int = 0
    embeddings_refused: int = 0
    embeddings_skipped: int = 0  # over the cap or of another model: not shared, not an attack
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


#: the code whose bytes name a store namespace (the rest of the surface is configuration)
CODE_PREFIXES: tuple[str, ...] = tuple(p for p in MUTABLE_SURFACE if not p.startswith("configs/"))


def code_namespace(root: Path, surface: Iterable[str] = CODE_PREFIXES) -> str:
    """sha256 over every file under ``surface`` in ``root`` (paths and bytes), read by the trusted side."""
    h = hashlib.sha256()
    for prefix in surface:
        base = root / prefix.rstrip("/")
        files = sorted(p for p in base.rglob("*") if "__pycache__" not in p.parts) if base.is_dir() else []
        for f in files:
            st = os.lstat(f)
            if stat.S_ISREG(st.st_mode):
                h.update(str(f.relative_to(root)).encode() + b"\0")
                h.update(f.read_bytes())
            elif stat.S_ISLNK(st.st_mode):
                h.update(b"link:" + str(f.relative_to(root)).encode() + os.readlink(f).encode())
    return h.hexdigest()[:32]


def _plain_tree(path: Path, max_bytes: int) -> bool:
    """A directory holding only directories and regular files, at most ``max_bytes`` in all."""
    total = 0
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        return False
    for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                return False
            total += st.st_size if stat.S_ISREG(st.st_mode) else 0
            if total > max_bytes:
                return False
    return True


class SharedCache:
    """The host's shared caches for sandboxes: ``<cache_dir>/sandbox-shared/`` (``sandbox-heldout/`` for
    held-out evaluations)."""

    def __init__(self, cache_root: Path, *, name: str = SHARED_DIR, min_cosine: float = 0.999,
                 max_verify: int = 50_000, max_store_bytes: int = 4 << 30, embedder: object | None = None,
                 share_embeddings: bool = True):
        self.root = Path(cache_root) / name
        self.share_embeddings = share_embeddings
        self.min_cosine = min_cosine
        self.max_verify = max_verify
        self.max_store_bytes = max_store_bytes
        self._embedder = embedder

    @classmethod
    def for_split(cls, cache_root: Path, split: str, **kw: Any) -> "SharedCache":
        """Dev evaluations share with each other; any other split (test, all) only with held-out ones,
        and only built stores. Verifying a vector costs as much as computing it, and a held-out
        evaluation runs once or twice per run (baseline, best): sharing its embeddings would add
        minutes to the end of every run (11,297 vectors, ~3 min on 2 cores, in a quickstart) to save
        a few seconds in a later one, whose stores come from the store cache anyway."""
        if split == "dev":
            return cls(cache_root, **kw)
        return cls(cache_root, name=HELDOUT_DIR, share_embeddings=False, **kw)

    # ---------------------------------------------------------------- what the sandbox reads
    def stores_dir(self, namespace: str) -> Path:
        d = self.root / "stores" / namespace
        d.mkdir(parents=True, exist_ok=True)
        return d

    def embeddings_dir(self) -> Path:
        d = self.root / "embeddings"
        d.mkdir(parents=True, exist_ok=True)
        return d

    @property
    def embeddings_path(self) -> Path:
        return self.embeddings_dir() / EMBEDDINGS_FILE

    # ---------------------------------------------------------------- the trusted merge
    def merge(self, sandbox_cache: Path, namespace: str) -> MergeReport:
        report = MergeReport()
        notes: list[str] = []
        try:
            self._merge_stores(sandbox_cache / "stores", namespace, report, notes)
            if self.share_embeddings:
                self._merge_embeddings(sandbox_cache / EMBEDDINGS_FILE, report, notes)
        except (OSError, sqlite3.DatabaseError) as exc:  # a broken cache is not worth an evaluation
            notes.append(f"cache merge stopped: {type(exc).__name__}: {exc}")
        report.notes = tuple(notes)
        for n in notes:
            log.warning("%s", n)
        return report

    def _merge_stores(self, src: Path, namespace: str, report: MergeReport, notes: list[str]) -> None:
        if not src.exists() or not stat.S_ISDIR(os.lstat(src).st_mode):
            return
        dest_root = self.stores_dir(namespace)
        for entry in sorted(os.listdir(src)):
            path = src / entry
            if entry.startswith(".") or not (path / "manifest.json").exists():
                continue  # an unfinished build
            if not _plain_tree(path, self.max_store_bytes):
                report.stores_refused += 1
                notes.append(f"store {entry}: refused (links, special files or over {self.max_store_bytes} bytes)")
                continue
            dest = dest_root / entry
            if dest.exists():
                continue
            tmp = dest_root / f".{entry}.incoming"
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(path, tmp, symlinks=True)
            os.replace(tmp, dest)
            report.stores_merged += 1

    def _embedder_for(self, model: str) -> object | None:
        from memsys.config import EmbedderConfig
        from memsys.embed import make_embedder

        if self._embedder is None:
            cfg = EmbedderConfig()
            self._embedder = make_embedder(EmbedderConfig(**{**cfg.__dict__, "cache": False}))
        return self._embedder if getattr(self._embedder, "name", None) == model else None

    def _merge_embeddings(self, src: Path, report: MergeReport, notes: list[str]) -> None:
        try:
            st = os.lstat(src)
        except FileNotFoundError:
            return
        if not stat.S_ISREG(st.st_mode) or st.st_size > (2 << 30):
            notes.append("embeddings: refused (not a regular file, or over 2 GiB)")
            return
        conn = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
        try:
            conn.execute("PRAGMA trusted_schema=OFF")
            rows = conn.execute("SELECT emb_text.key, emb_text.model, emb_text.text, emb.vec FROM emb_text "
                                "JOIN emb ON emb.key = emb_text.key").fetchall()
        except sqlite3.DatabaseError:
            rows = []
        finally:
            conn.close()
        shared = self._open_shared()
        try:
            have = {k for (k,) in shared.execute("SELECT key FROM emb")}
            todo: dict[str, list[tuple[str, str, np.ndarray]]] = {}
            for key, model, text, blob in rows:
                if not (isinstance(key, str) and isinstance(model, str) and isinstance(text, str)
                        and isinstance(blob, bytes)) or key in have:
                    continue
                if hashlib.sha256(f"{model}\x00{text}".encode()).hexdigest() != key:
                    report.embeddings_refused += 1
                    continue
                todo.setdefault(model, []).append((key, text, np.frombuffer(blob, dtype=np.float32)))
            for model, items in todo.items():
                emb = self._embedder_for(model)
                if emb is None:
                    report.embeddings_skipped += len(items)
                    continue
                if len(items) > self.max_verify:
                    report.embeddings_skipped += len(items) - self.max_verify
                    items = items[: self.max_verify]
                fresh = emb.embed([t for _, t, _ in items])  # type: ignore[attr-defined]
                good = []
                for (key, _, claimed), vec in zip(items, fresh):
                    if claimed.shape == vec.shape and float(np.dot(claimed, vec)) >= self.min_cosine:
                        good.append((key, vec.astype(np.float32).tobytes()))
                    else:
                        report.embeddings_refused += 1
                shared.execute("BEGIN")
                shared.executemany("INSERT OR IGNORE INTO emb VALUES (?, ?)", good)
                shared.execute("COMMIT")
                report.embeddings_merged += len(good)
        finally:
            shared.close()
        if report.embeddings_refused:
            notes.append(f"embeddings: {report.embeddings_refused} vectors did not match a trusted recomputation "
                         "and were not shared")

    def _open_shared(self) -> sqlite3.Connection:
        """The shared file in rollback-journal mode, so a sandbox can open it immutable and read-only."""
        conn = sqlite3.connect(self.embeddings_path, timeout=30, isolation_level=None)
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("CREATE TABLE IF NOT EXISTS emb (key TEXT PRIMARY KEY, vec BLOB NOT NULL)")
        return conn
