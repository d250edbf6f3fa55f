"""What the reader is given under issue #14's reader-input levers: answer-type hints, compact graph
facts, extractive level-1 summaries; the JSON-schema reply path with them; and the per-question
digest the reader-free screen compares (memsys.predict.reader_input_digest).

Real parts: a store over LoCoMo conv-26's first sessions (MiniLM, FAISS, BM25, the rule-based graph)
and a real OpenAI-protocol server for the reply path.
"""

from __future__ import annotations

import pytest

from benchmarks.datasets.locomo import load_locomo
from benchmarks.datasets.schema import iter_turns
from harness.tokens import count_tokens
from memsys.answer.generate import ABSTAIN_TEXT, ANSWER_SCHEMA, answer_question, build_messages
from memsys.answer.hints import TYPE_HINTS
from memsys.config import LLMConfig
from memsys.errors import ConfigError
from memsys.llm.client import LLMClient
from memsys.memory import Memory
from memsys.predict import reader_input_digest
from memsys.records import Turn
from memsys.retrieve.facts import FACTS_HEADER, compact_facts, parse_fact, render_facts
from tests.support.openai_server import OpenAITestServer, Reply, openai_server  # noqa: F401  (fixture)

GRAPH = ("memory.graph.enabled=true",)
QUESTIONS = ["When did Caroline go to the LGBTQ support group?", "What did Melanie paint recently?",
             "How many children does Melanie have?", "Is Caroline going to adopt a child?"]
JSON_REPLY = 'Reply with a JSON object {"answer": "..."}.'


@pytest.fixture(scope="module")
def store(tmp_path_factory, locomo_path, embedder):
    conv = load_locomo(locomo_path).conversation("conv-26")
    turns = [Turn(t.id, t.speaker, t.text, t.timestamp, t.session_id, image_caption=t.image_caption)
             for t in iter_turns(conv) if t.session_id in ("session_1", "session_2", "session_3")]
    path = tmp_path_factory.mktemp("reader_input") / "store"
    mem = Memory.create(path, "omni", overrides=GRAPH)
    mem.add(turns)
    mem.build_graph(progress=False)
    mem.save()
    mem.close()
    return path


def reader_view(store, *overrides: str, questions=QUESTIONS):
    """(config, [(question, context)]) for omni with the graph on and ``overrides``."""
    mem = Memory.open(store, "omni", overrides=[*GRAPH, *overrides], read_only=True)
    try:
        return mem.cfg, [(q, mem.retrieve(q).context) for q in questions]
    finally:
        mem.close()


def user_text(q, ctx, cfg) -> str:
    return build_messages(q, ctx, cfg.answer)[1]["content"]


def digests(cfg, view) -> list[str]:
    return [reader_input_digest(q, ctx, cfg) for q, ctx in view]


# ------------------------------------------------------------------ answer-type hints
def test_type_hints_add_one_line_after_the_question_and_before_the_json_instruction(store):
    cfg_off, view = reader_view(store)
    cfg_on, _ = reader_view(store, "memory.answer.type_hints=true")
    for (q, ctx), kind in zip(view, ("date", "span", "count", "yes_no")):
        off, on = user_text(q, ctx, cfg_off), user_text(q, ctx, cfg_on)
        assert "Expected answer" not in off
        assert on.replace(TYPE_HINTS[kind] + "\n", "") == off
        assert on.index(f"Question: {q}") < on.index(TYPE_HINTS[kind]) < on.index(JSON_REPLY)
    no_json, _ = reader_view(store, "memory.answer.type_hints=true", "memory.answer.response_format=false")
    q, ctx = view[0]
    assert user_text(q, ctx, no_json).rstrip().endswith(TYPE_HINTS["date"])


def test_a_which_image_question_alone_is_told_to_answer_with_the_id(store):
    asked = ["Which picture shows the sunset Melanie painted?", "What did Melanie paint recently?"]
    cfg_on, view = reader_view(store, questions=asked)
    cfg_off, _ = reader_view(store, "memory.answer.image_ids=false", questions=asked)
    (image_q, image_ctx), (other_q, other_ctx) = view
    on = user_text(image_q, image_ctx, cfg_on)
    assert on.index(f"Question: {image_q}") < on.index(TYPE_HINTS["image"]) < on.index(JSON_REPLY)
    assert on.replace(TYPE_HINTS["image"] + "\n", "") == user_text(image_q, image_ctx, cfg_off)
    assert user_text(other_q, other_ctx, cfg_on) == user_text(other_q, other_ctx, cfg_off)  # others: not a byte changes
    hinted, _ = reader_view(store, "memory.answer.type_hints=true", questions=asked)
    assert TYPE_HINTS["image"] in user_text(image_q, image_ctx, hinted)


