"""Lifelong scale (issue #16): a memory of 10k..1M MAUs built from the haystack generator.

Parts (``--parts``, each writes its section of the JSON):
- ``dense``: flat vs HNSW vs IVF on the haystack's vectors: add rate, query p50, recall@20 vs exact.
- ``sparse``: SQLite FTS5 bm25, tantivy and segmented bm25s vs exact BM25 (bm25s, lucene, k1 1.2,
  b 0.75, same tokens): add rate, query p50/p95, top-20 overlap.
- ``lifelong``: per size, in a fresh child process: ingest without embedding (novelty gate + hot
  tier + both indexes), store open time, peak RSS, hybrid retrieval p50/p95 (query embedding
  excluded), dense ANN recall@20 vs exact, and the planted conversation's evidence recall@20
  unscoped and scoped to it, against the same conversation stored alone.
- ``ingest``: the ``lifelong`` part's ingest, open time and peak RSS only (no retrieval or recall), with
  process CPU time per MAU, the load average and per-batch times by tenth of the run.
- ``embed``: MiniLM raw throughput vs ingest through ``Memory.add`` on the same texts (fresh caches).
- ``crash``: a writer child SIGKILLed at random points; every reopen checked.

Vectors: the 1M points use SYNTHETIC vectors (embedding 1M texts with MiniLM on 2 shared cores
would take hours): each distractor gets the real MiniLM vector of its source turn plus Gaussian
noise (cosine ~0.9 to it, renormalized); planted turns and questions use their real vectors.

Usage: ``python benchmarks/perf/bench_lifelong.py --sizes 10000,100000,1000000 --parts lifelong``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # runnable as a plain script

import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

from benchmarks.haystack import HaystackItem, generate_haystack, planted_items  # noqa: E402
from benchmarks.metrics.retrieval import evidence_recall_at_k  # noqa: E402
from benchmarks.perf.bench_lifelong_parts import part_crash, part_dense, part_embed, part_sparse  # noqa: E402
from benchmarks.perf.lifelong_data import (  # noqa: E402
    BATCH,
    NOISE_SIGMA,
    K,
    ann_recall,
    base_vectors,
    batches,
    corpus,
    item_vectors,
    pct,
)
from harness.bench_output import write_json  # noqa: E402
from memsys.config import IndexConfig, TextNoveltyConfig  # noqa: E402
from memsys.index.scope import Scope  # noqa: E402
from memsys.ingest.text_gate import TextNoveltyGate  # noqa: E402
from memsys.records import MAU  # noqa: E402
from memsys.retrieve.merge import merge_rrf, merge_set_union  # noqa: E402
from memsys.retrieve.pyramid import RankedCandidate  # noqa: E402
from memsys.retrieve.rerank import speaker_first  # noqa: E402
from memsys.store.store import MemoryStore  # noqa: E402


def to_mau(it: HaystackItem, vec: np.ndarray) -> MAU:
    return MAU(it.id, it.text, timestamp=it.timestamp, session_id=it.conversation, speaker=it.speaker or None,
               details={"user": it.user, "conversation": it.conversation}, embedding=vec)


# ------------------------------------------------------------------ lifelong (one size per child)
def _tenths(per_batch: list[float]) -> list[float]:
    """Median of each tenth of the run (flat = a batch costs the same early and late)."""
    parts = np.array_split(np.asarray(per_batch), min(10, len(per_batch))) if per_batch else []
    return [round(float(np.median(p)), 2) for p in parts]


def ingest(path: Path, items: Iterator[HaystackItem], size: int, base, cfg: IndexConfig) -> dict[str, Any]:
    """Gate + store + both indexes, batch by batch; wall and process CPU time (all threads) per part.

    CPU time is what the machine's load does not inflate: on a shared machine the wall-clock rate
    mostly measures the scheduler."""
    store = MemoryStore.create(path, embedder_name="all-MiniLM-L6-v2", dim=384, index=cfg)
    gate = TextNoveltyGate(TextNoveltyConfig())
    vec_s = gate_s = store_s = gate_cpu = store_cpu = 0.0
    rejected = 0
    batch_ms: list[float] = []
    batch_cpu_ms: list[float] = []
    load_start = list(os.getloadavg())
    for start, batch in enumerate(tqdm(batches(items, BATCH), total=-(-size // BATCH), desc=f"ingest {size}")):
        t0 = time.perf_counter()
        vecs = item_vectors(batch, base, start)
        t1, c1 = time.perf_counter(), time.process_time()
        keep = []
        for it, v in zip(batch, vecs):
            if gate.check(it.text).accepted:
                keep.append(to_mau(it, v))
            else:
                rejected += 1
        t2, c2 = time.perf_counter(), time.process_time()
        store.add(keep)
        t3, c3 = time.perf_counter(), time.process_time()
        vec_s, gate_s, store_s = vec_s + t1 - t0, gate_s + t2 - t1, store_s + t3 - t2
        gate_cpu, store_cpu = gate_cpu + c2 - c1, store_cpu + c3 - c2
        batch_ms.append((t3 - t1) * 1e3)
        batch_cpu_ms.append((c3 - c1) * 1e3)
    t0, c0 = time.perf_counter(), time.process_time()
    store.save()
    save_s, save_cpu = time.perf_counter() - t0, time.process_time() - c0
    n = len(store)
    store.close()
    total_s, total_cpu = gate_s + store_s + save_s, gate_cpu + store_cpu + save_cpu
    return {"stored": n, "rejected_by_gate": rejected, "synthetic_vector_s": vec_s, "gate_s": gate_s,
            "store_and_index_s": store_s, "save_s": save_s,
            "maus_per_s_without_embedding": size / total_s,
            "cpu_s": {"gate": gate_cpu, "store_and_index": store_cpu, "save": save_cpu, "total": total_cpu},
            "cpu_us_per_mau": {"gate": gate_cpu / size * 1e6, "store_and_index": store_cpu / size * 1e6,
                               "total": total_cpu / size * 1e6},
            "maus_per_cpu_s": size / total_cpu,
            "load_avg_start": load_start, "load_avg_end": list(os.getloadavg()),
            "batch_ms_median_by_tenth": _tenths(batch_ms), "batch_cpu_ms_median_by_tenth": _tenths(batch_cpu_ms),
            "batch_ms_max": max(batch_ms, default=0.0), "batch_cpu_ms_max": max(batch_cpu_ms, default=0.0),
            "slowest_batches": sorted(((round(ms), i) for i, ms in enumerate(batch_ms)), reverse=True)[:5]}


#: the rankings whose planted recall is measured: the paper's set-union cut at 20 (the latency figure's
#: path), and omni's: RRF over both lists whole (40), then the named speakers' turns first; and omni's
#: with deeper lists (``memory.retrieval.dense_k = sparse_k = DEEP``), timed on its own: in a store of a
#: million MAUs the evidence a 20-deep list misses is often just below it
RANKINGS = ("set_union", "rrf", "rrf_speaker_first", "rrf_speaker_first_deep")
DEEP = 100


def _ranked_ids(store: MemoryStore, merged, query: str, speakers: set[str] | None) -> list[str]:
    cands = [RankedCandidate(store.maus[c.position], 0.0, c.sources, c.fused_score) for c in merged]
    if speakers is not None:
        cands = speaker_first(cands, query, speakers)
    return [c.mau.id for c in cands]


def evaluate(store: MemoryStore, qvecs, planted, scope: Scope | None, speakers: set[str]) -> dict[str, Any]:
    """Planted evidence recall@20 for each ranking (distractor hits keep their rank: recall is over
    the first 20 of the list); latency of the set-union path (query embedding excluded)."""
    lat: list[float] = []
    lat_deep: list[float] = []
    recalls: dict[str, list[float]] = {r: [] for r in RANKINGS}
    for q in planted.questions:
        if q.id not in qvecs:
            continue
        t0 = time.perf_counter()
        dense = store.search_dense(qvecs[q.id], K, scope)
        sparse = store.search_sparse(q.question, K, scope)
        merged = merge_set_union(dense, sparse, K)
        ids = {"set_union": [store.maus[c.position].id for c in merged]}
        lat.append((time.perf_counter() - t0) * 1e3)
        fused = merge_rrf(dense, sparse, 2 * K)
        ids["rrf"] = _ranked_ids(store, fused, q.question, None)
        ids["rrf_speaker_first"] = _ranked_ids(store, fused, q.question, speakers)
        t0 = time.perf_counter()  # the deep path whole: both searches, fusion, records, speaker-first
        deep = merge_rrf(store.search_dense(qvecs[q.id], DEEP, scope), store.search_sparse(q.question, DEEP, scope),
                         2 * DEEP)
        ids["rrf_speaker_first_deep"] = _ranked_ids(store, deep, q.question, speakers)
        lat_deep.append((time.perf_counter() - t0) * 1e3)
        for name, got in ids.items():
            ranked = [i.split("/", 1)[1] if i.startswith("planted/") else f"x{j}" for j, i in enumerate(got)]
            r = evidence_recall_at_k(ranked, list(q.evidence), K)
            if r is not None:
                recalls[name].append(r)
    out = {"questions": len(recalls["set_union"]), "evidence_recall_at_20": float(np.mean(recalls["set_union"])),
           "p50_ms": pct(lat, 50), "p95_ms": pct(lat, 95),
           "deep": {"k": DEEP, "p50_ms": pct(lat_deep, 50), "p95_ms": pct(lat_deep, 95)}}
    out["recall_at_20_by_ranking"] = {name: float(np.mean(v)) for name, v in recalls.items()}
    return out


def noting_speakers(items: Iterator[HaystackItem], speakers: set[str]) -> Iterator[HaystackItem]:
    """The stream unchanged, each item's speaker added to ``speakers`` as it passes: what a retriever
    over this store knows as its speakers, collected during the one pass over the haystack (at 1M a
    second pass to collect them would regenerate a million items)."""
    for it in items:
        speakers.add(it.speaker)
        yield it


def run_size(size: int, seed: int, workdir: Path, cfg: IndexConfig, ingest_only: bool = False) -> dict[str, Any]:
    planted, sources = corpus(seed)
    base, qvecs = base_vectors(planted, sources)
    out: dict[str, Any] = {"size": size}
    path = workdir / f"store-{size}"
    speakers: set[str] = set()
    out["ingest"] = ingest(path, noting_speakers(generate_haystack(size, planted, sources, seed), speakers),
                           size, base, cfg)
    t0 = time.perf_counter()
    store = MemoryStore.open(path)
    out["open_s"] = time.perf_counter() - t0
    if ingest_only:  # part "ingest": no retrieval, recall or alone-store evaluation
        out["dense_kind"] = store.dense.kind
        store.close()
        out["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        return out
    out["dense_kind"] = store.dense.kind
    out["speakers"] = len(speakers)
    out["unscoped"] = evaluate(store, qvecs, planted, None, speakers)
    out["scoped_to_planted"] = evaluate(store, qvecs, planted, Scope(conversation=planted.id), speakers)
    out["dense_ann_sweep"] = ann_recall(store.dense, list(qvecs.values())[:100])
    store.close()
    alone = workdir / f"alone-{size}"
    ingest(alone, iter(planted_items(planted)), len(planted_items(planted)), base, cfg)
    store = MemoryStore.open(alone)
    out["alone"] = evaluate(store, qvecs, planted, None, {it.speaker for it in planted_items(planted)})
    store.close()
    out["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return out


def part_lifelong(sizes: list[int], seed: int, ingest_only: bool = False) -> list[dict[str, Any]]:
    results = []
    for size in sizes:  # one child per size: a clean peak RSS and no page cache of our own
        with tempfile.TemporaryDirectory(prefix="lifelong-", dir="/tmp") as tmp:
            out = Path(tmp) / "out.json"
            subprocess.run([sys.executable, __file__, "--child-size", str(size), "--seed", str(seed),
                            "--workdir", tmp, "--out", str(out)] + (["--ingest-only"] if ingest_only else []),
                           check=True)
            results.append(json.loads(out.read_text()))
            print(json.dumps(results[-1], indent=1), flush=True)
    return results


# ------------------------------------------------------------------ main
#: the parts of bench_lifelong_parts.py, by their ``--parts`` name (``lifelong`` and ``ingest`` are part_lifelong's)
OTHER_PARTS = {"dense": part_dense, "sparse": part_sparse, "embed": part_embed, "crash": part_crash}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--parts", default="lifelong")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/bench/lifelong.json")
    ap.add_argument("--child-size", type=int)
    ap.add_argument("--workdir")
    ap.add_argument("--ingest-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sparse-kinds", default="fts5,tantivy,segmented_bm25s",
                    help="part sparse: which indexes to compare with exact BM25")
    args = ap.parse_args()
    if args.child_size:
        write_json(Path(args.out), run_size(args.child_size, args.seed, Path(args.workdir), IndexConfig(),
                                                   args.ingest_only))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    report: dict[str, Any] = {"when": datetime.now(timezone.utc).isoformat(), "host": platform.node(),
                              "cpus": 2, "load_avg_start": list(os.getloadavg()),
                              "sizes": sizes, "seed": args.seed, "synthetic_vectors": True,
                              "noise_sigma": NOISE_SIGMA, "index_config": IndexConfig().__dict__}
    out = Path(args.out)
    if out.exists():
        report = {**json.loads(out.read_text()), **{k: v for k, v in report.items() if k != "when"}}
    for part in args.parts.split(","):
        if part in ("lifelong", "ingest"):
            report[part] = part_lifelong(sizes, args.seed, ingest_only=part == "ingest")
        else:
            extra = {"kinds": tuple(args.sparse_kinds.split(","))} if part == "sparse" else {}
            report[part] = OTHER_PARTS[part](sizes, args.seed, **extra)
        report["load_avg_end"] = list(os.getloadavg())
        write_json(out, report)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
