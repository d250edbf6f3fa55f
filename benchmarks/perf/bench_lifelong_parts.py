"""Parts of bench_lifelong.py that compare index kinds and check crash safety (see its docstring)."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from benchmarks.haystack import generate_haystack
from benchmarks.perf.lifelong_data import (
    BATCH,
    K,
    ann_recall,
    base_vectors,
    batches,
    corpus,
    item_vectors,
    pct,
)
from memsys.config import EmbedderConfig, IndexConfig
from memsys.index.dense import DenseIndex, top_k_exact
from memsys.index.sparse import tokenize
from memsys.index.tantivy_bm25 import IndexedText, TantivyIndex

N_QUERIES = 100


def _haystack(size: int, seed: int):
    planted, sources = corpus(seed)
    base, qvecs = base_vectors(planted, sources)
    items = list(generate_haystack(size, planted, sources, seed))
    questions = [q.question for q in planted.questions if q.id in qvecs][:N_QUERIES]
    return items, base, list(qvecs.values())[:N_QUERIES], questions


# ------------------------------------------------------------------ dense: flat vs HNSW vs IVF
def part_dense(sizes: list[int], seed: int) -> list[dict[str, Any]]:
    out = []
    for size in sizes:
        items, base, qvecs, _ = _haystack(size, seed)
        vecs = np.concatenate([item_vectors(b, base, i) for i, b in enumerate(batches(iter(items), BATCH))])
        del items
        exact = [{p for p, _ in top_k_exact(vecs, q, K)} for q in qvecs]
        for ann in ("none", "hnsw", "ivf"):
            idx = DenseIndex(384, IndexConfig(dense_ann=ann, dense_flat_max=min(50_000, size // 2)))
            t0 = time.perf_counter()
            for s in tqdm(range(0, size, BATCH), desc=f"dense {ann} {size}"):
                idx.add(vecs[s:s + BATCH])
            add_s = time.perf_counter() - t0
            lat, rec = [], []
            for q, ex in zip(qvecs, exact):
                t0 = time.perf_counter()
                got = idx.search(q, K)
                lat.append((time.perf_counter() - t0) * 1e3)
                rec.append(len(ex & {p for p, _ in got}) / K)
            out.append({"size": size, "index": idx.kind, "add_per_s": size / add_s, "add_s": add_s,
                        "p50_ms": pct(lat, 50), "p95_ms": pct(lat, 95), "recall_at_20_vs_exact": float(np.mean(rec)),
                        "sweep": ann_recall(idx, qvecs)})
            print(out[-1], flush=True)
            del idx
    return out


# ------------------------------------------------------------------ sparse: FTS5 vs tantivy vs segmented bm25s
def _exact_bm25(tokens: list[list[str]]):
    import bm25s

    model = bm25s.BM25(k1=1.2, b=0.75, method="lucene")  # tantivy's and FTS5's k1, b
    model.index([t or ["\u0000"] for t in tokens], show_progress=False)
    return model


def _top(scores: np.ndarray, k: int) -> list[int]:
    order = np.lexsort((np.arange(len(scores)), -scores))[:k]
    return [int(i) for i in order if scores[i] > 0]


def _fts5(path: Path, tokens: list[list[str]]):
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE VIRTUAL TABLE f USING fts5(body)")
    t0 = time.perf_counter()
    for s in range(0, len(tokens), BATCH):
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO f(rowid, body) VALUES (?, ?)",
                         [(s + i + 1, " ".join(t)) for i, t in enumerate(tokens[s:s + BATCH])])
        conn.execute("COMMIT")
    add_s = time.perf_counter() - t0

    def search(q: list[str]) -> list[int]:
        match = " OR ".join(f'"{w}"' for w in dict.fromkeys(q))
        rows = conn.execute("SELECT rowid - 1 FROM f WHERE f MATCH ? ORDER BY bm25(f) LIMIT ?", (match, K)).fetchall()
        return [r[0] for r in rows]
    return search, add_s


def _tantivy(path: Path, texts: list[str]):
    idx = TantivyIndex(path)
    t0 = time.perf_counter()
    for s in range(0, len(texts), BATCH):
        idx.add([IndexedText(s + i, t) for i, t in enumerate(texts[s:s + BATCH])])
    add_s = time.perf_counter() - t0
    return (lambda q: [p for p, _ in idx.search(" ".join(q), K)]), add_s


def _segmented(tokens: list[list[str]], segment: int):
    """bm25s per segment of ``segment`` docs (a new segment per fill, no rebuild), merged by score:
    each segment's IDF is its own, which is where it departs from exact BM25."""
    import bm25s

    t0 = time.perf_counter()
    segs = []
    for s in range(0, len(tokens), segment):
        m = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
        m.index([t or ["\u0000"] for t in tokens[s:s + segment]], show_progress=False)
        segs.append((s, m))
    add_s = time.perf_counter() - t0

    def search(q: list[str]) -> list[int]:
        cands = []
        for s, m in segs:
            qq = [t for t in q if t in m.vocab_dict]
            if qq:
                sc = m.get_scores(qq)
                cands += [(float(sc[i]), s + i) for i in _top(sc, K)]
        return [p for _, p in sorted(cands, key=lambda c: (-c[0], c[1]))[:K]]
    return search, add_s


#: the sparse indexes compared (``--sparse-kinds`` narrows it: FTS5 alone takes tens of minutes at 1M)
SPARSE_KINDS = ("fts5", "tantivy", "segmented_bm25s")