def test_the_json_schema_reply_path_works_with_hints_and_compact_facts(store, openai_server, monkeypatch):
    monkeypatch.delenv("MEMSYS_TEST_KEY_UNSET", raising=False)
    cfg, view = reader_view(store, "memory.answer.type_hints=true", "memory.answer.graph_facts_style=compact")
    q, ctx = view[0]
    openai_server.enqueue(Reply.of_json({"answer": "7 May 2023"}))
    llm_cfg = LLMConfig(backend="openai", model="test-model", base_url=openai_server.base_url,
                        api_key_env="MEMSYS_TEST_KEY_UNSET", timeout_s=5.0, max_retries=0, cache=False)
    with LLMClient(llm_cfg) as llm:
        assert answer_question(llm, q, ctx, cfg.answer).text == "7 May 2023"
    (body,) = openai_server.chat_requests
    assert body["response_format"]["json_schema"]["schema"] == ANSWER_SCHEMA
    assert TYPE_HINTS["date"] in body["messages"][-1]["content"]


def test_a_reply_that_restates_its_hint_is_an_abstention(store, openai_server, monkeypatch):
    """The echo seen with the embedded reader (session 32) comes back through the real reply path; a
    real answer of the hinted form, and the same echo on a reader given no hint, are kept as they came."""
    monkeypatch.delenv("MEMSYS_TEST_KEY_UNSET", raising=False)
    hinted, view = reader_view(store, "memory.answer.type_hints=true")
    plain, _ = reader_view(store)
    (q, ctx), (count_q, count_ctx) = view[1], view[2]  # a span question, a count question
    echo = "a short phrase of a few words (or a short list), not a sentence."
    for reply in (echo, "2 kids", echo):
        openai_server.enqueue(Reply.of_json({"answer": reply}))
    llm_cfg = LLMConfig(backend="openai", model="test-model", base_url=openai_server.base_url,
                        api_key_env="MEMSYS_TEST_KEY_UNSET", timeout_s=5.0, max_retries=0, cache=False)
    with LLMClient(llm_cfg) as llm:
        dropped = answer_question(llm, q, ctx, hinted.answer)
        kept = answer_question(llm, count_q, count_ctx, hinted.answer)
        unhinted = answer_question(llm, q, ctx, plain.answer)
    assert dropped.text == ABSTAIN_TEXT and dropped.abstain_reason == "the reply restates the answer-form hint"
    assert dropped.raw_reply == '{"answer": "%s"}' % echo  # what the reader said stays on the record
    assert kept.text == "2 kids" and kept.abstain_reason is None
    assert unhinted.text == echo and unhinted.abstain_reason is None


# ------------------------------------------------------------------ graph facts
def test_compact_facts_hold_the_same_facts_in_fewer_tokens(store):
    cfg, view = reader_view(store)
    facts = [f for _, ctx in view for f in ctx.graph_facts]
    assert len(facts) >= 10, "the graph gives these questions facts"
    for _, ctx in view:
        lines = ctx.graph_facts
        parsed = [parse_fact(f) for f in lines]
        assert all(parsed), lines  # every line the graph writes is a fact the compact form can regroup
        compact = compact_facts(lines)
        assert len(compact) == len({p.subject for p in parsed}) < len(lines) or len(lines) <= 1
        for p in parsed:  # each fact is in its subject's line
            (line,) = [c for c in compact if c.startswith(p.subject + ": ")]
            assert p.predicate() in line.split(": ", 1)[1].split("; ")
        assert count_tokens("\n".join(render_facts(lines, "compact"))) < count_tokens("\n".join(render_facts(lines)))


def test_compact_facts_reach_the_reader_and_count_in_the_context_tokens(store):
    cfg_lines, lines_view = reader_view(store)
    cfg_compact, compact_view = reader_view(store, "memory.answer.graph_facts_style=compact")
    for (q, a), (_, b) in zip(lines_view, compact_view):
        assert a.graph_facts == b.graph_facts and a.mau_ids == b.mau_ids  # same facts, same memories
        assert b.graph_tokens < a.graph_tokens
        text = user_text(q, b, cfg_compact)
        assert FACTS_HEADER in text and "\n- " + compact_facts(b.graph_facts)[0] in text and "-->" not in text
        assert user_text(q, a, cfg_lines).replace(a.render(include_graph=False), "") != text.replace(
            b.render(include_graph=False), "")


