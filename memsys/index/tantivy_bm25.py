"""Incremental, durable BM25: a tantivy index on disk next to the hot tier.

Why tantivy: measured against SQLite FTS5's bm25 and segmented bm25s on the lifelong
haystack (docs/results.md, "Lifelong scale"), it answers in well under a millisecond at
1M documents where FTS5 needs tens to hundreds, takes additions as new segments (no
rebuild), and its commits are atomic (a killed writer leaves the last commit intact).

Documents carry their store position and the scope fields (user, conversation, time),
so a scoped query filters inside tantivy's query (a zero-score required clause), never
after it. Text is indexed as our own tokens (memsys.index.sparse.tokenize), the same
tokens the in-memory exact BM25 sees, so the two rank alike.

Added documents may wait for a later commit (``add(..., commit=False)``): any read
(``search``, ``indexed_upto``, ``len``) commits them first, so a query always sees every
document added before it. A commit costs ~25 ms of CPU and an fsync whatever its size,
so a growing store commits every ``index.sparse_commit_every`` MAUs instead of every batch;
what a killed writer had not committed is re-added from the hot tier on the next open.
"""

from __future__ import annotations

import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import tantivy

from memsys.index.scope import Scope
from memsys.index.sparse import SparseIndex, tokenize

_HEAP_BYTES = 64_000_000
_NO_TIME = -(2**62)  # ts of MAUs without a timestamp: outside every time range


@dataclass(frozen=True, slots=True)
class IndexedText:
    """One document: a store position, its BM25 text and its scope fields."""

    position: int
    text: str
    user: str | None = None
    conversation: str | None = None
    ts: int | None = None  # microseconds since the epoch (memsys.index.scope.micros)


