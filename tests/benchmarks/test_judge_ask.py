"""Asking the judge through the real OpenAI SDK against a real HTTP server on 127.0.0.1, with the resumable cache."""

from __future__ import annotations

import json

import openai
import pytest

from benchmarks.judge.ask import VerdictCache, ask_judge, judge_requests, request_key
from benchmarks.judge.config import JudgeConfig
from benchmarks.judge.protocol import LENIENT, JudgeItem, JudgeReplyError, build_messages
from tests.support.openai_server import OpenAITestServer, Reply, openai_server  # noqa: F401  (fixture)

ITEMS = [JudgeItem(f"conv-1:q{i}", f"What did they do on day {i}?", f"{i} May 2023", f"On {i} May 2023.", "2")
         for i in range(1, 7)]


def label_by_day(request: dict) -> Reply:
    """CORRECT for odd days, WRONG for even ones: a reply that depends on what was asked."""
    day = int(request["messages"][-1]["content"].split("Gold answer: ")[1].split()[0])
    return Reply.of_json({"label": "CORRECT" if day % 2 else "WRONG"})


@pytest.fixture
def client(openai_server):  # noqa: F811
    openai_server.handler = label_by_day
    return openai.OpenAI(base_url=openai_server.base_url, api_key="sk-test", max_retries=0)


def test_verdicts_for_every_item_and_run_in_order(openai_server, client, tmp_path):  # noqa: F811
    cfg = JudgeConfig(runs=3, max_tokens=12)
    verdicts = ask_judge(client, cfg, ITEMS, tmp_path / "judge.jsonl")
    assert [(v.item_id, v.run) for v in verdicts] == [(i.id, r) for i in ITEMS for r in range(3)]
    assert [v.score for v in verdicts[::3]] == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    assert not any(v.cached for v in verdicts)
    bodies = openai_server.chat_requests
    assert len(bodies) == 18
    first = bodies[0]
    assert first["model"] == cfg.model and first["temperature"] == 0.0 and first["max_tokens"] == 12
    assert first["response_format"] == {"type": "json_object"}
    assert [b["seed"] for b in bodies[:3]] == [0, 1, 2]  # run r is sent seed + r
    assert first["messages"] == build_messages(LENIENT, ITEMS[0].question, ITEMS[0].gold, ITEMS[0].answer)


def test_a_second_ask_sends_zero_requests(openai_server, client, tmp_path):  # noqa: F811
    cfg, cache = JudgeConfig(runs=2), tmp_path / "judge.jsonl"
    first = ask_judge(client, cfg, ITEMS, cache)
    sent = len(openai_server.chat_requests)
    again = ask_judge(client, cfg, ITEMS, cache)
    assert len(openai_server.chat_requests) == sent == 12
    assert [v.score for v in again] == [v.score for v in first] and all(v.cached for v in again)
    lines = cache.read_text().splitlines()
    assert len(lines) == 12 and {json.loads(x)["item_id"] for x in lines} == {i.id for i in ITEMS}


def test_a_killed_step_resumes_asking_only_the_rest(openai_server, client, tmp_path):  # noqa: F811
    cfg, cache = JudgeConfig(runs=3), tmp_path / "judge.jsonl"
    ask_judge(client, cfg, ITEMS[:2], cache)  # the step was killed after two items
    with open(cache, "a", encoding="utf-8") as fh:
        fh.write('{"key": "cut by the kill", "rep')  # and in the middle of writing a line
    assert len(openai_server.chat_requests) == 6
    verdicts = ask_judge(client, cfg, ITEMS, cache)
    assert len(openai_server.chat_requests) == 6 + 4 * 3  # only the four items it did not have
    assert [v.cached for v in verdicts] == [True] * 6 + [False] * 12
    assert len(VerdictCache(cache).replies) == 18  # the cut line is skipped, the lines after it are whole
    ask_judge(client, cfg, ITEMS, cache)
    assert len(openai_server.chat_requests) == 18


def test_changing_what_decides_the_reply_changes_the_key(tmp_path):
    messages = build_messages(LENIENT, "q", "g", "a")
    base = request_key(JudgeConfig(), LENIENT, messages, 0)
    assert request_key(JudgeConfig(), LENIENT, messages, 0) == base
    assert request_key(JudgeConfig(), LENIENT, messages, 1) != base
    assert request_key(JudgeConfig(temperature=0.7), LENIENT, messages, 0) != base
    assert request_key(JudgeConfig(model="other"), LENIENT, messages, 0) != base
    assert request_key(JudgeConfig(base_url="http://127.0.0.1:9/v1"), LENIENT, messages, 0) == base  # where, not what
    assert len({r.key for r in judge_requests(JudgeConfig(runs=3), ITEMS)}) == 18


def test_unparseable_replies_raise_the_typed_error_and_stay_cached(openai_server, client, tmp_path):  # noqa: F811
    openai_server.handler = lambda request: Reply.ok("Hmm, hard to tell.")
    cfg, cache = JudgeConfig(runs=1), tmp_path / "judge.jsonl"
    with pytest.raises(JudgeReplyError, match="6 of 6 judge replies have no readable verdict: conv-1:q1 run 0") as info:
        ask_judge(client, cfg, ITEMS, cache)
    assert len(info.value.failures) == 6
    assert len(openai_server.chat_requests) == 6  # every item was asked before the error
    with pytest.raises(JudgeReplyError):
        ask_judge(client, cfg, ITEMS, cache)
    assert len(openai_server.chat_requests) == 6  # the replies are the evidence: not asked again


def test_no_cache_file_means_memory_only(openai_server, client):  # noqa: F811
    cfg = JudgeConfig(runs=1)
    ask_judge(client, cfg, ITEMS[:2])
    ask_judge(client, cfg, ITEMS[:2])
    assert len(openai_server.chat_requests) == 4


def test_a_server_error_keeps_the_replies_before_it(tmp_path):
    cfg, cache = JudgeConfig(runs=1), tmp_path / "judge.jsonl"
    with OpenAITestServer(label_by_day) as server:
        server.enqueue(Reply.of_json({"label": "CORRECT"}), Reply.of_json({"label": "WRONG"}), Reply.error(500))
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        with pytest.raises(openai.InternalServerError):
            ask_judge(client, cfg, ITEMS, cache)
        assert len(VerdictCache(cache).replies) == 2
        verdicts = ask_judge(client, cfg, ITEMS, cache)
        assert len(server.chat_requests) == 3 + 4
    assert [v.score for v in verdicts[:2]] == [1.0, 0.0] and verdicts[0].cached
