"""Abstention after the reply (memsys/answer/attribution.py): an answer whose words come from a statement
about another speaker than the one the question names is dropped; through a real OpenAI-protocol server."""

from __future__ import annotations

from datetime import datetime

import pytest

from memsys.answer.attribution import answer_margin, attributed_elsewhere
from memsys.answer.generate import ABSTAIN_TEXT, answer_question, reader_request
from memsys.config import LLMConfig
from memsys.llm.client import LLMClient
from memsys.memory import Memory
from memsys.records import MAU, Turn
from memsys.retrieve.context import ContextItem
from tests.support.openai_server import OpenAITestServer, Reply, openai_server  # noqa: F401  (fixture)

SPEAKERS = {"Caroline", "Melanie"}


def item(speaker: str | None, text: str) -> ContextItem:
    return ContextItem(MAU(f"m{hash(text) % 997}", text, speaker=speaker), 0, 0.5, {"dense"}, 2, "", text, 10)


RACE = [item("Caroline", "I ran a charity race for mental health. Did you see it?"),
        item("Melanie", "I made a pottery bowl last week.")]


def test_the_margin_is_the_named_speakers_best_share_minus_anyone_elses():
    # "mental health": both words in Caroline's statement, none in Melanie's
    assert answer_margin("What race did Melanie run?", "mental health", RACE, SPEAKERS) == -1.0
    assert answer_margin("What race did Caroline run?", "mental health", RACE, SPEAKERS) == 1.0
    # half the words in each: a tie keeps the answer
    assert answer_margin("What did Melanie do?", "pottery race", RACE, SPEAKERS) == 0.0
    assert attributed_elsewhere("What did Melanie do?", "pottery race", RACE, SPEAKERS) is None
    reason = attributed_elsewhere("What race did Melanie run?", "mental health", RACE, SPEAKERS)
    assert reason and "another speaker" in reason and "-1.00" in reason


@pytest.mark.parametrize("question, answer", [
    ("Who ran a charity race?", "Caroline"),  # nobody named
    ("Did Caroline and Melanie race?", "yes"),  # everybody named
    ("What race did Melanie run?", "the"),  # no content word
])
def test_no_margin_where_the_check_cannot_tell(question, answer):
    assert answer_margin(question, answer, RACE, SPEAKERS) is None


def test_statements_are_credited_to_whom_they_are_about():
    # Melanie praising "your race" speaks about Caroline; a question states nothing; nobody's restatement is skipped
    praise = [item("Melanie", "Your charity race was amazing! I made a bowl.")]
    assert answer_margin("What race did Caroline run?", "charity race", praise, SPEAKERS) == 1.0
    asked = [item("Melanie", "Did you run the charity race? I made a bowl."), item("Caroline", "I love pottery.")]
    assert answer_margin("What race did Caroline run?", "charity race", asked, SPEAKERS) == 0.0  # not 1.0
    unknown = [item(None, "Someone ran a charity race."), item("Caroline", "I made a bowl."),
               item("Melanie", "I love pottery.")]
    assert answer_margin("What race did Melanie run?", "charity race", unknown, SPEAKERS) == 0.0  # not -1.0
    # memory holds nothing about the named speaker: their share counts as -1
    only_other = [item("Caroline", "I ran a charity race.")]
    assert answer_margin("What race did Melanie run?", "a bowl", only_other, SPEAKERS) == -1.0


TS = datetime(2023, 5, 8, 13, 56)
TURNS = [
    Turn("D1:1", "Caroline", "I ran a charity race for mental health last Saturday.", TS, "S1"),
    Turn("D1:2", "Melanie", "That's great! I took my kids camping at the beach.", TS, "S1"),
    Turn("D1:3", "Melanie", "I love pottery, I made a bowl last week.", TS, "S1"),
]


def llm_cfg(server: OpenAITestServer) -> LLMConfig:
    return LLMConfig(backend="openai", model="test-model", base_url=server.base_url,
                     api_key_env="MEMSYS_TEST_KEY_UNSET", timeout_s=5.0, max_retries=0, cache=False)


@pytest.mark.parametrize("on", [False, True])
def test_the_reader_is_asked_and_a_borrowed_answer_dropped(on, tmp_path, embedder, openai_server, monkeypatch):
    monkeypatch.delenv("MEMSYS_TEST_KEY_UNSET", raising=False)
    mem = Memory.create(tmp_path / "s", "omni", overrides=["memory.graph.enabled=false", "memory.answer.abstain=off",
                                                           f"memory.answer.abstain_attribution={str(on).lower()}"])
    mem.add(TURNS)
    trap, fair = "What charity race did Melanie run?", "What did Melanie make?"
    trap_ctx, fair_ctx = mem.context(trap), mem.context(fair)
    assert trap_ctx.speakers == SPEAKERS and trap_ctx.items  # the retriever hands the store's speakers on
    openai_server.enqueue(Reply.of_json({"answer": "for mental health"}))
    openai_server.enqueue(Reply.of_json({"answer": "a pottery bowl"}))
    with LLMClient(llm_cfg(openai_server)) as llm:
        trapped = answer_question(llm, trap, trap_ctx, mem.cfg.answer)
        kept = answer_question(llm, fair, fair_ctx, mem.cfg.answer)
    assert len(openai_server.chat_requests) == 2  # decided after the reply: the reader is always asked
    assert trapped.text == (ABSTAIN_TEXT if on else "for mental health")
    assert (trapped.abstain_reason is not None) == on and trapped.raw_reply == '{"answer": "for mental health"}'
    assert kept.text == "a pottery bowl" and kept.abstain_reason is None
    # the no-op screen sees the lever: the request differs exactly when it is on
    off_cfg = mem.cfg.answer if not on else type(mem.cfg.answer)(**{**vars(mem.cfg.answer), "abstain_attribution": False})
    assert (reader_request(trap, trap_ctx, mem.cfg.answer) != reader_request(trap, trap_ctx, off_cfg)) == on
    mem.close()
