"""Memory-system core on LoCoMo (10 conversations, 5,882 turns): ingestion, latency, concurrency, recall.

Why: retrieval must cost little next to the reader (the paper: 85-97% of query time is
LLM generation), ingestion must keep up with benchmark rebuilds, and evidence recall is
the reader-independent measure of the merge strategies. No LLM anywhere: one MAU per
turn, summary = turn text (+ image caption). One store per conversation, as the runner does.

(a) ingestion throughput, turns/s, with a cold embedding cache (fresh MEMSYS_CACHE_DIR)
    and again warm (target >= 150 turns/s);
(b) retrieval latency, omni preset (hybrid set-union + pyramid), p50/p95 over sampled
    questions with query embedding included and excluded (pre-computed vectors passed
    as ``query_vec``; target p50 < 10 ms excluding embedding), plus per-stage means;
(c) concurrent retrieval throughput with 1, 2, 4, 8 threads on one read-only store;
(d) evidence recall@5/10/20 over every question with evidence, for each merge strategy
    with dense_k = sparse_k = top_k = 20 (same candidate pool), plus the full set union
    (top_k 40) against dense-only at 40; and bm25s vs rank_bm25 on the same stores.

Usage: ``python benchmarks/perf/bench_memsys.py [--out runs/bench/memsys.json] [--questions 600]``.
Writes the JSON to --out and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # runnable as a plain script

import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

from benchmarks.datasets.locomo import load_locomo  # noqa: E402
from benchmarks.metrics.retrieval import evidence_recall_at_k  # noqa: E402
from benchmarks.perf.stores import memsys_turns  # noqa: E402
from harness.bench_output import load_average, utc_now, write_json  # noqa: E402
from harness.paths import runs_dir  # noqa: E402
from memsys.config import EmbedderConfig, MemoryConfig, load_memory_config  # noqa: E402
from memsys.embed import Embedder, make_embedder  # noqa: E402
from memsys.index.sparse import make_sparse_index  # noqa: E402
from memsys.memory import Memory  # noqa: E402
from memsys.retrieve.merge import MERGERS  # noqa: E402
from memsys.retrieve.retriever import Retriever  # noqa: E402
from memsys.store.cold import ColdStore  # noqa: E402
from memsys.store.store import sparse_text  # noqa: E402

RECALL_KS = (5, 10, 20)
THREADS = (1, 2, 4, 8)
TARGET_TURNS_PER_S = 150
TARGET_P50_MS = 10.0


# ------------------------------------------------------------------ helpers
def pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if len(values) else 0.0


def summarize_ms(values: Sequence[float]) -> dict[str, float]:
    return {"p50_ms": round(pct(values, 50), 3), "p95_ms": round(pct(values, 95), 3),
            "mean_ms": round(float(np.mean(values)), 3) if len(values) else 0.0, "n": len(values)}


def stage_means(timings: list[dict[str, float]]) -> dict[str, float]:
    keys = sorted({k for t in timings for k in t})
    return {k: round(float(np.mean([t.get(k, 0.0) for t in timings])), 3) for k in keys}


def ranked_source_ids(retriever: Retriever, query: str, vec: np.ndarray) -> list[str]:
    """Merged candidates R(q) mapped to LoCoMo dia_ids, in rank order, each once."""
    out: list[str] = []
    for c in retriever.search(query, query_vec=vec):
        for sid in c.mau.details.get("source_ids", [c.mau.source_id]):
            if sid and sid not in out:
                out.append(sid)
    return out


def with_retrieval(cfg: MemoryConfig, **changes: Any) -> MemoryConfig:
    return replace(cfg, retrieval=replace(cfg.retrieval, **changes))


# ------------------------------------------------------------------ (a) ingestion
def ingest_all(convs: Sequence[Any], cfg: MemoryConfig, embedder: Embedder, root: Path, label: str) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    n_turns = accepted = rejected = 0
    per_conv: dict[str, float] = {}
    t0 = time.perf_counter()
    for conv in tqdm(convs, desc=f"ingest ({label} cache)", unit="conv", file=sys.stderr):
        turns = memsys_turns(conv)
        c0 = time.perf_counter()
        mem = Memory.create(root / conv.id, cfg, embedder=embedder)
        report = mem.add(turns)
        mem.save()
        mem.close()
        per_conv[conv.id] = round(len(turns) / (time.perf_counter() - c0), 1)
        n_turns += len(turns)
        accepted, rejected = accepted + report.accepted, rejected + report.rejected
    seconds = time.perf_counter() - t0
    return {"turns": n_turns, "seconds": round(seconds, 2), "turns_per_s": round(n_turns / seconds, 1),
            "maus_stored": accepted, "rejected_by_novelty_gate": rejected,
            "meets_target": n_turns / seconds >= TARGET_TURNS_PER_S, "turns_per_s_by_conversation": per_conv}


def cold_tier_put_cost(n: int = 200) -> dict[str, float]:
    """Per-turn cost of the cold-tier write (atomic file: temp + fsync + rename)."""
    with tempfile.TemporaryDirectory(prefix="memsys-cold-") as tmp:
        cold = ColdStore(Path(tmp))
        t0 = time.perf_counter()
        for i in range(n):
            cold.put_text(json.dumps({"id": f"D1:{i}", "text": f"raw turn text number {i} " * 5}))
        return {"ms_per_put": round((time.perf_counter() - t0) * 1e3 / n, 3), "n": n}


# ------------------------------------------------------------------ (b) latency
def latency(mems: dict[str, Memory], questions: list[Any], vecs: dict[str, np.ndarray]) -> dict[str, Any]:
    for mem in mems.values():  # build BM25, load the token table: not part of a query's cost
        mem.retrieve("warm up the indices")
    included, inc_timings, excluded, exc_timings = [], [], [], []
    for q in tqdm(questions, desc="latency (embedding included)", unit="q", file=sys.stderr):
        t0 = time.perf_counter()
        r = mems[q.conversation_id].retrieve(q.question)
        included.append((time.perf_counter() - t0) * 1e3)
        inc_timings.append(r.timings_ms)
    tokens, levels = [], {1: [], 2: [], 3: []}
    for q in tqdm(questions, desc="latency (embedding excluded)", unit="q", file=sys.stderr):
        retriever = mems[q.conversation_id].retriever
        t0 = time.perf_counter()
        r = retriever.retrieve(q.question, query_vec=vecs[q.id])
        excluded.append((time.perf_counter() - t0) * 1e3)
        exc_timings.append(r.timings_ms)
        tokens.append(r.context.total_tokens)
        for level, counts in levels.items():
            counts.append(sum(i.level == level for i in r.items))
    exc = summarize_ms(excluded)
    return {
        "questions": len(questions),
        "embedding_included": {**summarize_ms(included), "stages_mean_ms": stage_means(inc_timings)},
        "embedding_excluded": {**exc, "stages_mean_ms": stage_means(exc_timings),
                               "meets_target": exc["p50_ms"] < TARGET_P50_MS},
        "context": {"tokens_mean": round(float(np.mean(tokens)), 1), "tokens_max": int(max(tokens)),
                    "items_per_level_mean": {str(k): round(float(np.mean(v)), 2) for k, v in levels.items()}},
    }


# ------------------------------------------------------------------ (c) concurrency
def throughput(fn: Callable[[Any], Any], items: list[Any], threads: int) -> tuple[float, list[Any]]:
    with ThreadPoolExecutor(max_workers=threads) as pool:
        t0 = time.perf_counter()
        results = list(pool.map(fn, items))
        return len(items) / (time.perf_counter() - t0), results


def concurrency(path: Path, cfg: MemoryConfig, embedder: Embedder, questions: list[Any],
                vecs: dict[str, np.ndarray], n_plain: int, n_embed: int) -> dict[str, Any]:
    mem = Memory.open(path, cfg, read_only=True, embedder=embedder)
    retriever = mem.retriever
    retriever.retrieve("warm up the indices")
    items = [questions[i % len(questions)] for i in range(n_plain)]
    plain = lambda q: retriever.retrieve(q.question, query_vec=vecs[q.id]).context.mau_ids  # noqa: E731
    # end to end with the uncached model: repeated questions must not turn into cache hits
    model = getattr(embedder, "inner", embedder)
    uncached = Retriever(mem.store, model, cfg)
    embed_items = items[:n_embed]
    end_to_end = lambda q: uncached.retrieve(q.question).context.mau_ids  # noqa: E731
    out: dict[str, Any] = {"store": path.name, "maus": len(mem), "queries_retrieval_only": len(items),
                           "queries_with_embedding": len(embed_items)}
    for label, fn, batch in (("retrieval_only_qps", plain, items), ("with_embedding_qps", end_to_end, embed_items)):
        expected = [fn(q) for q in batch[: min(50, len(batch))]]
        rates: dict[str, float] = {}
        same = True
        for n in tqdm(THREADS, desc=f"concurrency ({label})", unit="cfg", file=sys.stderr):
            rate, results = throughput(fn, batch, n)
            rates[str(n)] = round(rate, 1)
            same = same and results[: len(expected)] == expected
        out[label] = rates
        out[label.replace("_qps", "_results_match_sequential")] = same
    mem.close()
    return out


# ------------------------------------------------------------------ (d) recall and sparse backends
def recall(mems: dict[str, Memory], questions: list[Any], vecs: dict[str, np.ndarray]) -> dict[str, Any]:
    base = mems[questions[0].conversation_id].cfg
    same_pool = {"dense_k": 20, "sparse_k": 20, "top_k": 20}
    setups: dict[str, tuple[dict[str, Any], tuple[int, ...]]] = {
        m: ({**same_pool, "merge": m}, RECALL_KS) for m in ("dense_only", "bm25_only", "rrf", "linear", "set_union")}
    # set_union cut at top_k 20 is the dense list itself (20 dense hits fill it): the full union needs 40
    setups["set_union_top40"] = ({"dense_k": 20, "sparse_k": 20, "top_k": 40, "merge": "set_union"}, RECALL_KS + (40,))
    setups["dense_only_top40"] = ({"dense_k": 40, "sparse_k": 40, "top_k": 40, "merge": "dense_only"}, RECALL_KS + (40,))
    setups["bm25_only_top40"] = ({"dense_k": 40, "sparse_k": 40, "top_k": 40, "merge": "bm25_only"}, RECALL_KS + (40,))
    out: dict[str, Any] = {"questions_with_evidence": len(questions), "candidate_pool": same_pool, "strategies": {}}
    for name, (changes, ks) in tqdm(setups.items(), desc="recall", unit="strategy", file=sys.stderr):
        assert changes["merge"] in MERGERS
        retrievers = {cid: Retriever(m.store, m.embedder, with_retrieval(base, **changes)) for cid, m in mems.items()}
        per_k: dict[int, list[float]] = {k: [] for k in ks}
        by_cat: dict[str, list[float]] = {}
        for q in questions:
            ids = ranked_source_ids(retrievers[q.conversation_id], q.question, vecs[q.id])
            for k in ks:
                per_k[k].append(evidence_recall_at_k(ids, q.evidence, k))
            by_cat.setdefault(q.category, []).append(evidence_recall_at_k(ids, q.evidence, 20))
        out["strategies"][name] = {
            **{f"recall@{k}": round(float(np.mean(v)), 4) for k, v in per_k.items()},
            "recall@20_by_category": {c: round(float(np.mean(v)), 4) for c, v in sorted(by_cat.items())},
            "settings": changes,
        }
    return out


def sparse_backends(mems: dict[str, Memory], questions: list[Any]) -> dict[str, Any]:
    fields = next(iter(mems.values())).cfg.retrieval.sparse_fields
    res: dict[str, Any] = {"backends": {}, "sparse_fields": fields}
    tops: dict[str, dict[str, list[int]]] = {}
    for backend in ("bm25s", "rank_bm25"):
        indices, build_s = {}, 0.0
        for cid, mem in mems.items():
            texts = [sparse_text(m, fields) for m in mem.store.maus]
            t0 = time.perf_counter()
            idx = make_sparse_index(backend)
            idx.build(texts)
            build_s += time.perf_counter() - t0
            indices[cid] = idx
        lat, top, rec = [], {}, []
        for q in tqdm(questions, desc=f"sparse backend {backend}", unit="q", file=sys.stderr):
            t0 = time.perf_counter()
            hits = indices[q.conversation_id].search(q.question, 20)
            lat.append((time.perf_counter() - t0) * 1e3)
            top[q.id] = [p for p, _ in hits[:10]]
            maus = mems[q.conversation_id].store.maus
            rec.append(evidence_recall_at_k([maus[p].source_id for p, _ in hits], q.evidence, 10))
        tops[backend] = top
        res["backends"][backend] = {**summarize_ms(lat), "build_s_all_stores": round(build_s, 3),
                                    "recall@10": round(float(np.mean(rec)), 4)}
    a, b = tops["bm25s"], tops["rank_bm25"]
    overlap = [len(set(a[q]) & set(b[q])) / max(len(a[q]), len(b[q]), 1) for q in a]
    res["top10_overlap_mean"] = round(float(np.mean(overlap)), 4)
    res["top10_identical_order_rate"] = round(float(np.mean([a[q] == b[q] for q in a])), 4)
    res["top1_agreement"] = round(float(np.mean([a[q][:1] == b[q][:1] for q in a])), 4)
    return res


# ------------------------------------------------------------------ main
def environment() -> dict[str, Any]:
    import bm25s
    import faiss
    import sentence_transformers
    import torch

    return {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "faiss": faiss.__version__, "bm25s": bm25s.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "load_average_start": load_average()}


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=runs_dir() / "bench" / "memsys.json")
    ap.add_argument("--questions", type=int, default=600, help="questions sampled for the latency figures (b)")
    ap.add_argument("--conversations", type=int, default=10, help="fewer for a smoke run")
    ap.add_argument("--data", type=Path, default=None, help="locomo10.json (default: under MEMSYS_DATA_DIR)")
    ap.add_argument("--concurrency-queries", type=int, default=400)
    return ap.parse_args(argv)


@dataclass(frozen=True)
class _Run:
    """What every figure of one bench run shares."""

    work: Path  # temporary: stores and the cold embedding cache
    cfg: MemoryConfig
    embedder: Embedder
    convs: list[Any]
    questions: list[Any]


def _header(bench: Any, convs: list[Any], questions: list[Any]) -> dict[str, Any]:
    return {
        "benchmark": "memsys-core", "created": utc_now(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]), "environment": environment(),
        "data": {"dataset": "locomo", "sha256": bench.sha256, "conversations": len(convs),
                 "turns": sum(len(s.turns) for c in convs for s in c.sessions), "questions": len(questions),
                 "questions_with_evidence": sum(bool(q.evidence) for q in questions)},
    }


def _load_embedder(work: Path) -> tuple[Embedder, float]:
    """The embedder and its model load time, kept apart from the ingest figures."""
    t0 = time.perf_counter()
    embedder = make_embedder(EmbedderConfig(), cache_path=work / "cache" / "embeddings.sqlite")
    embedder.inner.embed(["load the model weights into memory"])  # type: ignore[attr-defined]
    return embedder, time.perf_counter() - t0


def _ingest_figures(run: _Run, load_s: float) -> dict[str, Any]:
    """(a) ingestion: cold cache, then warm cache, and the cold tier's share of it."""
    cold = ingest_all(run.convs, run.cfg, run.embedder, run.work / "stores-cold", "cold")
    warm = ingest_all(run.convs, run.cfg, run.embedder, run.work / "stores", "warm")
    cold_write = cold_tier_put_cost()
    # one fsync'ed cold-tier file per turn: its share of the warm ingest time
    cold_write["share_of_warm_ingest"] = round(cold_write["ms_per_put"] * warm["turns"] / 1e3 / warm["seconds"], 3)
    shutil.rmtree(run.work / "stores-cold", ignore_errors=True)
    return {"target_turns_per_s": TARGET_TURNS_PER_S, "model_load_s": round(load_s, 2),
            "cold_cache": cold, "warm_cache": warm, "cold_tier_write": cold_write}