def part_sparse(sizes: list[int], seed: int, kinds: tuple[str, ...] = SPARSE_KINDS) -> list[dict[str, Any]]:
    out = []
    for size in sizes:
        items, _, _, questions = _haystack(size, seed)
        texts = [it.text for it in items]
        del items
        tokens = [tokenize(t) for t in texts]
        exact = _exact_bm25(tokens)
        queries = [tokenize(q) for q in questions]
        truth = []
        for q in queries:
            qq = [t for t in q if t in exact.vocab_dict]
            truth.append(set(_top(exact.get_scores(qq), K)) if qq else set())
        with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
            makers = {"fts5": lambda: _fts5(Path(tmp) / "f.db", tokens),
                     "tantivy": lambda: _tantivy(Path(tmp) / "tv", texts),
                     "segmented_bm25s": lambda: _segmented(tokens, 100_000 if size > 100_000 else max(1000, size // 10))}
            for name, make in ((n, m) for n, m in makers.items() if n in kinds):
                search, add_s = make()
                lat, overlap = [], []
                for q, t in zip(queries, truth):
                    t0 = time.perf_counter()
                    got = search(q)
                    lat.append((time.perf_counter() - t0) * 1e3)
                    if t:
                        overlap.append(len(t & set(got)) / len(t))
                out.append({"size": size, "index": name, "add_per_s": size / add_s, "p50_ms": pct(lat, 50),
                            "p95_ms": pct(lat, 95), "top20_overlap_vs_exact": float(np.mean(overlap))})
                print(out[-1], flush=True)
    return out


# ------------------------------------------------------------------ embedding throughput
def part_embed(sizes: list[int], seed: int, n: int = 2000) -> dict[str, Any]:
    from memsys.embed import SentenceTransformerEmbedder, make_embedder
    from memsys.memory import Memory
    from memsys.records import Turn

    items, _, _, _ = _haystack(max(n * 2, 10_000), seed)
    sample = random.Random(seed).sample([it for it in items if not it.planted], n)
    raw = SentenceTransformerEmbedder(EmbedderConfig())
    raw.embed([it.text for it in sample[:64]])  # warm-up
    t0 = time.perf_counter()
    raw.embed([it.text for it in sample])
    raw_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        os.environ["MEMSYS_CACHE_DIR"] = tmp  # a cold cache: every text is embedded
        emb = make_embedder(EmbedderConfig(), cache_path=Path(tmp) / "emb.sqlite")
        mem = Memory.create(Path(tmp) / "store", "omni", embedder=emb)
        turns = [Turn(it.id.replace("/", "_"), "x", it.text, it.timestamp, it.conversation) for it in sample]
        t0 = time.perf_counter()
        mem.add(turns, batch_size=BATCH)
        ingest_s = time.perf_counter() - t0
        mem.close()
    return {"texts": n, "torch_threads": __import__("torch").get_num_threads(),
            "raw_texts_per_s": n / raw_s, "ingest_texts_per_s": n / ingest_s, "ratio": raw_s / ingest_s}


# ------------------------------------------------------------------ crash: random SIGKILLs
WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import numpy as np
    from memsys.config import IndexConfig
    from memsys.records import MAU
    from memsys.store import MemoryStore

    path, batch = Path(sys.argv[1]), int(sys.argv[2])
    cfg = IndexConfig(dense_flat_max=5000, dense_snapshot_every=8000, sparse_exact_max=0, lazy_records_above=10000)
    store = MemoryStore.open(path) if (path / "manifest.json").exists() else MemoryStore.create(
        path, embedder_name="random", dim=384, index=cfg)
    n = len(store)
    print("ready", n, flush=True)
    while True:
        v = np.random.default_rng(n).standard_normal((batch, 384)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        store.add([MAU(f"m{n + i}", f"memory w{n + i} topic {(n + i) % 7}", embedding=v[i]) for i in range(batch)])
        n += batch
        print("committed", n, flush=True)
    """
)


def part_crash(sizes: list[int], seed: int, kills: int = 20, batch: int = 500) -> dict[str, Any]:
    from memsys.store import MemoryStore

    rng = random.Random(seed)
    report = {"kills": kills, "batch": batch, "corrupt": 0, "lost_more_than_one_batch": 0, "reopen_s": [], "sizes": []}
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        script, path = Path(tmp) / "w.py", Path(tmp) / "store"
        script.write_text(WRITER)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
        committed = 0
        for _ in tqdm(range(kills), desc="kill -9"):
            proc = subprocess.Popen([sys.executable, str(script), str(path), str(batch)], stdout=subprocess.PIPE, text=True, env=env)
            proc.stdout.readline()
            time.sleep(rng.uniform(0.5, 4.0))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            for line in proc.stdout.read().splitlines():
                committed = max(committed, int(line.split()[1]))
            proc.stdout.close()
            t0 = time.perf_counter()
            try:
                store = MemoryStore.open(path)
            except Exception as exc:  # counted, not raised: the figure is how often this happens
                report["corrupt"] += 1
                report.setdefault("errors", []).append(str(exc))
                continue
            report["reopen_s"].append(time.perf_counter() - t0)
            n = len(store)
            ok = (n % batch == 0 and committed <= n <= committed + batch and len(store.dense) == n
                  and store._tantivy.indexed_upto() == n and store.get(f"m{n - 1}").id == f"m{n - 1}")
            report["corrupt"] += not ok
            report["lost_more_than_one_batch"] += n < committed
            report["sizes"].append(n)
            store.close()
            committed = n
    return report
