"""``memsys ask``: answer from a store with the configured reader, print the answer and its context."""

from __future__ import annotations

import argparse
from datetime import datetime

from memsys.cli import cmd_ask
from memsys.memory import Memory
from memsys.records import Turn
from tests.support.openai_server import Reply, openai_server  # noqa: F401  (fixture)

TS = datetime(2023, 5, 8, 13, 56)


def ask(tmp_path, server, turns: list[Turn], question: str, answer: str) -> None:
    """``memsys ask`` over a fresh ``omni`` store of ``turns``, the reader replying ``answer`` (output: capsys)."""
    store = tmp_path / "s"
    with Memory.create(store, "omni") as mem:
        mem.add(turns)
    server.enqueue(Reply.of_json({"answer": answer}))
    overrides = [f"store={store}", "llm=openai", f"llm.base_url={server.base_url}", "llm.model=test-model",
                 "llm.api_key_env=MEMSYS_TEST_KEY", "llm.cache=false", "llm.max_retries=0"]
    assert cmd_ask(argparse.Namespace(question=question, overrides=overrides)) == 0


def test_ask_prints_the_readers_answer_and_the_context_lines_it_was_given(tmp_path, embedder, openai_server,
                                                                           monkeypatch, capsys):
    monkeypatch.setenv("MEMSYS_TEST_KEY", "sk-test")
    ask(tmp_path, openai_server, [Turn("D1:1", "Caroline", "I went to a support group yesterday.", TS, "S1"),
                                  Turn("D1:2", "Melanie", "I painted a lake sunrise.", TS, "S1")],
        "When did Caroline go to the support group?", "7 May 2023")
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "7 May 2023"
    assert "1. [8 May 2023 13:56] Caroline: I went to a support group yesterday. (yesterday = 7 May 2023)" in out
    sent = openai_server.chat_requests[0]["messages"][-1]["content"]
    assert "Caroline: I went to a support group yesterday." in sent and "When did Caroline" in sent


def test_ask_says_why_it_answered_not_mentioned(tmp_path, embedder, openai_server, monkeypatch, capsys):
    from memsys.answer.generate import ABSTAIN_TEXT

    monkeypatch.setenv("MEMSYS_TEST_KEY", "sk-test")
    ask(tmp_path, openai_server, [Turn("D1:1", "Caroline", "I ran a charity race for mental health.", TS, "S1"),
                                  Turn("D1:2", "Melanie", "I made a pottery bowl.", TS, "S1")],
        "What charity race did Melanie run?", "mental health")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ABSTAIN_TEXT  # omni's attribution check: the answer is Caroline's
    assert lines[1].startswith("abstained after the reply '{\"answer\": \"mental health\"}'")
    assert "another speaker" in lines[1]
