"""The reader-free benches' stores (benchmarks/perf/stores.py), built from the real LoCoMo split."""

from __future__ import annotations

from benchmarks.datasets import load_benchmark
from benchmarks.perf.stores import memsys_turns, split_memories
from benchmarks.splits import load_benchmark_config, select


def test_only_the_conversations_holding_the_asked_questions_are_built_and_removed_after():
    dev = select(load_benchmark("locomo"), "dev", None, load_benchmark_config("locomo"))
    conv = dev.conversations[-1]
    qid = conv.questions[0].id
    seen = []
    for c, mem in split_memories("dev", "naive", (), {qid}):
        assert len(mem.store) > 0
        hits = mem.retrieve(conv.questions[0].question).candidates
        assert hits and all(h.mau.source_id for h in hits)
        assert mem.store.path.exists()
        seen.append((c.id, mem.store.path))
    assert [cid for cid, _ in seen] == [conv.id]
    assert not seen[0][1].exists()  # the temporary stores go with the loop
    assert len(memsys_turns(conv)) == sum(len(s.turns) for s in conv.sessions)


def test_a_mem_gallery_round_is_ingested_as_an_evaluation_ingests_it():
    from benchmarks.views import public_turn
    from memsys.predict import to_turn

    conv = load_benchmark("memgallery").conversations[0]
    turns = memsys_turns(conv)
    first = next(t for s in conv.sessions for t in s.turns if t.response and t.image_id)
    got = next(t for t in turns if t.id == first.id)
    assert got == to_turn(public_turn(conv, first))
    assert first.response in got.text and got.image_caption.startswith(first.image_id)
