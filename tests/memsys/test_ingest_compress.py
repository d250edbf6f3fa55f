"""Write-time compression (memsys.ingest.compress) through the real client and the OpenAI test server."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from memsys.config import LLMConfig
from memsys.ingest.compress import absolutize, render_window, windows
from memsys.llm.client import LLMClient
from memsys.memory import Memory
from memsys.records import Turn
from tests.support.openai_server import OpenAITestServer, Reply

DAY = datetime(2023, 5, 8, 13, 56)


def turns(n: int, session: str = "S1") -> list[Turn]:
    return [Turn(f"{session}:{i}", "Caroline" if i % 2 else "Melanie", f"turn number {i} about topic {i}", DAY, session)
            for i in range(1, n + 1)]


def test_windows_slide_within_sessions_only():
    ws = windows(turns(5, "A") + turns(3, "B"), size=3, overlap=1)
    assert [[t.id for t in w] for w in ws] == [["A:1", "A:2", "A:3"], ["A:3", "A:4", "A:5"], ["B:1", "B:2", "B:3"]]


def test_relative_dates_are_resolved_in_code_before_and_after_the_llm():
    t = Turn("D1:3", "Caroline", "I went to a LGBTQ support group yesterday.", DAY, "S1")
    assert "[yesterday = 7 May 2023]" in render_window([t])
    assert absolutize("Caroline went to a support group yesterday.", DAY) == "Caroline went to a support group 7 May 2023."


def client(srv: OpenAITestServer) -> LLMClient:
    return LLMClient(LLMConfig(backend="openai", base_url=srv.base_url, cache=False, max_retries=0, timeout_s=10))


def statement(text: str, *sources: str) -> dict:
    return {"statement": text, "persons": ["Caroline"], "entities": [], "keywords": ["support group"],
            "topic": "support", "location": "", "source_turns": list(sources)}


def test_memory_add_with_compression_keeps_raw_turns_and_consolidates(tmp_path, embedder):
    cfg_over = ["memory.ingest.compression.enabled=true", "memory.ingest.compression.window_turns=2",
                "memory.ingest.compression.overlap_turns=0", "memory.ingest.compression.workers=1"]
    mem = Memory.create(tmp_path / "s", "omni", overrides=cfg_over)
    ts = [Turn("D1:1", "Caroline", "I went to a LGBTQ support group yesterday.", DAY, "S1"),
          Turn("D1:2", "Melanie", "That sounds powerful, how was it?", DAY, "S1"),
          Turn("D1:3", "Caroline", "It was great, I felt accepted.", DAY, "S1"),
          Turn("D1:4", "Melanie", "I am painting a sunset this week.", DAY, "S1")]
    replies = [
        {"memories": [statement("Caroline went to an LGBTQ support group yesterday.", "D1:1", "D1:2")]},
        {"memories": [statement("Caroline went to an LGBTQ support group on 7 May 2023.", "D1:3"),  # near-duplicate
                      statement("Melanie is painting a sunset during the week of 8 May 2023.", "D1:4")]},
    ]
    with OpenAITestServer() as srv:
        srv.enqueue(*[Reply.of_json(r) for r in replies])
        with client(srv) as llm:
            report = mem.add(ts, llm=llm)
    comp = [m for m in mem.store.maus if m.details.get("compressed")]
    raw = [m for m in mem.store.maus if not m.details.get("compressed")]
    assert len(raw) == 4  # the raw turns stay stored
    assert report.compression.windows == 2 and report.compression.statements == 3
    assert report.compression.consolidated == 1 and len(comp) == 2
    first = next(m for m in comp if "support group" in m.summary)
    assert first.summary == "Caroline went to an LGBTQ support group 7 May 2023."  # date fixed in code
    assert first.details["source_ids"] == ["D1:1", "D1:2", "D1:3"]  # consolidation keeps every source
    assert json.loads(mem.store.cold.get_text(first.pointer))["turns"][0]["text"].startswith("I went")
    ctx = mem.context("When did Caroline go to the support group?")
    assert "D1:1" in ctx.source_ids


def test_a_failed_window_is_counted_and_the_rest_stored(tmp_path, embedder):
    mem = Memory.create(tmp_path / "s", "omni", overrides=["memory.ingest.compression.enabled=true",
                                                          "memory.ingest.compression.window_turns=2",
                                                          "memory.ingest.compression.overlap_turns=0",
                                                          "memory.ingest.compression.workers=1"])
    with OpenAITestServer() as srv:
        srv.enqueue(Reply.raw(b"{not json"), Reply.of_json({"memories": [statement("Melanie paints.", "S1:3")]}))
        with client(srv) as llm:
            report = mem.add(turns(4), llm=llm)
    assert report.compression.failed_windows == 1 and len(report.compression.errors) == 1
    assert len(mem) == 4 + 1
    with OpenAITestServer() as srv:  # resuming asks the failed window again, and only it
        srv.enqueue(Reply.of_json({"memories": [statement("Caroline talks about topic 1.", "S1:1")]}))
        with client(srv) as llm:
            again = mem.add(turns(4), llm=llm, resume=True)
        assert len(srv.chat_requests) == 1 and "(S1:1)" in srv.chat_requests[0]["messages"][-1]["content"]
    assert again.compression.resumed_windows == 1 and again.compression.failed_windows == 0
    assert len(mem) == 4 + 2


def test_compression_without_an_llm_is_a_config_error(tmp_path, embedder):
    from harness.errors import ConfigError

    mem = Memory.create(tmp_path / "s", "omni", overrides=["memory.ingest.compression.enabled=true"])
    with pytest.raises(ConfigError, match="needs an LLM"):
        mem.add(turns(2))
    assert len(mem) == 0  # refused before anything was written
