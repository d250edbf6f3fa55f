"""Entity/relation extraction: the offline rules on hand-written turns, and the LLM
extractor against the scripted OpenAI-protocol server on 127.0.0.1."""

from __future__ import annotations

from datetime import datetime

import pytest

from harness.errors import LLMResponseFormatError
from memsys.config import LLMConfig
from memsys.graph.extract_llm import EXTRACTION_SCHEMA, LLMExtractor, parse_extraction
from memsys.graph.extract_rules import RuleExtractor
from memsys.graph.schema import ENTITY_TYPES, RELATION_TYPES, Extraction, normalize_name
from memsys.graph.text import split_sentences
from memsys.llm import LLMClient
from memsys.records import MAU
from memsys.temporal import resolve_relative_times
from tests.support.openai_server import OpenAITestServer, Reply, openai_server  # noqa: F401  (fixture)

SESSION = datetime(2023, 5, 8, 13, 56)


def mau(mid: str, speaker: str, text: str, ts: datetime = SESSION) -> MAU:
    return MAU(id=mid, summary=text, speaker=speaker, timestamp=ts, details={"text": text},
               time_mentions=resolve_relative_times(text, ts))


def entities(ex: Extraction) -> dict[str, tuple[str, float]]:
    return {e.name: (e.type, e.confidence) for e in ex.entities}


def relations(ex: Extraction) -> set[tuple[str, str, str]]:
    return {(r.source, r.type, r.target) for r in ex.relations}


CORPUS = [
    mau("D1:1", "Caroline", "I went to a LGBTQ support group yesterday and it was so powerful."),
    mau("D1:2", "Melanie", "Hey Caroline! My husband and I painted a lake sunrise last year."),
    mau("D1:3", "Caroline", "Thanks Mel! I talked to Dr. Smith about adoption. I live in Boston now."),
    mau("D1:4", "Melanie", "We went to the Pride Parade in New York on 3 June 2023. My dog Max loved it."),
    mau("D1:5", "Caroline", "I work at Stanford University. Harry Potter is still my favorite."),
    mau("D1:6", "Melanie", "May I ask what you read? Lately I loved Harry Potter too."),
]


@pytest.fixture(scope="module")
def rules() -> RuleExtractor:
    ex = RuleExtractor()
    ex.observe(CORPUS)
    return ex


def test_speaker_event_and_resolved_time(rules):
    ex = rules.extract(CORPUS[0])
    ents = entities(ex)
    assert ents["Caroline"][0] == "Person" and ents["Caroline"][1] == pytest.approx(0.95)
    assert ents["LGBTQ support group"][0] == "Event"
    assert ents["7 May 2023"][0] == "Time"  # "yesterday" resolved against the session date
    rels = relations(ex)
    assert ("Caroline", "occurs_at", "LGBTQ support group") in rels  # attendance -> occurs_at
    assert ("LGBTQ support group", "occurs_at", "7 May 2023") in rels
    assert all(r.type in RELATION_TYPES for r in ex.relations)
    assert all(e.type in ENTITY_TYPES for e in ex.entities)


def test_vocative_kin_and_created_object(rules):
    ex = rules.extract(CORPUS[1])
    ents, rels = entities(ex), relations(ex)
    assert ents["Caroline"][0] == "Person"
    assert ("Melanie", "interacts_with", "Caroline") in rels
    assert ents["Melanie's husband"][0] == "Person"  # "my husband": kin is a person, not an object
    assert ("Melanie", "interacts_with", "Melanie's husband") in rels
    assert ents["Melanie's lake sunrise"][0] == "Object"
    assert ("Melanie's lake sunrise", "created_by", "Melanie") in rels
    assert "2022" in ents  # "last year" in a 2023 session


def test_nickname_title_location(rules):
    ex = rules.extract(CORPUS[2])
    ents, rels = entities(ex), relations(ex)
    assert "Mel" not in ents and ("Caroline", "interacts_with", "Melanie") in rels  # unique prefix of a speaker
    assert ents["Dr. Smith"][0] == "Person" and "Dr" not in ents
    assert ents["Boston"][0] == "Location"
    assert ("Caroline", "located_in", "Boston") in rels


def test_named_event_place_date_and_owned_pet(rules):
    ex = rules.extract(CORPUS[3])
    ents, rels = entities(ex), relations(ex)
    assert ents["Pride Parade"][0] == "Event"
    assert ents["New York"][0] == "Location"
    assert ents["3 June 2023"][0] == "Time"
    assert ("Pride Parade", "occurs_at", "New York") in rels
    assert ("Pride Parade", "occurs_at", "3 June 2023") in rels
    assert ("Melanie", "owns", "Melanie's dog") in rels
    assert ("Melanie's dog", "related_to", "Max") in rels


def test_organization_membership_and_sentence_start_statistics(rules):
    ex = rules.extract(CORPUS[4])
    ents, rels = entities(ex), relations(ex)
    assert ents["Stanford University"][0] == "Organization"
    assert ("Caroline", "part_of", "Stanford University") in rels
    # sentence-initial, but "Harry Potter" recurs capitalized mid-sentence in the corpus
    assert "Harry Potter" in ents and ents["Harry Potter"][1] < 0.5
    # "May I ask": a month without a date cue is the verb; "Lately" is a common word
    ex6 = entities(rules.extract(CORPUS[5]))
    assert "May" not in ex6 and "Lately" not in ex6 and "Harry Potter" in ex6


def test_cooccurrence_is_low_confidence_related_to(rules):
    ex = rules.extract(CORPUS[3])
    cooc = [r for r in ex.relations if r.type == "related_to" and r.source == "New York"]
    assert cooc and all(r.confidence <= 0.3 for r in cooc)


