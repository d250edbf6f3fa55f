"""Calibrated abstention (issue #14): the retrieval signal (memsys/retrieve/support.py) and the
reader's own ``supported`` field, through a real OpenAI-protocol server."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pytest

from memsys.answer.generate import ABSTAIN_TEXT, answer_question, build_messages
from memsys.config import LLMConfig
from memsys.llm.client import LLMClient
from memsys.memory import Memory
from memsys.records import MAU, Turn
from memsys.retrieve.pyramid import RankedCandidate
from memsys.retrieve.support import speaker_margin, statements, subject_margin, subject_of, without_names
from tests.support.openai_server import OpenAITestServer, Reply, openai_server  # noqa: F401  (fixture)

TS = datetime(2023, 5, 8, 13, 56)
TURNS = [
    Turn("D1:1", "Caroline", "I ran a charity race for mental health last Saturday.", TS, "S1"),
    Turn("D1:2", "Melanie", "That's great! I took my kids camping at the beach.", TS, "S1"),
    Turn("D1:3", "Caroline", "I also started painting lake sunrises.", TS, "S1"),
    Turn("D1:4", "Melanie", "I love pottery, I made a bowl last week.", TS, "S1"),
]
OVERRIDES = ["memory.graph.enabled=false", "memory.answer.abstain=retrieval", "memory.answer.abstain_margin=0.1"]


def llm_cfg(server: OpenAITestServer) -> LLMConfig:
    return LLMConfig(backend="openai", model="test-model", base_url=server.base_url,
                     api_key_env="MEMSYS_TEST_KEY_UNSET", timeout_s=5.0, max_retries=0, cache=False)


def test_without_names_drops_speaker_names_and_possessives():
    assert without_names("What did Melanie's kids and Caroline like?", {"Caroline", "Melanie"}) == "What did kids and like?"


def test_speaker_margin_is_negative_when_another_speaker_said_it():
    def cand(mid: str, speaker: str, text: str) -> RankedCandidate:
        return RankedCandidate(MAU(mid, text, speaker=speaker), 0.5, {"dense"})

    vocab = ["race", "charity", "pottery", "bowl"]

    def embed(texts: list[str]) -> np.ndarray:  # bag of words over a tiny vocabulary, unit rows
        v = np.array([[float(w in t.lower()) for w in vocab] for t in texts]) + 1e-6
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    cands = [cand("a", "Caroline", "I ran a charity race"), cand("b", "Melanie", "I made a pottery bowl")]
    speakers = {"Caroline", "Melanie"}
    assert speaker_margin("What race did Melanie run for charity?", cands, speakers, embed) < -0.5
    assert speaker_margin("What race did Caroline run for charity?", cands, speakers, embed) > 0.5
    assert speaker_margin("Who ran a charity race?", cands, speakers, embed) is None  # nobody named
    assert speaker_margin("Did Caroline and Melanie race?", cands, speakers, embed) is None  # everybody


def test_statements_leave_questions_out_and_subjects_follow_the_pronouns():
    assert statements("Thanks, Caroline! How was the race? I\u2019m starting to realize self-care matters.") == [
        "Thanks, Caroline!", "I'm starting to realize self-care matters."]
    speakers = {"Caroline", "Melanie"}
    assert subject_of("Your painting of the lake is lovely.", "Melanie", speakers) == "Caroline"  # about the listener
    assert subject_of("I painted the lake for you.", "Melanie", speakers) == "Melanie"  # first person wins
    assert subject_of("The lake was calm.", "Melanie", speakers) == "Melanie"
    assert subject_of("Your lake is lovely.", "Melanie", {"Caroline", "Melanie", "Jon"}) == "Melanie"  # listener unknown


def test_subject_margin_credits_a_statement_to_whom_it_is_about():
    def cand(mid: str, speaker: str, text: str) -> RankedCandidate:
        return RankedCandidate(MAU(mid, text, speaker=speaker), 0.5, {"dense"})

    vocab = ["race", "charity", "pottery", "bowl"]

    def embed(texts: list[str]) -> np.ndarray:
        v = np.array([[float(w in t.lower()) for w in vocab] for t in texts]) + 1e-6
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    speakers = {"Caroline", "Melanie"}
    # Melanie praises Caroline's race: said by Melanie, about Caroline; the speaker margin gets it wrong
    praise = [cand("a", "Melanie", "Your charity race was amazing."), cand("b", "Melanie", "I made a bowl."),
              cand("c", "Caroline", "I love pottery.")]
    assert subject_margin("What charity race did Caroline run?", praise, speakers, embed) > 0.5
    assert speaker_margin("What charity race did Caroline run?", praise, speakers, embed) < -0.5
    # a question states nothing: Melanie asking about the race does not make it hers or Caroline's
    asked = [cand("a", "Melanie", "Did you run the charity race?"), cand("b", "Caroline", "I made a pottery bowl.")]
    assert subject_margin("What charity race did Caroline run?", asked, speakers, embed) is None  # nothing about Melanie
    ran = [cand("a", "Caroline", "I ran a charity race."), cand("b", "Melanie", "I made a pottery bowl.")]
    assert subject_margin("What charity race did Melanie run?", ran, speakers, embed) < -0.5
    assert subject_margin("Who ran a charity race?", ran, speakers, embed) is None  # nobody named
    # nothing about the named speaker at all: their best counts as -1
    only_other = [cand("a", "Caroline", "I ran a charity race.")]
    assert subject_margin("What charity race did Melanie run?", only_other, speakers, embed) < -1.5


@pytest.mark.parametrize("signal", ["speaker", "subject"])
def test_retrieval_abstention_empties_the_context_and_skips_the_reader(signal, tmp_path, embedder, openai_server,
                                                                        monkeypatch):
    monkeypatch.delenv("MEMSYS_TEST_KEY_UNSET", raising=False)
    mem = Memory.create(tmp_path / "s", "omni", overrides=[*OVERRIDES, f"memory.answer.abstain_signal={signal}"])
    mem.add(TURNS)
    trap = mem.retrieve("What charity race did Melanie run for mental health?")
    assert trap.context.items == [] and "another speaker" in trap.context.abstain_reason
    assert all(reason.startswith("abstained: ") for _, reason in trap.context.dropped)
    fair = mem.retrieve("What charity race did Caroline run for mental health?")
    assert fair.context.abstain_reason is None and fair.context.items[0].mau.id == "D1:1"
    openai_server.enqueue(Reply.of_json({"answer": "mental health"}))
    with LLMClient(llm_cfg(openai_server)) as llm:
        assert answer_question(llm, trap.query, trap.context, mem.cfg.answer).text == ABSTAIN_TEXT
        assert openai_server.chat_requests == []  # the reader was not asked
        assert answer_question(llm, fair.query, fair.context, mem.cfg.answer).text == "mental health"
    assert "(no memories)" in build_messages(trap.query, trap.context, mem.cfg.answer)[1]["content"]
    mem.close()


@pytest.mark.parametrize("supported, expected", [(False, ABSTAIN_TEXT), (True, "pottery")])
def test_reader_abstains_through_its_supported_field(supported, expected, tmp_path, embedder, openai_server,
                                                     monkeypatch):
    monkeypatch.delenv("MEMSYS_TEST_KEY_UNSET", raising=False)
    mem = Memory.create(tmp_path / "s", "omni", overrides=["memory.graph.enabled=false", "memory.answer.abstain=reader"])
    mem.add(TURNS)
    ctx = mem.context("What does Melanie make?")
    openai_server.enqueue(Reply.of_json({"answer": "pottery", "supported": supported}))
    with LLMClient(llm_cfg(openai_server)) as llm:
        assert answer_question(llm, "What does Melanie make?", ctx, mem.cfg.answer).text == expected
    body = openai_server.chat_requests[0]
    assert body["response_format"]["json_schema"]["schema"]["required"] == ["answer", "supported"]
    assert '"supported" is false when no memory states the answer' in body["messages"][-1]["content"]
    mem.close()


#: the embedded model's tokens for {"answer": "red bike"} (llama.cpp, grammar on): the framing is near certain
RED_BIKE = [('{"', -1.33), ("answer", 0.0), ('":', 0.0), (' "', 0.0), ("red", -2.5), (" bike", -0.5), ('"}', -0.01)]


def test_answer_logprobs_are_the_answer_tokens_only():
    from memsys.answer.generate import answer_logprobs, answer_span

    text = '{"answer": "red bike"}'
    assert text[slice(*answer_span(text, True))] == "red bike"
    assert answer_logprobs(RED_BIKE, text, True) == [-2.5, -0.5]
    assert answer_logprobs(RED_BIKE, text, False) == [lp for _, lp in RED_BIKE]  # plain text: every token
    cut = '{"answer": "a very long ans'  # stopped at the token cap: the answer so far
    assert cut[slice(*answer_span(cut, True))] == "a very long ans"
    escaped = '{"answer": "say \\"hi\\" now"}'
    assert escaped[slice(*answer_span(escaped, True))] == 'say \\"hi\\" now'
    assert answer_logprobs(None, text, True) is None and answer_logprobs([], text, True) is None


@pytest.mark.parametrize("threshold, expected", [(-2.0, "red bike"), (-1.0, ABSTAIN_TEXT)])
def test_confidence_abstention_drops_an_answer_below_the_threshold(threshold, expected, tmp_path, embedder,
                                                                   openai_server, monkeypatch):
    monkeypatch.delenv("MEMSYS_TEST_KEY_UNSET", raising=False)
    mem = Memory.create(tmp_path / "s", "omni", overrides=[
        "memory.graph.enabled=false", "memory.answer.abstain=confidence", f"memory.answer.abstain_logprob={threshold}"])
    mem.add(TURNS)
    ctx = mem.context("What did Melanie buy?")
    openai_server.enqueue(Reply.of_json({"answer": "red bike"}, logprobs=RED_BIKE))
    with LLMClient(llm_cfg(openai_server)) as llm:
        ans = answer_question(llm, "What did Melanie buy?", ctx, mem.cfg.answer)
    assert ans.text == expected and ans.answer_logprobs == [-2.5, -0.5]  # mean -1.5
    assert openai_server.chat_requests[0]["logprobs"] is True
    assert openai_server.chat_requests[0]["top_logprobs"] == 1  # without it llama-cpp-python sends none
    mem.close()


def test_logprobs_are_recorded_without_abstaining_and_not_asked_for_by_default(tmp_path, embedder, openai_server,
                                                                              monkeypatch):
    monkeypatch.delenv("MEMSYS_TEST_KEY_UNSET", raising=False)
    mem = Memory.create(tmp_path / "s", "omni", overrides=["memory.graph.enabled=false"])
    mem.add(TURNS)
    ctx = mem.context("What did Melanie buy?")
    openai_server.enqueue(Reply.of_json({"answer": "red bike"}, logprobs=RED_BIKE))
    openai_server.enqueue(Reply.of_json({"answer": "red bike"}, logprobs=RED_BIKE))
    recording = replace_answer(mem.cfg.answer, record_logprobs=True)
    with LLMClient(llm_cfg(openai_server)) as llm:
        plain = answer_question(llm, "What did Melanie buy?", ctx, mem.cfg.answer)
        recorded = answer_question(llm, "What did Melanie buy?", ctx, recording)
    assert plain.answer_logprobs is None and "logprobs" not in openai_server.chat_requests[0]
    assert recorded.text == "red bike" and recorded.answer_logprobs == [-2.5, -0.5]
    mem.close()


def test_confidence_abstention_without_logprobs_from_the_endpoint_is_a_config_error(tmp_path, embedder, openai_server,
                                                                                   monkeypatch):
    import json

    from memsys.errors import ConfigError

    monkeypatch.delenv("MEMSYS_TEST_KEY_UNSET", raising=False)
    mem = Memory.create(tmp_path / "s", "omni", overrides=["memory.graph.enabled=false", "memory.answer.abstain=confidence"])
    mem.add(TURNS)
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "test-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": '{"answer": "red bike"}'},
                         "finish_reason": "stop", "logprobs": None}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
    openai_server.enqueue(Reply.raw(json.dumps(body).encode()))
    with LLMClient(llm_cfg(openai_server)) as llm, pytest.raises(ConfigError, match="sends none") as info:
        answer_question(llm, "What did Melanie buy?", mem.context("What did Melanie buy?"), mem.cfg.answer)
    assert "\n" not in str(info.value)
    mem.close()


def test_the_screen_sees_a_confidence_threshold_only_when_it_decides():
    from memsys.answer.generate import reader_request
    from memsys.config import load_memory_config
    from memsys.retrieve.context import Context

    cfg = load_memory_config("omni").answer
    ctx = Context(query="q", items=[], budget_tokens=100)
    off = reader_request("q", ctx, cfg)
    assert "abstain_logprob" not in off  # so every digest recorded before the lever existed still holds
    assert reader_request("q", ctx, replace_answer(cfg, abstain_logprob=-2.0)) == off  # dead while abstain != confidence
    on = reader_request("q", ctx, replace_answer(cfg, abstain="confidence"))
    assert on["messages"] == off["messages"] and on["abstain_logprob"] == -1.0
    assert reader_request("q", ctx, replace_answer(cfg, abstain="confidence", abstain_logprob=-2.0)) != on


def replace_answer(cfg, **changes):
    from dataclasses import replace

    return replace(cfg, **changes)


#: the trap names Melanie for Caroline's race; the fair question names Caroline
TRAP, FAIR = "What charity race did Melanie run for mental health?", "What charity race did Caroline run for mental health?"


@pytest.mark.parametrize("mode, logprobs, trap_text, asked", [
    # either signal: the weak margin abstains before the reader; a fair question's unsure reply is dropped too
    ("or_confidence", RED_BIKE, ABSTAIN_TEXT, 1),
    # both signals: a weak margin asks the reader, and only an unsure reply (mean -1.5 < -1.0) abstains ...
    ("and_confidence", RED_BIKE, ABSTAIN_TEXT, 2),
    # ... while a confident one stands, on the trap and the fair question alike
    ("and_confidence", [('{"', -0.1), ("red", -0.2), (" bike", -0.1), ('"}', 0.0)], "red bike", 2),
])
def test_and_confidence_combined(mode, logprobs, trap_text, asked, tmp_path, embedder, openai_server,
                                           monkeypatch):
    monkeypatch.delenv("MEMSYS_TEST_KEY_UNSET", raising=False)
    mem = Memory.create(tmp_path / "s", "omni", overrides=[*OVERRIDES[:1], f"memory.answer.abstain={mode}",
                                                             "memory.answer.abstain_margin=0.1"])
    mem.add(TURNS)
    trap, fair = mem.retrieve(TRAP).context, mem.retrieve(FAIR).context
    if mode == "and_confidence":
        assert trap.items and trap.abstain_reason is None and "another speaker" in trap.doubt
    else:
        assert trap.items == [] and "another speaker" in trap.abstain_reason
    assert fair.doubt is None and fair.abstain_reason is None
    for _ in range(2):
        openai_server.enqueue(Reply.of_json({"answer": "red bike"}, logprobs=logprobs))
    with LLMClient(llm_cfg(openai_server)) as llm:
        assert answer_question(llm, TRAP, trap, mem.cfg.answer).text == trap_text
        fair_text = answer_question(llm, FAIR, fair, mem.cfg.answer).text
    assert len(openai_server.chat_requests) == asked
    # a fair question's reply is judged by confidence only under "either"
    confident = logprobs is not RED_BIKE
    assert fair_text == ("red bike" if mode == "and_confidence" or confident else ABSTAIN_TEXT)
    mem.close()


def test_under_both_signals_the_screen_sees_the_threshold_only_where_retrieval_doubted():
    from memsys.answer.generate import reader_request
    from memsys.config import load_memory_config
    from memsys.retrieve.context import Context

    cfg = replace_answer(load_memory_config("omni").answer, abstain="and_confidence")
    sure, doubted = Context(query="q", items=[], budget_tokens=100), Context(query="q", items=[], budget_tokens=100,
                                                                            doubt="another speaker matches better")
    assert "abstain_logprob" not in reader_request("q", sure, cfg)
    assert reader_request("q", doubted, cfg)["abstain_logprob"] == -1.0