def _latency_figures(run: _Run, mems: dict[str, Memory], n_questions: int) -> dict[str, Any]:
    """(b) latency on a fixed random sample; the "included" pass sees each question first."""
    questions, embedder = run.questions, run.embedder
    sample = random.Random(0).sample(questions, min(n_questions, len(questions)))
    t0 = time.perf_counter()
    lat_vecs = dict(zip([q.id for q in sample], embedder.inner.embed([q.question for q in sample])))  # type: ignore[attr-defined]
    batch_ms = (time.perf_counter() - t0) * 1e3 / max(len(sample), 1)
    graph = any(getattr(m, "_graph", None) is not None for m in mems.values())  # none: add() builds none
    return {"preset": "omni", "graph_attached": graph, **latency(mems, sample, lat_vecs),
            "batched_query_embedding_ms_per_query": round(batch_ms, 3),
            "target_p50_ms_excluding_embedding": TARGET_P50_MS}


def _evidence_figures(run: _Run, mems: dict[str, Memory], concurrency_queries: int) -> dict[str, Any]:
    """(c) concurrency on the conversation with the most questions; (d) recall by merge strategy and BM25 backend."""
    with_evidence = [q for q in run.questions if q.evidence]
    vecs = dict(zip([q.id for q in with_evidence], run.embedder.embed([q.question for q in with_evidence])))
    busiest = max(run.convs, key=lambda c: len(c.questions))
    out: dict[str, Any] = {}
    out["concurrency"] = concurrency(run.work / "stores" / busiest.id, run.cfg, run.embedder,
                                     [q for q in with_evidence if q.conversation_id == busiest.id], vecs,
                                     concurrency_queries, max(concurrency_queries // 2, 1))
    out["recall"] = recall(mems, with_evidence, vecs)
    out["sparse_backends"] = sparse_backends(mems, with_evidence)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = _parse_args(argv)
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="bench-memsys-"))
    os.environ["MEMSYS_CACHE_DIR"] = str(work / "cache")  # a cold embedding cache, never the shared one
    try:
        bench = load_locomo(args.data)
        convs = list(bench.conversations[: args.conversations])
        questions = [q for c in convs for q in c.questions]
        result = _header(bench, convs, questions)
        cfg = load_memory_config("omni")
        embedder, load_s = _load_embedder(work)
        run = _Run(work, cfg, embedder, convs, questions)
        result["ingest"] = _ingest_figures(run, load_s)

        mems = {c.id: Memory.open(work / "stores" / c.id, cfg, read_only=True, embedder=embedder) for c in convs}
        try:
            result["latency"] = _latency_figures(run, mems, args.questions)
            result.update(_evidence_figures(run, mems, args.concurrency_queries))
        finally:
            for mem in mems.values():
                mem.close()
        result["environment"]["load_average_end"] = load_average()
        result["seconds_total"] = round(time.perf_counter() - started, 1)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    write_json(args.out, result)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
