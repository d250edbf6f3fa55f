"""Sparse index: BM25 over MAU text, both backends (bm25s, rank_bm25) on the same tokenizer."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from harness.errors import ConfigError
from memsys.index.sparse import STOPWORDS, _top, make_sparse_index, tokenize

BACKENDS = ["bm25s", "rank_bm25"]

CORPUS = [
    "Caroline went to a LGBTQ support group yesterday.",  # 0
    "Melanie painted a sunrise over the lake last year.",  # 1
    "We went camping at the beach and saw the Perseid meteor shower.",  # 2
    "Caroline is researching adoption agencies.",  # 3
    "Melanie signed up for a pottery class; the pottery bowl has a dog face.",  # 4
    "",  # 5: empty text must not break indexing
    "The the the and of a an",  # 6: only stop words
    "Caroline and Melanie talked about the support group again.",  # 7
]


@pytest.fixture(params=BACKENDS)
def index(request):
    idx = make_sparse_index(request.param)
    idx.build(CORPUS)
    return idx


def test_tokenize_lowercases_splits_punctuation_and_drops_stopwords():
    assert tokenize("Caroline's LGBTQ-support group, in 2023!") == ["caroline", "s", "lgbtq", "support", "group", "2023"]
    assert tokenize("The and of a") == []
    assert {"the", "a", "and", "of"} <= STOPWORDS


def test_exact_terms_rank_the_matching_document_first(index):
    assert len(index) == len(CORPUS)
    assert index.search("adoption agencies", 3)[0][0] == 3
    assert index.search("Perseid meteor", 3)[0][0] == 2
    assert index.search("pottery", 3)[0][0] == 4  # term frequency 2


def test_only_documents_with_a_query_term_are_returned_with_positive_scores(index):
    hits = index.search("support group", 10)
    assert {p for p, _ in hits} == {0, 7}
    assert all(s > 0 for _, s in hits)
    assert hits == sorted(hits, key=lambda h: (-h[1], h[0]))


def test_rare_terms_outweigh_common_ones(index):
    # "caroline" is in 3 documents, "adoption" in one: the rare term decides
    assert index.search("caroline adoption", 1)[0][0] == 3


@pytest.mark.parametrize("query", ["", "   ", "the and of", "xylophone zeppelin", "!!!"])
def test_queries_without_known_terms_return_nothing(index, query):
    assert index.search(query, 5) == []


def test_k_cuts_and_non_positive_k(index):
    assert len(index.search("caroline melanie", 2)) == 2
    assert index.search("caroline", 0) == [] and index.search("caroline", -3) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_corpus(backend):
    idx = make_sparse_index(backend)
    idx.build([])
    assert len(idx) == 0 and idx.search("anything", 5) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_identical_documents_tie_in_position_order(backend):
    idx = make_sparse_index(backend)
    idx.build(["unrelated words here"] + ["the red kite flew"] * 6 + ["other text entirely"])
    hits = idx.search("red kite", 3)
    assert [p for p, _ in hits] == [1, 2, 3]
    assert len({s for _, s in hits}) == 1


def test_top_breaks_ties_at_the_cut_by_position():
    rng = np.random.default_rng(0)
    for _ in range(500):
        n = int(rng.integers(1, 40))
        scores = rng.integers(0, 3, n).astype(float)
        k = int(rng.integers(0, n + 2))
        expected = [int(i) for i in np.lexsort((np.arange(n), -scores))[:k] if scores[i] > 0]
        assert [p for p, _ in _top(scores, k)] == expected


def test_backends_agree_on_the_top_document():
    a, b = make_sparse_index("bm25s"), make_sparse_index("rank_bm25")
    a.build(CORPUS)
    b.build(CORPUS)
    for q in ["adoption agencies", "meteor shower camping", "pottery dog", "sunrise lake painting", "LGBTQ"]:
        assert a.search(q, 1)[0][0] == b.search(q, 1)[0][0], q


def test_concurrent_searches_agree_with_sequential(index):
    queries = ["support group", "pottery", "caroline melanie", "meteor", "adoption"] * 4
    expected = [index.search(q, 5) for q in queries]
    results: dict[int, list] = {}

    def work(t: int) -> None:
        results[t] = [index.search(q, 5) for q in queries]

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(results[t] == expected for t in range(8))


def test_unknown_backend_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown sparse backend 'elastic'"):
        make_sparse_index("elastic")
