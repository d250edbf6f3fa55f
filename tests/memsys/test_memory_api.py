"""The public API (memsys.Memory): five-line usage, lifecycle, saved config, errors."""

from __future__ import annotations

from datetime import datetime

import pytest

import memsys
from harness.errors import ConfigError, InputError, StoreReadOnlyError
from memsys.config import EmbedderConfig, MemoryConfig
from memsys.memory import Memory
from memsys.records import Link, LinkKind, Turn

TS = datetime(2023, 5, 8, 13, 56)


def test_five_line_usage(tmp_path, embedder):
    from memsys import Memory, Turn  # the lazily exported public names

    mem = Memory.create(tmp_path / "demo", "omni")
    mem.add([Turn("D1:1", "Caroline", "I went to a support group yesterday.", TS, "S1")])
    hits = mem.retrieve("When did Caroline go to the support group?")
    text = mem.context("support group", budget_tokens=2000).render()
    mem.save()

    assert hits.items[0].mau.id == "D1:1" and hits.items[0].similarity > 0.4
    assert text == "1. [8 May 2023 13:56] Caroline: I went to a support group yesterday. (yesterday = 7 May 2023)"
    assert (tmp_path / "demo" / "manifest.json").exists() and (tmp_path / "demo" / "dense.faiss").exists()
    mem.close()


def test_public_names_are_exported():
    assert set(memsys.__all__) == {"Memory", "MemoryConfig", "LLMConfig", "compose_config", "Turn", "MAU", "Modality", "Scope"}
    assert memsys.MemoryConfig is MemoryConfig
    from memsys.config import LLMConfig, compose

    assert memsys.LLMConfig is LLMConfig and memsys.compose_config is compose
    with pytest.raises(AttributeError):
        memsys.NoSuchThing  # noqa: B018


def test_context_manager_saves_and_reopen_uses_the_saved_config(tmp_path, embedder):
    path = tmp_path / "s"
    with Memory.create(path, "naive") as mem:
        mem.add_turn("Caroline", "I started a pottery class.", TS, session_id="S1")
        mem.add_turn("Melanie", "My kids loved the beach camping trip.", TS, session_id="S1")
        assert [m.id for m in mem.store.maus] == ["t1", "t2"]
    reopened = Memory.open(path)
    try:
        assert reopened.cfg.name == "naive" and reopened.cfg.retrieval.merge == "dense_only"
        assert len(reopened) == 2 and len(reopened.store.dense) == 2
        # a NEXT link owed by a turn stored in an earlier batch was written back
        assert reopened.store.get("t1").links == [Link(LinkKind.NEXT, "t2")]
        assert reopened.store.get("t2").links == [Link(LinkKind.PREV, "t1")]
        # the novelty gate remembers what is stored: the same text again is redundant
        report = reopened.add_turn("Caroline", "I started a pottery class.", TS, session_id="S1")
        assert report.rejected == 1 and len(reopened) == 2
        # an explicit preset overrides the saved one (naive's vectors embed the turn text alone)
        assert Memory.open(path, "omni", embedder=embedder,
                           overrides=["memory.ingest.index_text.dense=text"]).cfg.name == "omni"
    finally:
        reopened.close()


def test_read_only_memory_retrieves_but_refuses_writes(tmp_path, embedder):
    path = tmp_path / "s"
    with Memory.create(path, "omni") as mem:
        mem.add([Turn("a", "A", "I bought a violin.")])
    ro = Memory.open(path, read_only=True)
    try:
        assert ro.retrieve("violin").items[0].mau.id == "a"
        with pytest.raises(StoreReadOnlyError):
            ro.add([Turn("b", "A", "Another turn.")])
        assert len(ro) == 1
    finally:
        ro.close()


def test_empty_query_is_an_input_error(tmp_path, embedder):
    mem = Memory.create(tmp_path / "s", "omni")
    for bad in ("", "   ", None, 12):
        with pytest.raises(InputError, match="empty query"):
            mem.retrieve(bad)  # type: ignore[arg-type]
    assert mem.retrieve("anything at all").items == []  # empty store: empty context, no error
    mem.close()


def test_configs_as_preset_dict_dataclass_and_bad_type(tmp_path, embedder):
    a = Memory.create(tmp_path / "a", MemoryConfig(name="custom"))
    assert a.cfg.name == "custom"
    b = Memory.create(tmp_path / "b", {"name": "fromdict", "retrieval": {"top_k": 7}})
    assert b.cfg.retrieval.top_k == 7 and b.cfg.pyramid.theta == 0.4
    c = Memory.create(tmp_path / "c", "omni", overrides=["memory.pyramid.theta=0.3"])
    assert c.cfg.pyramid.theta == 0.3
    for m in (a, b, c):
        m.close()
    with pytest.raises(ConfigError, match="topk"):
        Memory.create(tmp_path / "d", {"retrieval": {"topk": 7}})
    with pytest.raises(ConfigError, match="preset name, dict or MemoryConfig"):
        Memory.create(tmp_path / "e", 42)  # type: ignore[arg-type]
    assert not (tmp_path / "d").exists() and not (tmp_path / "e").exists()


def test_opening_with_another_embedder_is_refused(tmp_path, embedder):
    path = tmp_path / "s"
    hashing = MemoryConfig(embedder=EmbedderConfig(backend="hashing", cache=False))
    with Memory.create(path, hashing) as mem:
        mem.add([Turn("a", "A", "hello there")])
    with pytest.raises(ConfigError) as info:
        Memory.open(path, "omni")
    message = str(info.value)
    assert "hashing-384" in message and "all-MiniLM-L6-v2" in message and "\n" not in message
