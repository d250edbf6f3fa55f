"""What bench_lifelong.py and bench_lifelong_parts.py share: the synthetic haystack's corpus and vectors,
its batches, and the recall and percentile helpers (see bench_lifelong.py's docstring for the vectors).

Both benches import this module; neither imports the other's helpers."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Iterator

import numpy as np

from benchmarks.datasets.locomo import load_locomo
from benchmarks.datasets.memgallery import load_memgallery
from benchmarks.haystack import HaystackItem, distractor_sources, planted_items
from memsys.config import EmbedderConfig
from memsys.embed import make_embedder
from memsys.index.dense import top_k_exact

K = 20
NOISE_SIGMA = 0.0247  # per-dimension noise: cosine ~0.9 between a distractor and its source turn (384-d)
BATCH = 1000


def corpus(seed: int):
    lo, mg = load_locomo(), load_memgallery()
    planted = lo.conversations[0]
    return planted, distractor_sources([lo, mg], planted.id)


def base_vectors(planted, sources) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Real MiniLM vectors of every source turn, planted turn and planted question (cached by text)."""
    emb = make_embedder(EmbedderConfig())
    texts: dict[str, str] = {}
    for conv in [planted, *sources]:
        for it in planted_items(conv):
            texts[it.source_key] = it.text
    keys = list(texts)
    vecs = emb.embed([texts[k] for k in keys])
    qs = [q for q in planted.questions if q.evidence and q.category in ("1", "2", "3", "4")]
    qv = emb.embed([q.question for q in qs])
    return dict(zip(keys, vecs)), {q.id: v for q, v in zip(qs, qv)}


def item_vectors(items: list[HaystackItem], base: dict[str, np.ndarray], start: int) -> np.ndarray:
    out = np.stack([base[it.source_key] for it in items]).astype(np.float32)
    noisy = np.array([not it.planted for it in items])
    if noisy.any():
        rng = np.random.default_rng(start)
        out[noisy] += rng.normal(0, NOISE_SIGMA, (int(noisy.sum()), out.shape[1])).astype(np.float32)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


def batches(items: Iterator[HaystackItem], n: int) -> Iterator[list[HaystackItem]]:
    buf: list[HaystackItem] = []
    for it in items:
        buf.append(it)
        if len(buf) == n:
            yield buf
            buf = []
    if buf:
        yield buf


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


def ann_recall(dense, queries: list[np.ndarray]) -> list[dict[str, Any]]:
    """Recall@20 of the ANN index against exact search, and its latency, over its search knob
    (IVF nprobe / HNSW efSearch); the configured value is marked."""
    if dense.kind == "flat":
        return []
    vecs = dense.vectors() if dense.kind == "hnsw" else None
    exact = []
    for v in queries:
        if vecs is None:  # IVF keeps vectors in lists: one exact pass over a flat copy, in chunks
            exact.append(_exact_ivf(dense, v))
        else:
            exact.append({p for p, _ in top_k_exact(vecs, v, K)})
    knob = "ivf_nprobe" if dense.kind == "ivf" else "hnsw_ef_search"
    configured = getattr(dense.cfg, knob)
    out = []
    for value in sorted({16, 32, 64, 128, 256, configured}):
        dense.cfg = replace(dense.cfg, **{knob: value})
        lat, hits = [], []
        for v, ex in zip(queries, exact):
            t0 = time.perf_counter()
            got = {p for p, _ in dense.search(v, K)}
            lat.append((time.perf_counter() - t0) * 1e3)
            hits.append(len(ex & got) / K)
        out.append({knob: value, "configured": value == configured, "recall_at_20": float(np.mean(hits)),
                    "p50_ms": pct(lat, 50), "p95_ms": pct(lat, 95)})
    dense.cfg = replace(dense.cfg, **{knob: configured})
    return out


def _exact_ivf(dense, v: np.ndarray, chunk: int = 100_000) -> set[int]:
    best: list[tuple[int, float]] = []
    for s in range(0, len(dense), chunk):
        part = dense._index.reconstruct_n(s, min(chunk, len(dense) - s))
        best = sorted(best + [(p + s, sc) for p, sc in top_k_exact(part, v, K)], key=lambda h: -h[1])[:K]
    return {p for p, _ in best}