def _schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("body", stored=False, tokenizer_name="whitespace", index_option="freq")
    sb.add_unsigned_field("pos", stored=True, indexed=True, fast=True)
    sb.add_text_field("user", stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("conversation", stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_integer_field("ts", stored=False, indexed=True, fast=True)
    return sb.build()


class TantivyIndex(SparseIndex):
    """BM25 (k1 1.2, b 0.75, tantivy's fixed values) over store positions. ``path=None``: in RAM."""

    name = "tantivy"

    def __init__(self, path: Path | None = None, *, writable: bool = True):
        self.path = path
        self._schema = _schema()
        if path is not None:
            path.mkdir(parents=True, exist_ok=True)
            self._index = tantivy.Index(self._schema, path=str(path), reuse=True)
        else:
            self._index = tantivy.Index(self._schema)
        self._writer = self._index.writer(heap_size=_HEAP_BYTES, num_threads=1) if writable else None
        self._lock = threading.Lock()
        self._write_lock = threading.RLock()  # the writer is used by one thread at a time
        self._pending = 0  # documents added or deleted since the last commit
        self._index.reload()
        self._searcher = self._index.searcher()
        self._n = self._searcher.num_docs

    # ----------------------------------------------------------------- writes
    def build(self, texts: Sequence[str]) -> None:
        """Full rebuild (the SparseIndex interface): positions are the texts' indices."""
        self._require_writer().delete_all_documents()
        self.add([IndexedText(i, t) for i, t in enumerate(texts)])

    def add(self, docs: Sequence[IndexedText], *, commit: bool = True) -> None:
        """Add documents; ``commit=False`` leaves them for a later commit (the next read at the latest)."""
        with self._write_lock:
            writer = self._require_writer()
            for d in docs:
                doc = tantivy.Document()
                doc.add_text("body", " ".join(tokenize(d.text)))
                doc.add_unsigned("pos", d.position)
                if d.user is not None:
                    doc.add_text("user", d.user)
                if d.conversation is not None:
                    doc.add_text("conversation", d.conversation)
                doc.add_integer("ts", d.ts if d.ts is not None else _NO_TIME)
                writer.add_document(doc)
            self._pending += len(docs)
            if commit:
                self.commit()

    def delete(self, positions: Sequence[int], *, commit: bool = True) -> None:
        with self._write_lock:
            writer = self._require_writer()
            if len(positions):
                # a query built against the schema: delete_documents_by_term("pos", int) makes an i64
                # term, which never matches this u64 field (updates used to leave the old document)
                writer.delete_documents_by_query(
                    tantivy.Query.term_set_query(self._schema, "pos", [int(p) for p in positions]))
            self._pending += len(positions)
            if commit:
                self.commit()

    @property
    def pending(self) -> int:
        """Documents added or deleted since the last commit."""
        return self._pending

    def commit(self) -> None:
        """Make the added documents durable and searchable (one atomic tantivy commit)."""
        with self._write_lock:
            self._require_writer().commit()
            self._pending = 0
            self._index.reload()
            with self._lock:
                self._searcher = self._index.searcher()
                self._n = self._searcher.num_docs

    def flush(self) -> None:
        """Commit what was added or deleted since the last commit, if anything."""
        self._fresh()

    def _fresh(self) -> tantivy.Searcher:
        """The searcher, after committing what was added since the last commit."""
        if self._pending:
            with self._write_lock:
                if self._pending:
                    self.commit()
        return self._searcher

    def __len__(self) -> int:
        self._fresh()
        return self._n

    def _require_writer(self) -> tantivy.IndexWriter:
        if self._writer is None:
            raise RuntimeError("this tantivy index was opened read-only")
        return self._writer

    def close(self) -> None:
        with self._write_lock:
            if self._writer is not None:
                if self._pending:
                    self.commit()
                self._writer.wait_merging_threads()  # releases the writer lock
                self._writer = None

    def indexed_upto(self) -> int:
        """One past the highest position indexed: where catching up from the hot tier starts."""
        searcher = self._fresh()
        if self._n == 0:
            return 0
        hits = searcher.search(tantivy.Query.all_query(), 1, count=False, order_by_field="pos").hits
        return int(hits[0][0]) + 1 if hits else 0

    # ----------------------------------------------------------------- reads
    def search(self, query: str, k: int, scope: Scope | None = None) -> list[tuple[int, float]]:
        """Top-k positions with BM25 score > 0, best first; only inside ``scope`` when given."""
        terms = tokenize(query)
        searcher = self._fresh()
        if not terms or k <= 0 or self._n == 0:
            return []
        q = tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, tantivy.Query.term_query(self._schema, "body", t)) for t in terms]
        )
        filters = self._scope_filters(scope)
        if filters:
            q = tantivy.Query.boolean_query(
                [(tantivy.Occur.Must, q)]
                + [(tantivy.Occur.Must, tantivy.Query.const_score_query(f, 0.0)) for f in filters]
            )
        limit = k + 8
        while True:  # fetch past the cut until the k-th score's ties are all in: deterministic ties
            hits = searcher.search(q, limit, count=False).hits
            exhausted = len(hits) < limit
            if exhausted or hits[-1][0] < hits[k - 1][0]:
                break
            limit *= 4
        out = [(int(searcher.doc(addr)["pos"][0]), float(score)) for score, addr in hits]
        return sorted((h for h in out if h[1] > 0), key=lambda h: (-h[1], h[0]))[:k]

    def _scope_filters(self, scope: Scope | None) -> list[tantivy.Query]:
        if scope is None:
            return []
        out = []
        if scope.user is not None:
            out.append(tantivy.Query.term_query(self._schema, "user", scope.user))
        if scope.conversation is not None:
            out.append(tantivy.Query.term_query(self._schema, "conversation", scope.conversation))
        lo, hi = scope.bounds()
        if lo is not None or hi is not None:  # both bounds set: MAUs without a time stay out
            lo = _NO_TIME + 1 if lo is None else lo
            hi = -_NO_TIME if hi is None else hi
            out.append(tantivy.Query.range_query(
                self._schema, "ts", tantivy.FieldType.Integer,
                lo, hi))
        return out


def remove_index(path: Path) -> None:
    """Drop a damaged index folder (derived data: it is rebuilt from the hot tier)."""
    shutil.rmtree(path, ignore_errors=True)
