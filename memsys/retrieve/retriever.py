"""Hybrid retrieval over a store: dense + BM25, merge, graph augmentation, pyramid.

Read-only after construction, so one Retriever serves many threads (the index
searches and the cold-tier reads hold no shared mutable state).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np

from memsys.config import MemoryConfig
from memsys.embed import Embedder
from memsys.index.scope import Scope, in_scope, scope_fields
from memsys.index.sparse import SparseIndex, make_sparse_index
from memsys.records import MAU, Modality, Status
from memsys.retrieve.context import Context, MediaPart
from memsys.retrieve.facts import compact_facts
from memsys.retrieve.merge import MERGERS, needs
from memsys.retrieve.pyramid import RankedCandidate, RawContent, build_pyramid
from memsys.retrieve.rerank import expand_neighbors, fuse_graph, lift_dated, lift_speaker, speaker_first
from memsys.retrieve.support import SIGNALS
from memsys.store.store import MemoryStore
from memsys.tokens import count_tokens


class GraphAugmenter(Protocol):
    """What retrieval needs from the knowledge graph (memsys.graph implements it)."""

    def augment(self, query: str) -> tuple[list[tuple[str, float]], list[str]]:
        """MAU ids linked to high-scoring entities (with score), and fact lines for the reader."""


@dataclass
class Retrieval:
    query: str
    candidates: list[RankedCandidate]
    context: Context
    timings_ms: dict[str, float] = field(default_factory=dict)

    @property
    def items(self):
        return self.context.items


_MIME = {"image": "image/jpeg", "audio": "audio/wav", "video": "video/mp4"}


class Retriever:
    def __init__(self, store: MemoryStore, embedder: Embedder, cfg: MemoryConfig,
                 graph: GraphAugmenter | None = None):
        self.store, self.embedder, self.cfg, self.graph = store, embedder, cfg, graph
        rc = cfg.retrieval
        if rc.merge not in MERGERS:
            from memsys.errors import ConfigError

            raise ConfigError(f"unknown merge strategy '{rc.merge}' ({' | '.join(MERGERS)})")
        # the store is shared (threads, other retrievers): ask it for our index, never reconfigure it
        make_sparse_index(rc.sparse_backend)  # an unknown backend fails here, not at the first query
        self.speakers = {m.speaker for m in store.maus if m.speaker}

    def _sparse_key(self) -> tuple[str, str, str]:
        rc = self.cfg.retrieval
        return rc.sparse_backend, rc.sparse_fields, self.cfg.ingest.index_text.sparse

    def sparse_index(self) -> SparseIndex:
        """BM25 over each MAU's sparse index text: the store's own index when this retriever's setting is
        the one the store was built with (durable tantivy at scale), else one the store builds in memory
        and keeps per setting."""
        return self.store.sparse(*self._sparse_key())

    # ------------------------------------------------------------------ search
    def search(self, query: str, query_vec: np.ndarray | None = None,
               timings: dict[str, float] | None = None, scope: Scope | None = None) -> list[RankedCandidate]:
        """Merged candidates R(q), each with its dense similarity; only MAUs inside ``scope`` when given
        (filtered inside the index queries, so a narrow scope still gets its full depth)."""
        rc = self.cfg.retrieval
        scope = None if scope is None or scope.is_empty() else scope
        t = timings if timings is not None else {}
        want_dense, want_sparse = needs(rc.merge)
        t0 = time.perf_counter()
        if query_vec is None:
            query_vec = self.embedder.embed_one(query)
        t1 = time.perf_counter()
        t["embed"] = (t1 - t0) * 1e3
        active = self.store.active_mask(rc.include_archived)
        over = 1 if active is None or active.all() else 3  # over-fetch when some MAUs are archived
        dense = self.store.search_dense(query_vec, rc.dense_k * over, scope) if want_dense else []
        t2 = time.perf_counter()
        sparse = self.store.search_sparse(query, rc.sparse_k * over, scope, self._sparse_key()) if want_sparse else []
        t3 = time.perf_counter()
        if active is not None:
            dense = [h for h in dense if active[h[0]]][: rc.dense_k]
            sparse = [h for h in sparse if active[h[0]]][: rc.sparse_k]
        merged = MERGERS[rc.merge](dense, sparse, rc.top_k, rrf_k=rc.rrf_k, alpha=rc.linear_alpha)
        positions = [c.position for c in merged]
        sims = self.store.similarity(query_vec, positions)
        out = [
            RankedCandidate(self.store.maus[c.position], float(sims[i]), c.sources, c.fused_score)
            for i, c in enumerate(merged)
        ]
        if rc.speaker_first:
            out = speaker_first(out, query, self.speakers)
        else:
            out = lift_speaker(out, query, self.speakers, rc.speaker_lift)
        out = lift_dated(out, query, rc.time_lift)
        t4 = time.perf_counter()
        t.update(dense=(t2 - t1) * 1e3, sparse=(t3 - t2) * 1e3, merge=(t4 - t3) * 1e3)
        return out

    def _graph(self, query: str, query_vec: np.ndarray, cands: list[RankedCandidate],
               timings: dict[str, float], scope: Scope | None = None) -> list[str]:
        if self.graph is None or not self.cfg.graph.enabled:
            return []
        t0 = time.perf_counter()
        linked, facts = self.graph.augment(query)
        gc = self.cfg.graph
        if gc.placement == "rrf":  # the graph's own list, hits already retrieved included, fused by rank
            ids = [mid for mid, _ in linked if mid in self.store.positions][: gc.max_maus]
        else:
            have = {c.mau.id for c in cands}
            ids = [mid for mid, _ in linked if mid not in have and mid in self.store.positions][: gc.max_maus]
        graph = []
        if scope is not None:
            ids = [mid for mid in ids if in_scope(scope_fields(self.store.get(mid)), scope)]
        if ids:
            sims = self.store.similarity(query_vec, [self.store.positions[m] for m in ids])
            graph = [RankedCandidate(self.store.get(mid), float(s), {"graph"}, 0.0)
                     for mid, s in zip(ids, sims) if self.store.get(mid).status != Status.ARCHIVED]
        if gc.placement == "rrf":
            cands[:] = fuse_graph(cands, graph, self.cfg.retrieval.rrf_k, 1.0)
        else:
            cands.extend(graph)
        timings["graph"] = (time.perf_counter() - t0) * 1e3
        return facts[: gc.max_facts]

    def _expand(self, query_vec: np.ndarray, cands: list[RankedCandidate],
                scope: Scope | None = None) -> list[RankedCandidate]:
        rc = self.cfg.retrieval

        def get(mid: str) -> MAU | None:
            pos = self.store.positions.get(mid)
            m = self.store.maus[pos] if pos is not None else None
            if m is None or (not rc.include_archived and m.status == Status.ARCHIVED):
                return None
            return m if scope is None or in_scope(scope_fields(m), scope) else None

        def sims(maus: list[MAU]) -> list[float]:
            return [float(s) for s in self.store.similarity(query_vec, [self.store.positions[m.id] for m in maus])]

        return expand_neighbors(cands, rc.expand_top, rc.expand_window, get, sims)

    # ------------------------------------------------------------------ retrieve
    def retrieve(self, query: str, *, budget_tokens: int | None = None,
                 query_vec: np.ndarray | None = None, scope: Scope | None = None) -> Retrieval:
        """Candidates, graph, expansion and the pyramid context; with ``scope``, nothing outside it
        reaches the context by any path (index hits, graph links or neighbouring turns)."""
        timings: dict[str, float] = {}
        scope = None if scope is None or scope.is_empty() else scope
        if query_vec is None:
            t0 = time.perf_counter()
            query_vec = self.embedder.embed_one(query)
            timings["embed"] = (time.perf_counter() - t0) * 1e3
            embed_ms = timings["embed"]
        else:
            embed_ms = 0.0
        cands = self.search(query, query_vec=query_vec, timings=timings, scope=scope)
        timings["embed"] = embed_ms
        facts = self._graph(query, query_vec, cands, timings, scope)
        cands = self._expand(query_vec, cands, scope)
        t0 = time.perf_counter()
        pcfg = self.cfg.pyramid
        if budget_tokens is not None:
            from dataclasses import replace

            pcfg = replace(pcfg, budget_tokens=budget_tokens)
        fact_tokens = count_tokens("\n".join(facts)) if facts and self.cfg.answer.include_graph_facts else 0
        if fact_tokens > pcfg.budget_tokens // 4:  # graph facts never crowd out the memories
            while facts and count_tokens("\n".join(facts)) > pcfg.budget_tokens // 4:
                facts.pop()
            fact_tokens = count_tokens("\n".join(facts)) if facts else 0
        ctx = build_pyramid(query, cands, pcfg, self.cfg.answer, count_tokens, self.load_raw,
                            reserved_tokens=fact_tokens)
        ctx.speakers = frozenset(self.speakers)
        if self.cfg.answer.include_graph_facts:
            if facts and self.cfg.answer.graph_facts_style == "compact":
                # the reservation above stays the line form's, so the memories chosen do not depend on
                # how the facts are written; the context's tokens are what the reader is shown
                fact_tokens = count_tokens("\n".join(compact_facts(facts)))
            ctx.graph_facts, ctx.graph_tokens = facts, fact_tokens
        timings["pyramid"] = (time.perf_counter() - t0) * 1e3
        if self.cfg.answer.abstains_by_margin():
            t0 = time.perf_counter()
            self._abstain(query, cands, ctx)
            timings["abstain"] = (time.perf_counter() - t0) * 1e3  # it embeds statements: a stage of its own
        return Retrieval(query, cands, ctx, timings)

    def _abstain(self, query: str, cands: list[RankedCandidate], ctx: Context) -> None:
        """Empty the context when the question's content belongs to another speaker (support.py): the
        reader is then not asked, and the scorer sees that no memory was given."""
        a = self.cfg.answer
        signal = SIGNALS[a.abstain_signal]
        margin = signal.margin(query, cands, self.speakers, self.embedder.embed)
        if margin is None or margin >= -a.abstain_margin:
            return
        reason = f"{signal.better_match} matches better by {-margin:.2f} > {a.abstain_margin}"
        if a.abstain == "and_confidence":  # the reader is asked; its confidence decides
            ctx.doubt = reason
            return
        ctx.abstain_reason = reason
        ctx.dropped += [(i.mau.id, "abstained: " + ctx.abstain_reason) for i in ctx.items]
        ctx.items, ctx.graph_facts, ctx.graph_tokens = [], [], 0

    def load_raw(self, mau: MAU) -> RawContent | None:
        """Level-3 content: raw text from the cold tier, or a media part with its token cost."""
        if not mau.pointer:
            return None
        if mau.modality == Modality.TEXT:
            try:
                raw = json.loads(self.store.cold.get_text(mau.pointer))
            except Exception:
                return None
            if isinstance(raw, dict):
                if "turns" in raw:  # a compressed MAU: the original window of turns
                    return RawContent(text=" ".join(f"{t.get('speaker')}: {t.get('text')}" for t in raw["turns"]))
                text = str(raw.get("text") or "")
                if not text.strip() or text.strip() in mau.full_text:
                    return None  # level 2 already shows every word of the raw turn
                return RawContent(text=f"{raw.get('speaker')}: {text}")
            return None
        if not self.cfg.pyramid.level3_media:
            return None  # a text-only reader sees the caption (the summary), never the media
        cost = int(self.cfg.pyramid.modality_tokens.get(mau.modality.value, 500))
        pointer = mau.pointer
        mime = mau.details.get("mime", _MIME.get(mau.modality.value, "application/octet-stream"))
        if mau.modality == Modality.VIDEO and mau.details.get("keyframe_pointer"):
            # readers take images, not video files: a scene's raw content is its keyframe
            # (memsys.media keeps the whole clip behind mau.pointer, with the scene's time_span)
            pointer, mime = mau.details["keyframe_pointer"], mau.details.get("keyframe_mime", "image/jpeg")
        path = str(self.store.cold.path(pointer))
        return RawContent(media=MediaPart(mau.modality, pointer, path, mime, cost))


def retrieve_many(retriever: Retriever, queries: Sequence[str]) -> list[Retrieval]:
    """Batch-embed queries once, then retrieve each (cheaper than one embed per query)."""
    vecs = retriever.embedder.embed(list(queries))
    return [retriever.retrieve(q, query_vec=v) for q, v in zip(queries, vecs)]
