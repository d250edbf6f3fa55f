"""A store's derived indexes: what they index, loading them, and catching them up from the hot tier.

Index files are derived data, written atomically; on open they catch up from the hot tier:
the rows they lack are added (a stale index costs the lag, not a rebuild), and a missing or
damaged one is rebuilt. That is what makes every state a killed process can leave behind
openable.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any, Sequence

from memsys.config import IndexConfig
from memsys.index.dense import DenseIndex
from memsys.index.scope import ScopeFields, scope_fields
from memsys.index.tantivy_bm25 import IndexedText, TantivyIndex
from memsys.index.text import LEGACY_INDEX_TEXT, index_text
from memsys.records import MAU
from memsys.store.hot import HotTier

log = logging.getLogger(__name__)

DENSE = "dense.faiss"
SPARSE = "sparse.json"  # written by stores before issue #16; ignored now
TANTIVY = "sparse.tantivy"
CATCH_UP_CHUNK = 20_000  # rows read from the hot tier per step of a catch-up


def sparse_text(m: MAU, fields: str, index_fields: str = LEGACY_INDEX_TEXT) -> str:
    """What BM25 indexes for a MAU: its summary, and optionally the detail text, headed by the
    speaker (and date) when ``index_fields`` asks (memsys.index.text)."""
    if fields == "summary":
        body = m.summary
    else:
        full = m.full_text
        body = m.summary if full == m.summary else f"{m.summary}\n{full}"
    return index_text(m, index_fields, body)  # the legacy "text" is the body (and any neighbour context)


def indexed_text(pos: int, m: MAU, fields: tuple[str, str], f: ScopeFields | None = None) -> IndexedText:
    """The durable BM25 index's document for the MAU at ``pos``: its text and scope fields."""
    f = f or scope_fields(m)
    return IndexedText(pos, sparse_text(m, *fields), f.user, f.conversation, f.ts)


# ----------------------------------------------------------------- dense
def load_dense(folder: Path, manifest: dict[str, Any], hot: HotTier, count: int, dim: int,
               cfg: IndexConfig) -> tuple[DenseIndex, int]:
    """The dense snapshot if it is readable and a prefix of the hot tier, then the rows it lacks;
    returns the index and how many of its vectors the snapshot held."""
    info = manifest.get("indices", {}).get("dense")
    fpath = folder / DENSE
    dense = DenseIndex(dim, cfg)
    if info and fpath.exists() and 0 < int(info.get("count", -1)) <= count:
        try:
            loaded = DenseIndex.read(fpath, dim, cfg)
            if len(loaded) == info["count"]:
                dense = loaded
            else:
                log.warning("dense index %s holds %d vectors, manifest says %s; rebuilding", fpath, len(loaded), info["count"])
        except Exception as exc:  # a damaged snapshot is rebuilt, not fatal
            log.warning("dense index %s unreadable (%s); rebuilding from hot tier", fpath, exc)
    elif count:
        log.info("dense index stale or missing (%s); rebuilding from hot tier", fpath)
    saved = len(dense)
    for _, vecs in hot.embeddings(saved, count, dim, CATCH_UP_CHUNK):
        dense.add(vecs)
    return dense, saved


def write_dense(folder: Path, dense: DenseIndex) -> int:
    """Write the dense index beside its final name, fsync, rename it in; returns its size in bytes."""
    tmp = folder / f".{DENSE}.tmp"
    dense.write(tmp)
    with open(tmp, "rb+") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, folder / DENSE)
    return (folder / DENSE).stat().st_size


# ----------------------------------------------------------------- sparse
def open_tantivy(folder: Path, hot: HotTier, maus: Sequence[MAU], own_text: tuple[str, str],
                 read_only: bool) -> TantivyIndex | None:
    """Open the durable BM25 index and add what it lacks (rows after its last commit, and rows
    whose text changed in a batch it did not commit). A damaged index is rebuilt. Read-only,
    a missing or lagging index gives None: the in-memory BM25 answers instead."""
    tpath = folder / TANTIVY
    if read_only and not tpath.exists():
        return None
    try:
        index = TantivyIndex(tpath, writable=not read_only)
    except (ValueError, OSError) as exc:
        if read_only:
            log.warning("sparse index %s unreadable (%s); using the in-memory BM25", tpath, exc)
            return None
        log.warning("sparse index %s unreadable (%s); rebuilding from hot tier", tpath, exc)
        shutil.rmtree(tpath, ignore_errors=True)
        index = TantivyIndex(tpath)
    start = index.indexed_upto()
    if read_only:
        if len(maus) > start:  # cannot write here: the in-memory BM25 answers until a read-write open catches up
            log.warning("sparse index %s lags %d MAUs; read-only, so the in-memory BM25 answers", tpath, len(maus) - start)
            return None
        return index
    todo = hot.sparse_todo()
    if todo:
        index.delete(todo, commit=False)
    index.add([indexed_text(p, maus[p], own_text) for p in todo if p < start], commit=False)
    for lo in range(start, len(maus), CATCH_UP_CHUNK):
        batch = maus[lo: lo + CATCH_UP_CHUNK]
        index.add([indexed_text(lo + i, m, own_text) for i, m in enumerate(batch)], commit=False)
    index.commit()
    if todo:
        hot.transaction([("DELETE FROM sparse_todo", [()])])
    return index