def test_without_corpus_statistics_sentence_start_words_are_dropped():
    ex = RuleExtractor(speakers=["Jon"]).extract(mau("x", "Gina", "Visiting Paris was fun. Sounds great, Jon!"))
    ents = entities(ex)
    assert ents["Paris"][0] == "Location" and "Visiting Paris" not in ents and "Sounds" not in ents
    assert ents["Jon"][0] == "Person"


def test_sentence_split_keeps_titles():
    assert split_sentences("I met Dr. Smith. He was nice!") == ["I met Dr. Smith.", "He was nice!"]


def test_rule_throughput_is_reasonable(rules):
    import time

    maus = CORPUS * 100
    t0 = time.perf_counter()
    rules.extract_many(maus)
    assert len(maus) / (time.perf_counter() - t0) > 200  # turns/s; measured ~3,000 on LoCoMo


# --------------------------------------------------------------------------- LLM extractor
def llm_cfg(server: OpenAITestServer) -> LLMConfig:
    return LLMConfig(backend="openai", model="test-model", base_url=server.base_url,
                     api_key_env="MEMSYS_TEST_KEY_UNSET", timeout_s=5.0, max_retries=0, cache=False)


VALID = {
    "entities": [{"name": "Caroline", "type": "Person"}, {"name": "LGBTQ support group", "type": "Event"},
                 {"name": "7 May 2023", "type": "Time"}],
    "relations": [{"source": "Caroline", "target": "LGBTQ support group", "type": "occurs_at", "confidence": 0.9},
                  {"source": "LGBTQ support group", "target": "7 May 2023", "type": "occurs_at", "confidence": 0.8}],
}


def test_llm_valid_reply_sends_schema_and_counts_tokens(openai_server, monkeypatch):
    monkeypatch.delenv("MEMSYS_TEST_KEY_UNSET", raising=False)
    openai_server.enqueue(Reply.of_json(VALID, prompt_tokens=300, completion_tokens=60))
    with LLMClient(llm_cfg(openai_server)) as llm:
        ex = LLMExtractor(llm)
        out = ex.extract(CORPUS[0])
    assert relations(out) == {("Caroline", "occurs_at", "LGBTQ support group"),
                              ("LGBTQ support group", "occurs_at", "7 May 2023")}
    assert entities(out)["LGBTQ support group"][0] == "Event" and out.dropped == 0
    assert (out.prompt_tokens, out.completion_tokens) == (300, 60)
    assert ex.stats.calls == 1 and ex.stats.per_mau()["prompt_tokens"] == 300
    body = openai_server.chat_requests[0]
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["properties"] == EXTRACTION_SCHEMA["properties"]
    assert schema["properties"]["entities"]["items"]["properties"]["type"]["enum"] == list(ENTITY_TYPES)
    user = body["messages"][-1]["content"]
    assert "Speaker: Caroline" in user and "yesterday = 7 May 2023" in user and "support group" in user


def test_llm_invalid_items_are_dropped_and_counted(openai_server, monkeypatch):
    monkeypatch.delenv("MEMSYS_TEST_KEY_UNSET", raising=False)
    reply = {
        "entities": [{"name": "Caroline", "type": "Person"}, {"name": "  ", "type": "Concept"},
                     {"name": "x" * 200, "type": "Object"}, {"name": "Boston", "type": "Location"}],
        "relations": [
            {"source": "Caroline", "target": "Boston", "type": "located_in", "confidence": 0.7},  # kept
            {"source": "Caroline", "target": "Paris", "type": "located_in", "confidence": 0.7},  # unknown target
            {"source": "Boston", "target": "Boston", "type": "contains", "confidence": 0.5},  # self-loop
            {"source": "Caroline", "target": "Boston", "type": "owns", "confidence": 1.7},  # out of [0, 1]
        ],
    }
    openai_server.enqueue(Reply.of_json(reply))
    with LLMClient(llm_cfg(openai_server)) as llm:
        ex = LLMExtractor(llm)
        out = ex.extract(CORPUS[2])
    assert out.dropped == 5 and ex.stats.dropped_items == 5
    assert relations(out) == {("Caroline", "located_in", "Boston")}
    assert set(entities(out)) == {"Caroline", "Boston"}


def test_llm_malformed_reply_raises_format_error_and_batch_skips_it(openai_server, monkeypatch):
    monkeypatch.delenv("MEMSYS_TEST_KEY_UNSET", raising=False)
    bad_enum = {"entities": [{"name": "Caroline", "type": "Alien"}], "relations": []}
    openai_server.enqueue(Reply.ok("{not json"), Reply.of_json(bad_enum))
    with LLMClient(llm_cfg(openai_server)) as llm:
        ex = LLMExtractor(llm)
        with pytest.raises(LLMResponseFormatError):
            ex.extract(CORPUS[0])
        with pytest.raises(LLMResponseFormatError):  # breaks the schema's enum: the whole reply is refused
            ex.extract(CORPUS[0])
        openai_server.enqueue(Reply.ok("[]"), Reply.of_json(VALID))
        got = ex.extract_many(CORPUS[:2])
    assert [e.mau_id for e in got] == ["D1:2"]
    assert ex.stats.failed == 3 and ex.stats.calls == 4


def test_parse_extraction_adds_the_speaker_and_matches_names_loosely():
    out = parse_extraction("m", {"entities": [{"name": "the Louvre", "type": "Location"}],
                                 "relations": [{"source": "caroline", "target": "Louvre", "type": "related_to",
                                                "confidence": 0.5}]}, speaker="Caroline")
    assert relations(out) == {("Caroline", "related_to", "the Louvre")}
    assert normalize_name("the Louvre") == "louvre"
