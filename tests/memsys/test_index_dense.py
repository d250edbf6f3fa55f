"""Dense index: real FAISS inner product over unit vectors (memsys.index.dense)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from memsys.index.dense import DenseIndex

SENTENCES = [
    "Caroline went to a LGBTQ support group yesterday.",
    "Melanie painted a sunrise over the lake.",
    "We went camping at the beach and saw a meteor shower.",
    "Caroline is looking into adoption agencies.",
    "Melanie signed up for a pottery class.",
    "The stock market fell sharply on Tuesday.",
]


def unit_rows(n: int, dim: int = 384, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_search_matches_brute_force_cosine():
    data, queries = unit_rows(500), unit_rows(20, seed=1)
    index = DenseIndex(384)
    index.add(data[:200])
    index.add(data[200:])  # incremental adds keep positions
    assert len(index) == 500
    for q in queries:
        hits = index.search(q, 10)
        sims = data @ q
        expected = np.argsort(-sims, kind="stable")[:10]
        assert [p for p, _ in hits] == expected.tolist()
        np.testing.assert_allclose([s for _, s in hits], sims[expected], atol=1e-5)
        assert all(a[1] >= b[1] for a, b in zip(hits, hits[1:]))


def test_real_embeddings_rank_the_relevant_sentence_first(embedder):
    index = DenseIndex(384)
    index.add(embedder.embed(SENTENCES))
    for query, want in [("Who went to the support group?", 0), ("art class making bowls out of clay", 4),
                        ("shooting stars on a camping trip", 2), ("economy and shares", 5)]:
        assert index.search(embedder.embed_one(query), 1)[0][0] == want, query


def test_k_edge_cases():
    index = DenseIndex(384)
    q = unit_rows(1)[0]
    assert index.search(q, 5) == []  # empty index
    index.add(unit_rows(3))
    assert len(index.search(q, 10)) == 3  # k larger than the index
    assert index.search(q, 0) == [] and index.search(q, -1) == []


def test_wrong_shape_is_refused():
    index = DenseIndex(384)
    with pytest.raises(ValueError, match=r"\[n, 384\]"):
        index.add(unit_rows(2, dim=128))
    with pytest.raises(ValueError):
        index.add(np.ones(384, np.float32))  # 1-d
    assert len(index) == 0


def test_serialization_round_trip():
    data = unit_rows(50)
    index = DenseIndex(384)
    index.add(data)
    back = DenseIndex.from_bytes(index.to_bytes(), 384)
    assert len(back) == 50
    for q in unit_rows(5, seed=3):
        assert back.search(q, 7) == index.search(q, 7)
    with pytest.raises(ValueError, match="index dim 384 != 128"):
        DenseIndex.from_bytes(index.to_bytes(), 128)


def test_concurrent_searches_agree_with_sequential():
    data, queries = unit_rows(2000), unit_rows(64, seed=2)
    index = DenseIndex(384)
    index.add(data)
    expected = [index.search(q, 20) for q in queries]
    results: dict[int, list] = {}

    def work(t: int) -> None:
        results[t] = [index.search(q, 20) for q in queries]

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(results[t] == expected for t in range(8))
