"""The knowledge graph's tables in the store's hot tier (``hot.sqlite``).

    kg_meta         key/value: format version, extractor, build time, counts
    kg_entities     id, name (canonical), type, confidence
    kg_aliases      entity_id, alias (surface form as written), norm (normalize_name)
    kg_relations    seq, src, dst, type, confidence, mau_id
    kg_mentions     entity_id, mau_id, seq (order of the MAU in the entity's list)
    kg_extractions  mau_id, extractor, payload (Extraction JSON): what was extracted per
                    MAU, so a rebuild only extracts MAUs added since (incremental) and
                    entity resolution can rerun over everything without an LLM

The resolved tables are rewritten as a whole in one transaction (``write_graph``);
extractions are appended per batch in their own transactions, so a killed build
keeps every finished batch. The store's connection is in autocommit mode
(``isolation_level=None``): transactions here are explicit.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Iterable, Iterator, Sequence

from memsys.errors import StoreCorruptError, StoreError
from memsys.graph.schema import Entity, Extraction, Relation, normalize_name

KG_FORMAT = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kg_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS kg_entities (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, type TEXT NOT NULL, confidence REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS kg_aliases (
    entity_id TEXT NOT NULL, alias TEXT NOT NULL, norm TEXT NOT NULL, PRIMARY KEY (entity_id, alias)
);
CREATE TABLE IF NOT EXISTS kg_relations (
    seq INTEGER PRIMARY KEY, src TEXT NOT NULL, dst TEXT NOT NULL, type TEXT NOT NULL,
    confidence REAL NOT NULL, mau_id TEXT
);
CREATE TABLE IF NOT EXISTS kg_mentions (
    entity_id TEXT NOT NULL, mau_id TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (entity_id, mau_id)
);
CREATE INDEX IF NOT EXISTS kg_mentions_mau ON kg_mentions (mau_id);
CREATE TABLE IF NOT EXISTS kg_extractions (
    mau_id TEXT PRIMARY KEY, extractor TEXT NOT NULL, payload TEXT NOT NULL
);
"""

_FALLBACK_LOCK = threading.Lock()


def store_connection(store: Any) -> tuple[sqlite3.Connection, Any]:
    """The store's hot-tier connection and the lock that serializes its transactions.

    The connection is shared with ``MemoryStore.add``/``update``; two transactions on one
    SQLite connection must not interleave, so graph writes take the store's own write
    lock (``write_lock`` if the store exposes one, else its ``_write_lock``).
    """
    lock = getattr(store, "write_lock", None) or getattr(store, "_write_lock", None) or _FALLBACK_LOCK
    return store.hot_connection(), lock


@contextmanager
def transaction(conn: sqlite3.Connection, lock: Any, what: str) -> Iterator[sqlite3.Connection]:
    with lock:
        try:
            conn.execute("BEGIN IMMEDIATE")
            yield conn
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise StoreError(f"cannot write knowledge graph ({what}): {exc}") from exc
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise


def ensure_schema(conn: sqlite3.Connection, lock: Any) -> None:
    with lock:
        conn.executescript(_SCHEMA)


def has_graph(conn: sqlite3.Connection) -> bool:
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='kg_meta'").fetchone()
    if row is None:
        return False
    return conn.execute("SELECT 1 FROM kg_meta WHERE key='format'").fetchone() is not None


def write_graph(conn: sqlite3.Connection, lock: Any, entities: Sequence[Entity], relations: Sequence[Relation],
                meta: dict[str, Any]) -> None:
    """Replace the resolved graph atomically."""
    ensure_schema(conn, lock)
    with transaction(conn, lock, "save graph") as c:
        for table in ("kg_entities", "kg_aliases", "kg_relations", "kg_mentions", "kg_meta"):
            c.execute(f"DELETE FROM {table}")
        c.executemany("INSERT INTO kg_entities VALUES (?, ?, ?, ?)",
                      [(e.id, e.name, e.type, float(e.confidence)) for e in entities])
        c.executemany("INSERT OR IGNORE INTO kg_aliases VALUES (?, ?, ?)",
                      [(e.id, a, normalize_name(a)) for e in entities for a in e.aliases])
        c.executemany("INSERT INTO kg_relations (src, dst, type, confidence, mau_id) VALUES (?, ?, ?, ?, ?)",
                      [(r.src, r.dst, r.type, float(r.confidence), r.mau_id) for r in relations])
        c.executemany("INSERT OR IGNORE INTO kg_mentions VALUES (?, ?, ?)",
                      [(e.id, m, i) for e in entities for i, m in enumerate(e.mau_ids)])
        full = {**meta, "format": KG_FORMAT, "saved": datetime.now(timezone.utc).isoformat(),
                "entities": len(entities), "relations": len(relations)}
        c.executemany("INSERT INTO kg_meta VALUES (?, ?)", [(k, json.dumps(v)) for k, v in full.items()])


def read_graph(conn: sqlite3.Connection, where: str) -> tuple[list[Entity], list[Relation], dict[str, Any]] | None:
    """The saved graph, or None when the store has none."""
    if not has_graph(conn):
        return None
    try:
        meta = {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM kg_meta")}
        if meta.get("format") != KG_FORMAT:
            raise StoreCorruptError(f"{where}: knowledge graph format {meta.get('format')!r}, expected {KG_FORMAT}; rebuild it")
        entities = {eid: Entity(eid, name, type_, confidence=conf) for eid, name, type_, conf in
                    conn.execute("SELECT id, name, type, confidence FROM kg_entities")}
        for eid, alias in conn.execute("SELECT entity_id, alias FROM kg_aliases ORDER BY rowid"):
            entities[eid].aliases.append(alias)
        for eid, mau in conn.execute("SELECT entity_id, mau_id FROM kg_mentions ORDER BY entity_id, seq"):
            entities[eid].mau_ids.append(mau)
        relations = [Relation(s, d, t, c, m) for s, d, t, c, m in
                     conn.execute("SELECT src, dst, type, confidence, mau_id FROM kg_relations ORDER BY seq")]
    except (sqlite3.DatabaseError, KeyError, json.JSONDecodeError) as exc:
        raise StoreCorruptError(f"{where}: unreadable knowledge graph tables ({exc})") from exc
    return list(entities.values()), relations, meta


def write_extractions(conn: sqlite3.Connection, lock: Any, extractor: str, extractions: Iterable[Extraction]) -> None:
    rows = [(e.mau_id, extractor, json.dumps(e.to_json(), ensure_ascii=False)) for e in extractions]
    if not rows:
        return
    ensure_schema(conn, lock)
    with transaction(conn, lock, "save extractions") as c:
        c.executemany("INSERT OR REPLACE INTO kg_extractions VALUES (?, ?, ?)", rows)


def read_extractions(conn: sqlite3.Connection, where: str) -> dict[str, tuple[str, Extraction]]:
    """mau_id -> (extractor name, extraction) for every MAU extracted so far."""
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='kg_extractions'").fetchone()
    if row is None:
        return {}
    out = {}
    try:
        for mau_id, extractor, payload in conn.execute("SELECT mau_id, extractor, payload FROM kg_extractions"):
            out[mau_id] = (extractor, Extraction.from_json(mau_id, json.loads(payload)))
    except (sqlite3.DatabaseError, json.JSONDecodeError, ValueError, TypeError) as exc:
        raise StoreCorruptError(f"{where}: unreadable kg_extractions row ({exc})") from exc
    return out
