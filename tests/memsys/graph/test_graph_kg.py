"""KnowledgeGraph: BFS scoring by hand, seeds, facts, SQLite round trip, incremental
builds through Memory, concurrent augment, and an LLM-extracted build."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import pytest

from memsys.config import EmbedderConfig, GraphConfig, LLMConfig, MemoryConfig
from memsys.graph import KnowledgeGraph, build_graph
from memsys.graph.schema import Entity, Relation
from memsys.llm import LLMClient
from memsys.memory import Memory
from memsys.records import Turn
from memsys.store.store import MemoryStore
from tests.support.openai_server import OpenAITestServer, Reply  # noqa: F401

HASHING = EmbedderConfig(backend="hashing", dim=64, cache=False)
S1, S2 = datetime(2023, 5, 8, 13, 56), datetime(2023, 5, 25, 10, 0)


def small_graph(**cfg) -> KnowledgeGraph:
    """caroline -> group <- support-topic <- dana ; erin is isolated.

    Directions are mixed on purpose: reachability treats edges as undirected.
    """
    ents = [
        Entity("person:caroline", "Caroline", "Person", [], 0.9, ["m1"]),
        Entity("event:lgbtq support group", "LGBTQ support group", "Event", ["support group meeting"], 0.8, ["m1", "m2"]),
        Entity("concept:transgender", "transgender", "Concept", [], 0.6, ["m3"]),
        Entity("person:dana", "Dana", "Person", [], 1.0, ["m4"]),
        Entity("person:erin", "Erin Smith", "Person", [], 0.7, ["m5"]),
    ]
    rels = [
        Relation("person:caroline", "event:lgbtq support group", "occurs_at", 0.7, "m1"),
        Relation("concept:transgender", "event:lgbtq support group", "related_to", 0.3, "m3"),
        Relation("person:dana", "concept:transgender", "related_to", 0.3, "m4"),
    ]
    dates = {"m1": "7 May 2023", "m2": "20 May 2023", "m3": "1 June 2023", "m4": None, "m5": None}
    return KnowledgeGraph(ents, rels, GraphConfig(**{"hops": 2, "beta": 0.5, "min_score": 0.2, **cfg}), dates)


def test_bfs_scores_are_beta_to_the_distance_times_confidence():
    kg = small_graph()
    hits = kg.search("Where did Caroline go?")
    assert [s.entity_id for s in hits.seeds] == ["person:caroline"]
    assert hits.reached == {
        "person:caroline": (0, pytest.approx(0.9)),  # 0.5^0 * 0.9
        "event:lgbtq support group": (1, pytest.approx(0.4)),  # 0.5^1 * 0.8
        "concept:transgender": (2, pytest.approx(0.15)),  # 0.5^2 * 0.6, below min_score
    }  # dana is 3 hops away, erin unreachable
    # MAU score: max over its entities of r(v) * spec(v), spec = 1 / (1 + ln |M(v)|)
    spec_group = 1 / (1 + math.log(2))
    assert hits.maus == [("m1", pytest.approx(0.9)), ("m2", pytest.approx(0.4 * spec_group, abs=1e-6))]
    assert kg.augment("Where did Caroline go?") == (hits.maus, hits.facts)


def test_more_hops_reach_further_and_min_score_filters():
    kg = small_graph(hops=3, min_score=0.1)
    hits = kg.search("caroline")
    assert hits.reached["person:dana"] == (3, pytest.approx(0.125))  # 0.5^3 * 1.0
    assert {m for m, _ in hits.maus} == {"m1", "m2", "m3", "m4"}
    assert small_graph(max_maus=1).augment("caroline")[0] == [("m1", pytest.approx(0.9))]


def test_facts_name_both_ends_type_and_dates():
    # two seeds (d=0); transgender d=1 (r=0.3), dana d=2 (r=0.25): all above min_score
    # fact score conf * (s(src) + s(dst)) / 2: 0.7*(0.9+0.47)/2 > 0.3*(0.3+0.47)/2 > 0.3*(0.25+0.3)/2
    facts = small_graph().search("When did Caroline attend the support group meeting?").facts
    assert facts == [
        "Caroline --occurs_at--> LGBTQ support group (7 May 2023)",
        "transgender --related_to--> LGBTQ support group (1 June 2023)",
        "Dana --related_to--> transgender",  # its MAU has no date
    ]
    assert len(small_graph(max_facts=1).search("caroline").facts) == 1


def test_seeds_exact_alias_partial_fuzzy_and_cap():
    kg = small_graph()
    seeds = {s.entity_id: s for s in kg.find_seeds("Did Erin and Caroline meet at the support group meeting?")}
    assert seeds["event:lgbtq support group"].match == 1.0  # alias "support group meeting"
    assert seeds["person:erin"].match == pytest.approx(0.9)  # a token of "Erin Smith"
    assert "person:caroline" in seeds
    fuzzy = kg.find_seeds("what about Carolin?")  # typo: Jaro-Winkler >= 0.92
    assert [s.entity_id for s in fuzzy] == ["person:caroline"] and fuzzy[0].match < 1.0
    assert kg.find_seeds("What did they do there?") == []  # stopwords only
    capped = small_graph(max_seeds=1).find_seeds("Caroline, Dana and Erin Smith")
    assert len(capped) == 1


def test_concurrent_augment_matches_sequential():
    kg = small_graph(hops=3, min_score=0.1)
    queries = ["caroline", "support group", "Dana and transgender", "Erin Smith", "nothing here"] * 40
    expected = [kg.augment(q) for q in queries]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(kg.augment, queries))
    assert got == expected


def test_save_load_round_trip_in_the_store(tmp_path):
    store = MemoryStore.create(tmp_path / "s", embedder_name="hashing-64", dim=64)
    assert KnowledgeGraph.load(store) is None  # no graph saved yet
    kg = small_graph()
    kg.save(store)
    kg.save(store)  # saving again replaces, never duplicates
    store.close()
    ro = MemoryStore.open(tmp_path / "s", read_only=True)
    back = KnowledgeGraph.load(ro, kg.cfg)
    assert back is not None
    assert {e.id: (e.name, e.type, e.aliases, e.confidence, e.mau_ids) for e in back.entities.values()} == \
           {e.id: (e.name, e.type, e.aliases, e.confidence, e.mau_ids) for e in kg.entities.values()}
    assert back.relations == kg.relations
    assert back.graph.number_of_edges() == 3 and back.graph.number_of_nodes() == 5
    assert back.augment("caroline")[0] == kg.augment("caroline")[0]
    ro.close()


# --------------------------------------------------------------------------- builds through Memory
TURNS_1 = [
    Turn("D1:1", "Caroline", "Hey Mel! I went to a LGBTQ support group yesterday.", S1, "session_1"),
    Turn("D1:2", "Melanie", "That's great, Caroline! My kids loved the Pride Parade in Boston.", S1, "session_1"),
    Turn("D1:3", "Caroline", "I talked to Dr. Smith about adoption agencies.", S1, "session_1"),
]
TURNS_2 = [
    Turn("D2:1", "Melanie", "I ran a charity race last Saturday for mental health.", S2, "session_2"),
    Turn("D2:2", "Caroline", "John Smith from the adoption agency called me back.", S2, "session_2"),
]


@pytest.fixture
def memory(tmp_path):
    cfg = MemoryConfig(embedder=HASHING, graph=GraphConfig(enabled=True))
    mem = Memory.create(tmp_path / "mem", cfg)
    yield mem
    mem.close()


def test_build_is_incremental_saves_and_attaches(memory, tmp_path):
    memory.add(TURNS_1)
    kg1 = build_graph(memory, progress=False)
    assert kg1.build_report.extracted == 3 and kg1.build_report.reused == 0
    assert memory._graph is kg1
    memory.add(TURNS_2)
    kg2 = build_graph(memory, progress=False)
    rep = kg2.build_report
    assert (rep.extracted, rep.reused, rep.failed) == (2, 3, 0)
    assert rep.entities == len(kg2.entities) and rep.relations == len(kg2.relations)
    # incremental == full rebuild from the same extractions
    full = build_graph(memory.store, embedder=memory.embedder, cfg=memory.cfg.graph, rebuild=True, progress=False)
    assert full.build_report.extracted == 5
    assert sorted(full.entities) == sorted(kg2.entities) and sorted(map(repr, full.relations)) == sorted(map(repr, kg2.relations))
    # the graph links the query's entities to their turns
    maus, facts = kg2.augment("When did Melanie run the charity race?")
    assert maus[0][0] == "D2:1"
    assert any(f.startswith("Melanie --occurs_at--> charity race") for f in facts)
    assert "Caroline --occurs_at--> LGBTQ support group (7 May 2023)" in kg2.augment("LGBTQ support group")[1]
    # saved: Memory.open-style load sees the same graph
    memory.save()
    loaded = KnowledgeGraph.load(memory.store, memory.cfg.graph)
    assert sorted(loaded.entities) == sorted(kg2.entities)
    assert loaded.augment("charity race") == kg2.augment("charity race")


def test_retrieval_uses_the_attached_graph(memory):
    memory.add(TURNS_1 + TURNS_2)
    build_graph(memory, progress=False)
    r = memory.retrieve("What did Dr. Smith say about adoption?")
    assert r.context.graph_facts, "graph facts reach the reader context"
    assert any("Smith" in f for f in r.context.graph_facts)


def test_llm_build_counts_failures_and_retries_them(memory, monkeypatch):
    monkeypatch.delenv("MEMSYS_TEST_KEY_UNSET", raising=False)
    memory.add(TURNS_1)

    def handler(request):
        text = request["messages"][-1]["content"]
        if "Dr. Smith" in text:
            return Reply.ok("not json at all")
        return {"entities": [{"name": "Caroline", "type": "Person"}, {"name": "Melanie", "type": "Person"}],
                "relations": [{"source": "Caroline", "target": "Melanie", "type": "interacts_with", "confidence": 0.9}]}

    with OpenAITestServer(handler) as srv:
        cfg = LLMConfig(backend="openai", model="test-model", base_url=srv.base_url,
                        api_key_env="MEMSYS_TEST_KEY_UNSET", timeout_s=5.0, max_retries=0, cache=False)
        with LLMClient(cfg) as llm:
            kg = build_graph(memory, extractor="llm", llm=llm, progress=False)
            rep = kg.build_report
            assert (rep.extracted, rep.failed, rep.llm_calls) == (2, 1, 3)
            assert rep.prompt_tokens > 0 and rep.completion_tokens > 0
            assert kg.entity("Caroline").type == "Person"
            srv.handler = lambda request: {"entities": [], "relations": []}
            again = build_graph(memory, extractor="llm", llm=llm, progress=False)
            assert (again.build_report.extracted, again.build_report.reused) == (1, 2)  # only the failed MAU
            assert len(srv.chat_requests) == 4


_PROBE = """
import hashlib, json, sys, tempfile
from benchmarks.datasets.locomo import load_locomo
from benchmarks.datasets.schema import iter_turns
from harness.paths import data_dir
from memsys.config import EmbedderConfig, GraphConfig, MemoryConfig
from memsys.memory import Memory
from memsys.records import Turn
conv = [c for c in load_locomo(data_dir() / "locomo" / "locomo10.json").conversations if c.id == "conv-30"][0]
cfg = MemoryConfig(name="probe", embedder=EmbedderConfig(backend="hashing", dim=64, cache=False),
                   graph=GraphConfig(enabled=True))
with tempfile.TemporaryDirectory() as d:
    mem = Memory.create(d + "/s", cfg)
    mem.add([Turn(t.id, t.speaker, t.text, t.timestamp, t.session_id) for t in iter_turns(conv)])
    kg = mem.build_graph()
    out = [[list(kg.search(q.question).reached.items()), kg.search(q.question).maus] for q in conv.questions[:60]]
    print(hashlib.sha256(json.dumps(out).encode()).hexdigest())
"""


@pytest.mark.slow
def test_graph_answers_do_not_depend_on_the_hash_seed(locomo_path):
    """Two processes with different string hashing must rank the same memories in the same order (the
    undirected view networkx builds from a directed graph orders neighbours through sets)."""
    import os
    import subprocess
    import sys

    digests = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        digests.add(out.stdout.strip().splitlines()[-1])
    assert len(digests) == 1
