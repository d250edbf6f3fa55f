"""Relative times in the reader's answer become the dates ingestion resolved (memsys/answer/times.py),
checked on the pure rewrite and through a real store and a real OpenAI-protocol server."""

from __future__ import annotations

from datetime import datetime

import pytest

from memsys.answer.generate import ABSTAIN_TEXT, answer_question, reader_request
from memsys.answer.times import resolve_answer_times
from memsys.config import LLMConfig
from memsys.llm.client import LLMClient
from memsys.memory import Memory
from memsys.records import MAU, Turn
from memsys.retrieve.context import ContextItem
from memsys.temporal import answer_date, resolve_relative_times
from tests.support.openai_server import OpenAITestServer, Reply, openai_server  # noqa: F401  (fixture)

JUNE_9 = datetime(2023, 6, 9, 19, 55)  # a Friday
JULY_6 = datetime(2023, 7, 6, 20, 18)


def mention(text: str, said_on: datetime):
    (m,) = resolve_relative_times(text, said_on)
    return m


@pytest.mark.parametrize("phrase, expected", [
    ("yesterday", "8 June 2023"),
    ("last night", "8 June 2023"),
    ("last Tuesday", "6 June 2023"),
    ("tomorrow", "10 June 2023"),
    ("last week", "the week before 9 June 2023"),  # said, not a calendar week assumed
    ("next weekend", "the weekend after 9 June 2023"),
    ("this week", "the week of 9 June 2023"),
    ("next month", "July 2023"),
    ("last summer", "June-August 2022"),
    ("last year", "2022"),
    ("a few days ago", "between 5 June 2023 and 7 June 2023"),  # a range stays a range
    ("2 weeks ago", "week of 22 May 2023"),
])
def test_answer_date_says_the_day_or_anchors_the_phrase(phrase, expected):
    assert answer_date(mention(phrase, JUNE_9), JUNE_9) == expected


def item(mid: str, text: str, said_on: datetime, rank: int) -> ContextItem:
    mau = MAU(mid, text, timestamp=said_on, speaker="Melanie", time_mentions=resolve_relative_times(text, said_on))
    return ContextItem(mau, rank, 0.5, {"dense"}, 2, "", text, 10)


ITEMS = [item("D12:3", "Yesterday I took the kids to the museum.", JULY_6, 0),
         item("D9:1", "We went camping last week and yesterday we hiked.", JUNE_9, 1),
         item("D10:3", "I just joined a new activist group last Tues.", JUNE_9, 2)]


@pytest.mark.parametrize("answer, expected", [
    ("Yesterday", "5 July 2023"),  # the highest-ranked memory that says it
    ("on yesterday.", "5 July 2023"),
    ("last week", "the week before 9 June 2023"),
    ("They went camping last week", "They went camping last week (the week before 9 June 2023)"),
    ("last Tuesday", "6 June 2023"),  # the memory wrote "last Tues.": one expression, two spellings
    ("She joined it last Tuesday", "She joined it last Tuesday (6 June 2023)"),
    ("Tomorrow", "Tomorrow"),  # no memory in the context says it: no date would be true
    ("7 May 2023", "7 May 2023"),
    (ABSTAIN_TEXT, ABSTAIN_TEXT),
])
def test_resolve_answer_times_uses_the_context_memory_that_says_it(answer, expected):
    assert resolve_answer_times(answer, ITEMS) == expected


TURNS = [
    Turn("D1:1", "Melanie", "Yesterday I took the kids to the museum, they loved the dinosaurs.", JULY_6, "S1"),
    Turn("D1:2", "Caroline", "That sounds like a lovely day out with the family!", JULY_6, "S1"),
]


def llm_cfg(server: OpenAITestServer) -> LLMConfig:
    return LLMConfig(backend="openai", model="test-model", base_url=server.base_url,
                     api_key_env="MEMSYS_TEST_KEY_UNSET", timeout_s=5.0, max_retries=0, cache=False)


@pytest.mark.parametrize("resolve, expected", [(True, "5 July 2023"), (False, "Yesterday")])
def test_the_reader_answer_is_resolved_from_the_store(resolve, expected, tmp_path, embedder, openai_server,
                                                      monkeypatch):
    monkeypatch.delenv("MEMSYS_TEST_KEY_UNSET", raising=False)
    mem = Memory.create(tmp_path / "s", "omni", overrides=["memory.answer.abstain=off",
                                                           f"memory.answer.resolve_times={str(resolve).lower()}"])
    mem.add(TURNS)
    question = "When did Melanie go to the museum?"
    ctx = mem.context(question)
    openai_server.enqueue(Reply.of_json({"answer": "Yesterday"}))
    with LLMClient(llm_cfg(openai_server)) as llm:
        assert answer_question(llm, question, ctx, mem.cfg.answer).text == expected
    # the no-op screen sees the lever: the request records the resolutions the reply will be rewritten with
    assert reader_request(question, ctx, mem.cfg.answer).get("resolve_times") == (
        {"yesterday": "5 July 2023"} if resolve else None)
    mem.close()
