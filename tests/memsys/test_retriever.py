"""Hybrid retrieval on real data: LoCoMo conv-26 in a real store with the real MiniLM model.

Recall bounds were measured on conv-26 (197 questions with evidence, 419 turns, every turn
stored): omni preset (set_union cut at top_k 20) recall@20 = 0.384; the full union
(top_k = dense_k + sparse_k = 40) recall@40 = 0.632 against 0.504 for dense-only at 40.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from datetime import datetime

import numpy as np
import pytest

from harness.errors import ConfigError
from memsys.memory import Memory
from memsys.records import MAU, Modality, Status, Turn
from memsys.retrieve.retriever import Retriever, retrieve_many
from memsys.temporal import parse_datetime

#: the paper's retrieval (set-union of the dense top-20 and BM25), without issue #14's reranking steps
# the paper's retrieval over turn-level indexes (no neighbour context: its longer BM25 documents make the
# two BM25 backends' top hits agree less, which the side-by-side test below measures on turns)
PAPER_RETRIEVAL = ["memory.retrieval.merge=set_union", "memory.retrieval.top_k=20",
                   "memory.retrieval.speaker_first=false", "memory.retrieval.speaker_lift=0", "memory.retrieval.time_lift=0",
                   "memory.ingest.index_text.neighbors=0"]


def conv26(locomo_path):
    sample = next(s for s in json.loads(locomo_path.read_text(encoding="utf-8")) if s["sample_id"] == "conv-26")
    conv, turns, n = sample["conversation"], [], 1
    while f"session_{n}" in conv:
        when = parse_datetime(conv[f"session_{n}_date_time"])
        for t in conv[f"session_{n}"]:
            turns.append(Turn(t["dia_id"], t["speaker"], t["text"], when, f"session_{n}",
                              image_caption=t.get("blip_caption")))
        n += 1
    questions = [q for q in sample["qa"] if q.get("evidence")]
    return turns, questions


pytestmark = pytest.mark.xdist_group("locomo26")  # one worker ingests conv-26 once


@pytest.fixture(scope="module")
def locomo26(tmp_path_factory, locomo_path, embedder):
    """conv-26 ingested once with the omni preset and saved; questions embedded once."""
    turns, questions = conv26(locomo_path)
    path = tmp_path_factory.mktemp("conv26") / "store"
    mem = Memory.create(path, "omni", overrides=PAPER_RETRIEVAL)
    assert mem.embedder is embedder  # the session's model, not a second copy
    report = mem.add(turns)
    mem.save()
    qvecs = embedder.embed([q["question"] for q in questions])
    yield mem, path, turns, questions, qvecs, report
    mem.close()


def evidence_recall(retriever: Retriever, questions, qvecs, k: int) -> float:
    found = total = 0
    for q, v in zip(questions, qvecs):
        got = [c.mau.source_id for c in retriever.search(q["question"], query_vec=v)][:k]
        total += len(q["evidence"])
        found += sum(e in got for e in q["evidence"])
    return found / total


def with_retrieval(cfg, **changes):
    return replace(cfg, retrieval=replace(cfg.retrieval, **changes))


def test_conv26_is_fully_ingested(locomo26):
    mem, _, turns, questions, _, report = locomo26
    assert len(turns) == 419 and len(questions) >= 190
    assert report.accepted + report.rejected == 419 and len(mem) == report.accepted >= 400
    caption_turn = mem.store.get("D1:12")
    assert "[shared an image: a photo of a painting of a sunset over a lake]" in caption_turn.summary


def test_known_question_finds_its_evidence_turn(locomo26):
    mem = locomo26[0]
    r = mem.retrieve("When did Caroline go to the LGBTQ support group?")
    ids = r.context.source_ids
    assert "D1:3" in ids[:5]
    item = next(i for i in r.items if i.mau.id == "D1:3")
    assert item.mau.timestamp == datetime(2023, 5, 8, 13, 56)
    assert "yesterday = 7 May 2023" in r.context.render()  # resolved in code for the reader


def test_set_union_recall_on_conv26(locomo26):
    mem, _, _, questions, qvecs, _ = locomo26
    omni = Retriever(mem.store, mem.embedder, mem.cfg)
    assert mem.cfg.retrieval.merge == "set_union" and mem.cfg.retrieval.top_k == 20
    recall_20 = evidence_recall(omni, questions, qvecs, 20)
    assert recall_20 > 0.33, recall_20  # measured 0.384; random ranking gives ~0.05

    full_union = Retriever(mem.store, mem.embedder, with_retrieval(mem.cfg, top_k=40))
    dense_40 = Retriever(mem.store, mem.embedder, with_retrieval(mem.cfg, top_k=40, dense_k=40, merge="dense_only"))
    union_recall = evidence_recall(full_union, questions, qvecs, 40)
    dense_recall = evidence_recall(dense_40, questions, qvecs, 40)
    assert union_recall > 0.55, union_recall  # measured 0.632
    assert union_recall > dense_recall + 0.05, (union_recall, dense_recall)  # BM25-only hits add evidence


@pytest.mark.parametrize("merge", ["set_union", "rrf", "linear", "dense_only", "bm25_only"])
def test_every_merge_strategy_runs_with_consistent_sources(locomo26, merge):
    mem, _, _, questions, qvecs, _ = locomo26
    retriever = Retriever(mem.store, mem.embedder, with_retrieval(mem.cfg, merge=merge))
    dense_list = Retriever(mem.store, mem.embedder, with_retrieval(mem.cfg, merge="dense_only"))
    for q, v in list(zip(questions, qvecs))[:15]:
        cands = retriever.search(q["question"], query_vec=v)
        cap = 40 if merge == "set_union" else 20  # set-union appends BM25-only hits to the dense top-20
        assert 0 < len(cands) <= cap and len({c.mau.id for c in cands}) == len(cands)
        sims = mem.store.embeddings[[mem.store.positions[c.mau.id] for c in cands]] @ v
        np.testing.assert_allclose([c.similarity for c in cands], sims, atol=1e-5)
        if merge == "dense_only":
            assert all(c.sources == {"dense"} for c in cands)
            assert [c.similarity for c in cands] == sorted((c.similarity for c in cands), reverse=True)
        elif merge == "bm25_only":
            assert all(c.sources == {"sparse"} for c in cands)
        elif merge == "set_union":  # the dense list, in its own order, comes first
            dense_ids = [c.mau.id for c in dense_list.search(q["question"], query_vec=v)]
            assert [c.mau.id for c in cands][: len(dense_ids)] == dense_ids[: len(cands)]


def test_both_sparse_backends_serve_retrieval_side_by_side(locomo26):
    mem, _, _, questions, qvecs, _ = locomo26
    pairs = list(zip(questions[:30], qvecs[:30]))
    retrievers = {backend: Retriever(mem.store, mem.embedder,
                                     with_retrieval(mem.cfg, merge="bm25_only", sparse_backend=backend))
                  for backend in ("bm25s", "rank_bm25")}
    before = [retrievers["bm25s"].search(q["question"], query_vec=v)[0].mau.id for q, v in pairs]
    tops = {name: [r.search(q["question"], query_vec=v)[0].mau.id for q, v in pairs] for name, r in retrievers.items()}
    # building the second retriever did not switch the first one's index (the store is shared)
    assert tops["bm25s"] == before
    assert mem.store.sparse("bm25s").name == "bm25s" and mem.store.sparse("rank_bm25").name == "rank_bm25"
    assert mem.store.sparse_backend == "bm25s"
    agree = np.mean([a == b for a, b in zip(tops["bm25s"], tops["rank_bm25"])])
    assert agree >= 0.8, agree
    with pytest.raises(ConfigError, match="unknown sparse backend"):
        Retriever(mem.store, mem.embedder, with_retrieval(mem.cfg, sparse_backend="lucene"))


def test_retrieve_records_timings_and_respects_budgets(locomo26):
    mem = locomo26[0]
    r = mem.retrieve("What did Melanie paint?")
    assert {"embed", "dense", "sparse", "merge", "pyramid"} <= set(r.timings_ms)
    assert all(v >= 0 for v in r.timings_ms.values())
    assert r.context.total_tokens <= 6000 and 20 <= len(r.candidates) <= 40
    assert all(i.reason.startswith("top-k summary") for i in r.items)
    for budget in (0, 15, 60, 250):
        small = mem.retrieve("What did Melanie paint?", budget_tokens=budget)
        assert small.context.total_tokens <= budget and small.context.budget_tokens == budget
        assert len(small.items) + len(small.context.dropped) == len(small.candidates)


def test_precomputed_query_vector_gives_identical_results(locomo26):
    mem, _, _, questions, qvecs, _ = locomo26
    retriever = mem.retriever
    for q, v in list(zip(questions, qvecs))[:10]:
        a = retriever.retrieve(q["question"])
        b = retriever.retrieve(q["question"], query_vec=v)
        assert b.timings_ms["embed"] == 0.0
        assert [(i.mau.id, i.level, i.tokens) for i in a.items] == [(i.mau.id, i.level, i.tokens) for i in b.items]
    batch = retrieve_many(retriever, [q["question"] for q in questions[:5]])
    assert [x.context.mau_ids for x in batch] == [retriever.retrieve(q["question"]).context.mau_ids for q in questions[:5]]


def test_concurrent_retrieval_on_a_read_only_store_matches_sequential(locomo26):
    _, path, _, questions, _, _ = locomo26
    mem = Memory.open(path, read_only=True)
    try:
        queries = [q["question"] for q in questions[:24]]

        def snapshot(r):
            return [(i.mau.id, i.level, i.tokens, round(i.similarity, 5)) for i in r.items]

        expected = [snapshot(mem.retrieve(q)) for q in queries]
        results: dict[int, list] = {}
        errors: list[BaseException] = []

        def work(t: int) -> None:
            try:
                order = queries[t % len(queries):] + queries[: t % len(queries)]  # threads out of step
                got = {q: snapshot(mem.retrieve(q)) for q in order}
                results[t] = [got[q] for q in queries]
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert all(results[t] == expected for t in range(8))
    finally:
        mem.close()


def test_archived_memories_are_skipped_unless_included(tmp_path, embedder):
    mem = Memory.create(tmp_path / "s", "omni")
    mem.add([Turn(f"t{i}", "A", text) for i, text in enumerate(
        ["I adopted a golden retriever puppy.", "We painted the fence blue.", "My puppy chewed my shoes."])])
    archived = mem.store.get("t0")
    archived.status = Status.ARCHIVED
    mem.store.update([archived])
    assert "t0" not in mem.retrieve("puppy").context.mau_ids
    everything = Retriever(mem.store, embedder, with_retrieval(mem.cfg, include_archived=True))
    assert "t0" in everything.retrieve("puppy").context.mau_ids
    mem.close()


def test_text_only_readers_spend_no_budget_on_media(tmp_path, embedder):
    mem = Memory.create(tmp_path / "s", "omni")  # level3_media is off by default: the reader sees captions
    pointer = mem.store.cold.put(b"\xff\xd8\xff fake jpeg bytes", "jpg")
    mem.add_maus([MAU(id="img1", summary="a photo of a painting of a sunset over a lake", modality=Modality.IMAGE,
                      pointer=pointer, source_id="D1:12")])
    item = next(i for i in mem.context("painting of a sunset over a lake").items if i.mau.id == "img1")
    assert item.level == 2 and item.media == []


def test_level_3_loads_media_from_cold_storage(tmp_path, embedder):
    mem = Memory.create(tmp_path / "s", "omni", overrides=["memory.pyramid.level3_media=true"])
    image = b"\xff\xd8\xff fake jpeg bytes"
    pointer = mem.store.cold.put(image, "jpg")
    mem.add_maus([MAU(id="img1", summary="a photo of a painting of a sunset over a lake", modality=Modality.IMAGE,
                      pointer=pointer, source_id="D1:12"),
                  MAU(id="txt1", summary="we talked about the weather")])
    ctx = mem.context("painting of a sunset over a lake")
    item = next(i for i in ctx.items if i.mau.id == "img1")
    assert item.level == 3 and len(item.media) == 1
    part = item.media[0]
    assert part.tokens == mem.cfg.pyramid.modality_tokens["image"] and part.mime == "image/jpeg"
    assert open(part.path, "rb").read() == image
    assert ctx.total_tokens <= mem.cfg.pyramid.budget_tokens
    assert "D1:12" in ctx.source_ids
    mem.close()


def test_unknown_merge_strategy_is_a_config_error(locomo26):
    mem = locomo26[0]
    with pytest.raises(ConfigError, match="unknown merge strategy 'union'"):
        Retriever(mem.store, mem.embedder, with_retrieval(mem.cfg, merge="union"))
