"""Steps after the merge (memsys/retrieve/rerank.py) and their wiring in the Retriever."""

from __future__ import annotations

from datetime import datetime

from memsys.memory import Memory
from memsys.records import MAU, Link, LinkKind, TimeMention, Turn
from memsys.retrieve.pyramid import RankedCandidate
from memsys.retrieve.rerank import expand_neighbors, fuse_graph, lift_dated, lift_speaker, named_speakers, speaker_first

TS = datetime(2023, 5, 8, 13, 56)


def cand(mid: str, speaker: str = "Caroline", links: list[Link] | None = None) -> RankedCandidate:
    return RankedCandidate(MAU(mid, f"text {mid}", speaker=speaker, links=links or []), 0.5, {"dense"})


def ids(cands) -> list[str]:
    return [c.mau.id for c in cands]


def test_named_speakers_match_first_or_full_names_as_words():
    speakers = {"Caroline", "Melanie Smith"}
    assert named_speakers("When did Caroline paint?", speakers) == {"Caroline"}
    assert named_speakers("What did melanie's kids like?", speakers) == {"Melanie Smith"}
    assert named_speakers("Who is Carol?", speakers) == set()


def test_speaker_first_moves_the_named_speakers_turns_ahead_and_keeps_each_groups_order():
    cands = [cand("a", "Melanie"), cand("b", "Caroline"), cand("c", "Melanie"), cand("d", "Caroline")]
    speakers = {"Caroline", "Melanie"}
    assert ids(speaker_first(cands, "What did Caroline paint?", speakers)) == ["b", "d", "a", "c"]
    # nobody named, or everybody: the order stands
    assert ids(speaker_first(cands, "What was painted?", speakers)) == ["a", "b", "c", "d"]
    assert ids(speaker_first(cands, "Did Caroline and Melanie paint?", speakers)) == ["a", "b", "c", "d"]


def test_lift_speaker_moves_each_named_turn_up_so_many_places_and_no_further():
    speakers = {"Caroline", "Melanie"}
    cands = [cand("m0", "Melanie"), cand("m1", "Melanie"), cand("m2", "Melanie"), cand("c3"), cand("m4", "Melanie"),
             cand("c5")]
    q = "What did Caroline paint?"
    # c3 passes m1 and m2; c5 passes m4 but not m2, which was three places ahead of it
    assert ids(lift_speaker(cands, q, speakers, 2)) == ["m0", "c3", "m1", "m2", "c5", "m4"]
    # a lift past the list's length is speaker_first; zero, nobody named or everybody named: the order stands
    assert ids(lift_speaker(cands, q, speakers, 40)) == ids(speaker_first(cands, q, speakers))
    assert ids(lift_speaker(cands, q, speakers, 0)) == ids(cands)
    assert ids(lift_speaker(cands, "What was painted?", speakers, 2)) == ids(cands)
    assert ids(lift_speaker(cands, "Did Caroline and Melanie paint?", speakers, 2)) == ids(cands)


def test_lift_dated_acts_on_when_questions_only():
    dated = MAU("d", "yesterday", speaker="Caroline", time_mentions=[TimeMention("yesterday", TS, TS, "day")])
    cands = [cand("a"), cand("b"), RankedCandidate(dated, 0.5, {"dense"})]
    assert ids(lift_dated(cands, "When did Caroline paint?", 1)) == ["a", "d", "b"]
    assert ids(lift_dated(cands, "What did Caroline paint?", 5)) == ["a", "b", "d"]


def test_fuse_graph_ranks_a_hit_in_both_lists_above_one_in_a_single_list():
    cands = [cand("a"), cand("b"), cand("c")]
    graph = [cand("c"), cand("g")]
    fused = fuse_graph(cands, graph, rrf_k=60, weight=1.0)
    assert ids(fused) == ["c", "a", "b", "g"]  # b and g tie (rank 2 each): the retrieval list first
    assert fused[0].sources == {"dense", "graph"} and fused[2].sources == {"dense"}


