"""The real all-MiniLM-L6-v2 embedder and its SQLite vector cache (memsys.embed)."""

from __future__ import annotations

import sqlite3
import threading

import numpy as np
import pytest

from harness.errors import CacheError, ModelError
from memsys.config import EmbedderConfig
from memsys.embed import COMMIT_EVERY, CachedEmbedder, HashingEmbedder, SentenceTransformerEmbedder, make_embedder

TEXTS = [
    "I went to a LGBTQ support group yesterday and it was so powerful.",
    "Melanie painted a lake sunrise last year.",
    "The quarterly tax report is due at the end of the month.",
    "",  # empty strings still get a (unit) vector
    "Ünïcödé and emoji 🎨 survive",
]


def rows(path) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT COUNT(*) FROM emb").fetchone()[0]


def test_vectors_are_384_d_unit_norm_float32(embedder):
    vecs = embedder.embed(TEXTS)
    assert embedder.dim == 384 and embedder.name == "all-MiniLM-L6-v2"
    assert vecs.shape == (len(TEXTS), 384) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    one = embedder.embed_one(TEXTS[0])
    assert one.shape == (384,)
    np.testing.assert_allclose(one, vecs[0], atol=1e-6)


def test_empty_batch_gives_an_empty_matrix(embedder):
    out = embedder.embed([])
    assert out.shape == (0, 384) and out.dtype == np.float32


@pytest.mark.parametrize(
    "anchor, paraphrase, unrelated",
    [
        ("I went hiking in the mountains last weekend.", "Last weekend I hiked up a mountain.",
         "The quarterly tax report is due tomorrow."),
        ("Caroline is researching adoption agencies.", "Caroline is looking into agencies for adopting a child.",
         "Melanie ran a charity race for mental health."),
        ("When did Melanie paint a sunrise?", "Melanie painted a lake sunrise in 2022.",
         "My cat knocked the router off the shelf."),
    ],
)
def test_paraphrase_is_closer_than_unrelated(embedder, anchor, paraphrase, unrelated):
    a, p, u = embedder.embed([anchor, paraphrase, unrelated])
    assert float(a @ p) > float(a @ u) + 0.2, (float(a @ p), float(a @ u))


def test_cache_hit_returns_identical_vectors_without_reencoding(embedder, tmp_path):
    inner = embedder.inner if isinstance(embedder, CachedEmbedder) else embedder
    cache = CachedEmbedder(inner, tmp_path / "emb.sqlite")
    batch = TEXTS + [TEXTS[0], TEXTS[1]]  # duplicates inside a batch are encoded once
    first = cache.embed(batch)
    assert rows(cache.path) == len(set(batch))
    np.testing.assert_array_equal(first[0], first[len(TEXTS)])

    second = cache.embed(batch)
    assert rows(cache.path) == len(set(batch))  # nothing new written
    assert second.tobytes() == first.tobytes()  # bit-identical

    # Proof that the second call read the cache rather than the model: plant a marker
    # vector in the row of TEXTS[1]; a cache hit must return it verbatim.
    marker = np.zeros(384, np.float32)
    marker[7] = 1.0
    with sqlite3.connect(cache.path) as conn:
        conn.execute("UPDATE emb SET vec = ? WHERE key = ?", (marker.tobytes(), cache._key(TEXTS[1])))
    third = cache.embed([TEXTS[1], TEXTS[2]])
    np.testing.assert_array_equal(third[0], marker)
    np.testing.assert_array_equal(third[1], first[2])

    # a new text is a miss: encoded and added as one row
    cache.embed(["a sentence the cache has never seen"])
    assert rows(cache.path) == len(set(batch)) + 1


def test_cache_persists_across_instances_and_is_keyed_by_model(embedder, tmp_path):
    inner = embedder.inner if isinstance(embedder, CachedEmbedder) else embedder
    path = tmp_path / "emb.sqlite"
    v1 = CachedEmbedder(inner, path).embed(TEXTS[:2])
    reopened = CachedEmbedder(inner, path)
    assert rows(path) == 2
    assert reopened.embed(TEXTS[:2]).tobytes() == v1.tobytes()
    assert rows(path) == 2
    assert reopened._key("x") != reopened._key("x ")  # exact text, not normalized
    renamed = CachedEmbedder(inner, path)
    renamed.name = "another-model"
    assert renamed._key(TEXTS[0]) != reopened._key(TEXTS[0])


def test_cache_is_safe_from_many_threads(embedder, tmp_path):
    inner = embedder.inner if isinstance(embedder, CachedEmbedder) else embedder
    cache = CachedEmbedder(inner, tmp_path / "emb.sqlite")
    texts = [f"thread test sentence number {i}" for i in range(24)]
    expected = inner.embed(texts)
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            results[n] = cache.embed(texts[n % 3 :] + texts[: n % 3])
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for n, vecs in results.items():
        rolled = np.concatenate([expected[n % 3 :], expected[: n % 3]])
        np.testing.assert_allclose(vecs, rolled, atol=1e-5)
    assert rows(cache.path) == len(texts)


def test_unreadable_cache_file_is_a_one_line_cache_error(embedder, tmp_path):
    inner = embedder.inner if isinstance(embedder, CachedEmbedder) else embedder
    bad = tmp_path / "emb.sqlite"
    bad.write_bytes(b"this is not a sqlite database" * 100)
    with pytest.raises(CacheError) as info:
        CachedEmbedder(inner, bad)
    assert str(bad) in str(info.value) and "\n" not in str(info.value)


def test_make_embedder_returns_one_instance_per_config(embedder):
    assert make_embedder(EmbedderConfig()) is embedder
    assert isinstance(embedder, CachedEmbedder)  # cache on by default


def test_unknown_backend_and_missing_model_folder_are_model_errors(tmp_path):
    with pytest.raises(ModelError, match="unknown embedder backend 'nope'"):
        make_embedder(EmbedderConfig(backend="nope"))
    with pytest.raises(ModelError, match="not found"):
        SentenceTransformerEmbedder(EmbedderConfig(model_path=str(tmp_path / "no-such-model")))


class _DiesOnSecondBatch(HashingEmbedder):
    """A model that goes away mid-build (as a killed process does) after its first batch."""

    def __init__(self):
        super().__init__(EmbedderConfig(backend="hashing", dim=32))
        self.batches = 0

    def _encode(self, texts):
        self.batches += 1
        if self.batches > 1:
            raise KeyboardInterrupt("killed")
        return super()._encode(texts)


def test_a_build_killed_midway_keeps_the_chunks_it_committed(tmp_path):
    texts = [f"turn {i} of a long conversation" for i in range(COMMIT_EVERY * 2 + 7)]
    path = tmp_path / "emb.sqlite"
    with pytest.raises(KeyboardInterrupt):
        CachedEmbedder(_DiesOnSecondBatch(), path).embed(texts)
    assert rows(path) == COMMIT_EVERY  # the first chunk survived the kill

    resumed = _DiesOnSecondBatch()
    resumed.batches = -10  # healthy this time
    vecs = CachedEmbedder(resumed, path).embed(texts)
    assert resumed.batches == -10 + 2  # only the two chunks not yet committed were embedded
    assert rows(path) == len(texts)
    fresh = HashingEmbedder(EmbedderConfig(backend="hashing", dim=32)).embed(texts)
    np.testing.assert_array_equal(vecs, fresh)
