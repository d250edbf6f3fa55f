"""Entity resolution with the real MiniLM name embeddings (hybrid cosine + Jaro-Winkler)."""

from __future__ import annotations

import time

import pytest

from memsys.config import EmbedderConfig, GraphConfig
from memsys.embed import make_embedder
from memsys.graph.resolve import collect_surface_forms, noisy_or, resolve_entities, resolve_extractions
from memsys.graph.schema import ExtractedEntity, Extraction, core_name, normalize_name, split_owner

CFG = GraphConfig()


def ex(mau_id: str, *entities: tuple[str, str] | tuple[str, str, float]) -> Extraction:
    return Extraction(mau_id, [ExtractedEntity(e[0], e[1], e[2] if len(e) > 2 else 0.8) for e in entities])


def resolve(extractions, embedder, **kw):
    return resolve_extractions(extractions, embedder, threshold=kw.get("threshold", CFG.resolve_threshold),
                               cosine_weight=kw.get("w", CFG.resolve_cosine_weight))


def cluster_of(res, name: str) -> set[str]:
    canon = res.canonical_of[normalize_name(name)]
    return {res.forms[k].name for k in res.clusters[canon]}


def test_normalization_titles_owner_and_articles():
    assert normalize_name("Dr. Smith") == "dr smith" and core_name("dr smith") == "smith"
    assert normalize_name("Melanie\u2019s Dog") == "melanie 's dog"
    assert split_owner("melanie 's dog") == ("melanie", "dog")
    assert normalize_name("The Louvre") == "louvre" and normalize_name("Caroline's") == "caroline"


def test_title_and_last_name_merge_with_full_name(embedder):
    res = resolve([ex("m1", ("Dr. Smith", "Person")), ex("m2", ("John Smith", "Person")),
                   ex("m3", ("John Smith", "Person"))], embedder)
    assert cluster_of(res, "Dr. Smith") == {"Dr. Smith", "John Smith"}
    assert res.forms[res.canonical_of["dr smith"]].name == "John Smith"  # the most specific name
    assert res.collapsed == 1 and res.merges[0].aliases == ("Dr. Smith",)


def test_distinct_people_stay_apart_even_through_a_shared_first_name(embedder):
    res = resolve([ex("m1", ("John Smith", "Person")), ex("m2", ("John Doe", "Person")),
                   ex("m3", ("John", "Person")), ex("m4", ("Caroline", "Person")), ex("m5", ("Melanie", "Person"))],
                  embedder)
    assert res.canonical_of["john smith"] != res.canonical_of["john doe"]
    assert cluster_of(res, "John") == {"John"}  # ambiguous containment is no cue
    assert res.canonical_of["caroline"] != res.canonical_of["melanie"]


def test_only_same_type_merges_and_type_is_voted(embedder):
    res = resolve([ex("m1", ("Paris", "Location", 0.8)), ex("m2", ("Paris", "Concept", 0.5)),
                   ex("m3", ("paris", "Person", 0.5)), ex("m4", ("Jordan", "Person")), ex("m5", ("Jordan river", "Location"))],
                  embedder)
    assert res.forms["paris"].type == "Location"  # 0.8 beats Concept's half-weighted 0.25 and Person 0.5
    assert res.forms["paris"].mentions == 3 and res.forms["paris"].name == "Paris"
    assert res.canonical_of["jordan"] != res.canonical_of["jordan river"]


def test_dates_numbers_and_owners_never_fuzzy_merge(embedder):
    res = resolve([ex("m1", ("7 May 2023", "Time"), ("Route 66", "Location")),
                   ex("m2", ("8 May 2023", "Time"), ("Route 67", "Location")),
                   ex("m3", ("Melanie's son", "Person"), ("Melanie's mom", "Person")),
                   ex("m4", ("Melanie's painting", "Object"), ("Melanie's paintings", "Object"),
                      ("Caroline's painting", "Object"))], embedder)
    for a, b in [("7 May 2023", "8 May 2023"), ("Route 66", "Route 67"), ("Melanie's son", "Melanie's mom"),
                 ("Melanie's painting", "Caroline's painting")]:
        assert res.canonical_of[normalize_name(a)] != res.canonical_of[normalize_name(b)], (a, b)
    assert res.canonical_of[normalize_name("Melanie's paintings")] == res.canonical_of[normalize_name("Melanie's painting")]


def test_threshold_and_weight_are_the_knobs(embedder):
    forms = [ex("m1", ("charity race", "Event")), ex("m2", ("charity run", "Event"))]
    merged = resolve(forms, embedder)
    assert merged.collapsed == 1  # hybrid ~0.87 > 0.85
    assert resolve(forms, embedder, threshold=0.95).collapsed == 0
    assert resolve(forms, embedder, w=1.0, threshold=0.9).collapsed == 0  # cosine alone is 0.83


def test_noisy_or_confidence_and_mentions():
    assert noisy_or([0.5, 0.5]) == pytest.approx(0.75)
    forms = collect_surface_forms([ex("a", ("Boston", "Location", 0.5)), ex("b", ("boston", "Location", 0.5))])
    assert forms["boston"].confidence == pytest.approx(0.75) and forms["boston"].mau_ids == ["a", "b"]


def test_blocking_scales_to_thousands_of_forms():
    """Hashing vectors (quality irrelevant here): 6,000 forms must resolve in seconds."""
    emb = make_embedder(EmbedderConfig(backend="hashing", cache=False))
    words = [f"{a}{b}{c}" for a in "bcdfghklmnprst" for b in "aeiou" for c in ["lo", "ra", "ne", "ki", "tu", "mo"]]
    extractions = [ex(f"m{i}", (f"{w} {v}", t)) for i, (w, v, t) in enumerate(
        (w, v, t) for w in words for v in ("park", "group", "club", "fest") for t in ("Concept", "Event"))]
    assert len(extractions) > 3000
    forms = collect_surface_forms(extractions)
    t0 = time.perf_counter()
    res = resolve_entities(forms, emb, threshold=0.85, cosine_weight=0.5)
    elapsed = time.perf_counter() - t0
    n = len(forms)
    assert res.pairs_compared < n * (n - 1) // 2 // 5  # blocking: far fewer than all pairs
    assert elapsed < 30
