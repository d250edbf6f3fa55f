"""Opening a store's files: the manifest (checked) and a read-only connection to the hot tier."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from memsys.config import IndexConfig
from memsys.errors import StoreCorruptError, StoreError, StoreVersionError

STORE_FORMAT = "memsys-store"
STORE_VERSION = 1
MANIFEST = "manifest.json"


def read_manifest(path: Path) -> dict[str, Any]:
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
    index = manifest.get("index")
    if index is not None and (not isinstance(index, dict) or set(index) - set(IndexConfig.__dataclass_fields__)):
        raise StoreCorruptError(f"{mpath} has an unknown index section {index!r}")
    return manifest


def connect_read_only(hot: Path) -> sqlite3.Connection:
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
