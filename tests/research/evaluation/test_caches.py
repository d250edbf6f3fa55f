"""The trusted merge of a sandbox's cache folder: which split shares what.

Real SQLite files in the layout a sandbox writes (``emb`` + ``emb_text``), a real store folder, and
the real hashing embedder as the trusted recomputation; the sandboxed path itself is covered in
``test_two_half_eval_sandbox.py``.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import numpy as np

from memsys.config import EmbedderConfig
from memsys.embed import HashingEmbedder
from research.evaluation.caches import EMBEDDINGS_FILE, SharedCache

TEXTS = ["Caroline (8 May 2023): I went to the support group", "Melanie (9 May 2023): I painted a lake"]


def _sandbox_cache(root: Path, embedder: HashingEmbedder, *, poison: bool = False) -> Path:
    """What a sandbox leaves behind: one finished store and the vectors it computed."""
    store = root / "stores" / "store-1"
    store.mkdir(parents=True)
    (store / "manifest.json").write_text(json.dumps({"n": 2}))
    (store / "vectors.npy").write_bytes(b"\0" * 64)
    vecs = embedder.embed(TEXTS)
    if poison:
        vecs[0] = -vecs[0]
    conn = sqlite3.connect(root / EMBEDDINGS_FILE)
    conn.execute("CREATE TABLE emb (key TEXT PRIMARY KEY, vec BLOB NOT NULL)")
    conn.execute("CREATE TABLE emb_text (key TEXT PRIMARY KEY, model TEXT, text TEXT)")
    for text, vec in zip(TEXTS, vecs):
        key = hashlib.sha256(f"{embedder.name}\x00{text}".encode()).hexdigest()
        conn.execute("INSERT INTO emb VALUES (?, ?)", (key, np.asarray(vec, np.float32).tobytes()))
        conn.execute("INSERT INTO emb_text VALUES (?, ?, ?)", (key, embedder.name, text))
    conn.commit()
    conn.close()
    return root


def _rows(path: Path) -> int:
    if not path.exists():
        return 0
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT count(*) FROM emb").fetchone()[0]
    finally:
        conn.close()


def test_dev_shares_verified_vectors_and_refuses_a_wrong_one(tmp_path: Path) -> None:
    emb = HashingEmbedder(EmbedderConfig(backend="hashing", dim=64))
    dev = SharedCache.for_split(tmp_path / "cache", "dev", embedder=emb)
    report = dev.merge(_sandbox_cache(tmp_path / "sandbox", emb, poison=True), "ns")
    assert report.stores_merged == 1 and (dev.stores_dir("ns") / "store-1" / "manifest.json").exists()
    assert (report.embeddings_merged, report.embeddings_refused) == (1, 1)
    assert _rows(dev.embeddings_path) == 1


def test_a_held_out_split_shares_its_stores_but_not_its_vectors(tmp_path: Path) -> None:
    """Verifying a vector costs as much as computing it, and a run has no held-out evaluation after its last."""
    emb = HashingEmbedder(EmbedderConfig(backend="hashing", dim=64))
    for split in ("test", "all"):
        heldout = SharedCache.for_split(tmp_path / "cache", split, embedder=emb)
        report = heldout.merge(_sandbox_cache(tmp_path / f"sandbox-{split}", emb), "ns")
        assert report.stores_merged == (1 if split == "test" else 0)  # the same store is not copied twice
        assert (report.embeddings_merged, report.embeddings_refused) == (0, 0)
        assert _rows(heldout.embeddings_path) == 0
    dev = SharedCache.for_split(tmp_path / "cache", "dev")
    assert heldout.root != dev.root and not (dev.root / "stores").exists()  # no test text reaches a dev sandbox