def test_expand_neighbors_puts_session_neighbours_right_after_the_best_candidates():
    maus = {m.id: m for m in (
        MAU("t1", "x", links=[Link(LinkKind.NEXT, "t2")]),
        MAU("t2", "x", links=[Link(LinkKind.PREV, "t1"), Link(LinkKind.NEXT, "t3")]),
        MAU("t3", "x", links=[Link(LinkKind.PREV, "t2"), Link(LinkKind.NEXT, "t4")]),
        MAU("t4", "x", links=[Link(LinkKind.PREV, "t3")]),
        MAU("t9", "x"),
    )}
    cands = [RankedCandidate(maus["t3"], 0.9, {"dense"}), RankedCandidate(maus["t9"], 0.8, {"dense"}),
             RankedCandidate(maus["t2"], 0.7, {"dense"})]
    out = expand_neighbors(cands, top=1, window=1, get=maus.get, similarity=lambda ms: [0.1] * len(ms))
    assert ids(out) == ["t3", "t2", "t4", "t9"]  # t2 moved up once, not listed twice
    assert out[2].sources == {"neighbor"} and out[2].similarity == 0.1
    wide = expand_neighbors(cands, top=1, window=2, get=maus.get, similarity=lambda ms: [0.0] * len(ms))
    assert ids(wide) == ["t3", "t2", "t1", "t4", "t9"]
    assert ids(expand_neighbors(cands, top=0, window=2, get=maus.get, similarity=lambda ms: [])) == ["t3", "t9", "t2"]


def test_retriever_applies_speaker_first_and_neighbour_expansion(tmp_path, embedder):
    turns = [Turn("D1:1", "Melanie", "What did you paint last weekend?", TS, "S1"),
             Turn("D1:2", "Caroline", "A lake sunrise, it took me all morning.", TS, "S1"),
             Turn("D1:3", "Melanie", "I painted a lake sunrise too.", TS, "S1"),
             Turn("D2:1", "Caroline", "I joined a choir.", TS, "S2")]
    overrides = ["memory.graph.enabled=false", "memory.retrieval.speaker_first=true",
                 "memory.retrieval.expand_top=1", "memory.retrieval.merge=dense_only"]
    mem = Memory.create(tmp_path / "s", "omni", overrides=overrides)
    mem.add(turns)
    got = [c.mau.id for c in mem.retrieve("What did Caroline paint at the lake?").candidates]
    assert got[0] == "D1:2" and got[1:3] == ["D1:1", "D1:3"]  # her turn first, then its neighbours
    assert [c.sources for c in mem.retrieve("What did Caroline paint at the lake?").candidates][1] == {"neighbor"}
    mem.close()


def test_retriever_lifts_the_named_speaker_only_when_speaker_first_is_off(tmp_path, embedder):
    turns = [Turn("D1:1", "Melanie", "I painted a lake sunrise last weekend.", TS, "S1"),
             Turn("D1:2", "Melanie", "The lake was calm and the sunrise pink.", TS, "S1"),
             Turn("D1:3", "Caroline", "Nice. I bake bread on weekends.", TS, "S1")]
    base = ["memory.graph.enabled=false", "memory.retrieval.merge=dense_only", "memory.ingest.index_text.neighbors=0",
            "memory.retrieval.speaker_first=false", "memory.retrieval.time_lift=0"]
    q = "What did Caroline paint at the lake at sunrise?"
    order = {}
    for lift in (0, 1, 5):
        mem = Memory.create(tmp_path / f"s{lift}", "omni", overrides=[*base, f"memory.retrieval.speaker_lift={lift}"])
        mem.add(turns)
        order[lift] = [c.mau.id for c in mem.retrieve(q).candidates]
        mem.close()
    assert order[0][-1] == "D1:3"  # her bread turn matches the lake question least
    assert order[1].index("D1:3") == order[0].index("D1:3") - 1
    assert order[5][0] == "D1:3"