def test_lines_that_are_not_facts_keep_their_place():
    lines = ["Caroline --likes--> painting", "a note from another augmenter", "Caroline --moved_from--> Sweden (2018)"]
    assert compact_facts(lines) == ["Caroline: likes painting; moved from Sweden (2018)", "a note from another augmenter"]
    assert render_facts([], "compact") == []
    two = ["Melanie --interacts_with--> family (25 May 2023; 9 June 2023)", "Melanie --owns--> violin"]
    assert compact_facts(two) == ["Melanie: interacts with family (25 May 2023, 9 June 2023); owns violin"]


# ------------------------------------------------------------------ the reader-free screen's digest
def test_the_digest_changes_exactly_when_the_reader_input_does(store):
    base_cfg, base = reader_view(store)
    base_digests = digests(base_cfg, base)
    for overrides in (["memory.answer.type_hints=true"], ["memory.answer.graph_facts_style=compact"],
                      ["memory.pyramid.summary_mode=extractive"]):
        cfg, view = reader_view(store, *overrides)
        changed = [a != b for a, b in zip(digests(cfg, view), base_digests)]
        inputs = [user_text(q, c, cfg) != user_text(q, b, base_cfg) for (q, c), (_, b) in zip(view, base)]
        assert changed == inputs and any(changed), overrides
    # no facts shown: the compact style has nothing to act on
    cfg, view = reader_view(store, "memory.answer.include_graph_facts=false", "memory.answer.graph_facts_style=compact")
    plain_cfg, plain = reader_view(store, "memory.answer.include_graph_facts=false")
    assert digests(cfg, view) == digests(plain_cfg, plain)


def test_extractive_summaries_shorten_level_1_and_keep_level_2_full(store):
    cut_cfg, cut = reader_view(store)
    ext_cfg, ext = reader_view(store, "memory.pyramid.summary_mode=extractive")
    shortened = 0
    for (_, a), (_, b) in zip(cut, ext):
        for x, y in zip(a.items, b.items):
            assert x.mau.id == y.mau.id
            if y.level >= 2:
                assert y.text == x.text == y.mau.full_text  # level 2 still shows the full text
            else:
                assert y.tokens <= x.tokens
                shortened += y.text != x.text
    assert shortened > 0



@pytest.mark.parametrize("prompt", ["default", "memgallery"])
def test_each_prompt_names_the_refusal_its_benchmark_scores(prompt):
    """A reader that declines in the prompt's own words must score on the questions that want a refusal:
    LoCoMo's category 5 looks for a phrase, Mem-Gallery's AR gold is "Not mentioned." scored by token F1."""
    import re

    from benchmarks.metrics.locomo import is_official_abstention
    from benchmarks.metrics.memgallery import memgallery_f1
    from memsys.answer.generate import load_prompt

    scores = {"default": is_official_abstention,
              "memgallery": lambda phrase: memgallery_f1(phrase, "Not mentioned.") == 1.0}[prompt]
    _, constraints, _ = load_prompt(prompt)
    refusals = [q for q in re.findall(r'"([^"]+)"', constraints) if "mention" in q.lower() or "know" in q.lower()]
    assert refusals and all(scores(q) for q in refusals), refusals


def test_rules_first_make_every_prompt_start_with_the_same_text(store):
    """``answer.constraints_position=first``: the rules open the system message, so two questions' prompts
    share everything up to their memories (the prefix llama.cpp reuses); before/after keep them in the
    user message, after the memories, where no two questions share them."""
    cfg, view = reader_view(store, "memory.answer.constraints_position=first")
    (q1, c1), (q2, c2) = view[0], view[1]
    first = [build_messages(q1, c1, cfg.answer), build_messages(q2, c2, cfg.answer)]
    assert first[0][0] == first[1][0] and "Rules:" in first[0][0]["content"]
    assert all("Rules:" not in m[1]["content"] for m in first)
    assert all(m[1]["content"].startswith("Memories") for m in first)
    for position in ("before", "after"):
        cfg, view = reader_view(store, f"memory.answer.constraints_position={position}")
        messages = build_messages(*view[0], cfg.answer)
        assert "Rules:" not in messages[0]["content"] and "Rules:" in messages[1]["content"]
    cfg, view = reader_view(store, "memory.answer.constraints_position=top")
    with pytest.raises(ConfigError, match="first|before|after"):
        build_messages(*view[0], cfg.answer)
