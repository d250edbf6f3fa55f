"""Index text apart from reader text (memsys/index/text.py, Memory, Retriever)."""

from __future__ import annotations

import json
from datetime import datetime

import numpy as np
import pytest

from harness.errors import ConfigError, StoreVersionError
from memsys.config import load_memory_config, to_container
from memsys.index.text import CONTEXT_KEY, index_text, neighbour_context
from memsys.ingest.text import turn_text
from memsys.memory import Memory
from memsys.records import MAU, Turn
from memsys.store.store import MemoryStore

TS = datetime(2023, 5, 8, 13, 56)
TURNS = [
    Turn("D1:1", "Caroline", "I went to a support group yesterday.", TS, "S1"),
    Turn("D1:2", "Melanie", "The beach was lovely, we painted a sunset.", TS, "S1"),
    Turn("D1:3", "Caroline", "Pottery is my new hobby.", TS, "S1", image_caption="a clay bowl"),
]


def test_index_text_puts_speaker_and_date_before_the_text():
    m = MAU("a", "I went to a support group.", speaker="Caroline", timestamp=TS)
    assert index_text(m, "text") == "I went to a support group."
    assert index_text(m, "speaker") == "Caroline: I went to a support group."
    assert index_text(m, "speaker_date") == "Caroline (8 May 2023): I went to a support group."
    assert index_text(m, "speaker_date", body="x\ny") == "Caroline (8 May 2023): x\ny"
    assert index_text(MAU("b", "no speaker"), "speaker_date") == "no speaker"
    with pytest.raises(ConfigError, match="unknown index text 'names'"):
        index_text(m, "names")


def test_dense_vectors_embed_the_index_text_and_the_reader_keeps_its_own(tmp_path, embedder):
    mem = Memory.create(tmp_path / "s", "omni", overrides=["memory.ingest.index_text.neighbors=0"])
    mem.add(TURNS)
    m = mem.store.get("D1:3")
    want = embedder.embed_one("Caroline (8 May 2023): Pottery is my new hobby. [shared an image: a clay bowl]")
    assert np.allclose(m.embedding, want, atol=1e-5)
    line = mem.context("pottery hobby").render().splitlines()[0]
    assert line == "1. [8 May 2023 13:56] Caroline: Pottery is my new hobby. [shared an image: a clay bowl]"
    mem.close()


def test_bm25_sees_the_speaker_only_when_its_index_text_has_it(tmp_path, embedder):
    with_speaker = Memory.create(tmp_path / "a", "bm25_only")
    with_speaker.add(TURNS)
    hits = [i.mau.id for i in with_speaker.retrieve("Caroline").items]
    assert sorted(hits) == ["D1:1", "D1:3"]
    plain = Memory.create(tmp_path / "b", "bm25_only", overrides=["memory.ingest.index_text.sparse=text"])
    plain.add(TURNS)
    assert plain.retrieve("Caroline").items == []  # no turn says the name
    with_speaker.close()
    plain.close()


def _pre_index_text_store(path, embedder):
    """A store as memsys wrote it before index text: its saved config has no ingest.index_text,
    and its vectors embed the summary alone."""
    saved = to_container(load_memory_config("omni"))
    del saved["ingest"]["index_text"]
    store = MemoryStore.create(path, embedder_name=embedder.name, dim=embedder.dim,
                               extra={"memory_config": saved})
    m = MAU("D1:1", "I went to a support group yesterday.", speaker="Caroline", timestamp=TS, source_id="D1:1")
    m.embedding = embedder.embed_one(m.summary)
    store.add([m])
    store.save()
    store.close()


def test_a_store_from_before_index_text_opens_with_its_own_config_and_refuses_another(tmp_path, embedder):
    _pre_index_text_store(tmp_path / "old", embedder)
    mem = Memory.open(tmp_path / "old", read_only=True)
    assert (mem.cfg.ingest.index_text.dense, mem.cfg.ingest.index_text.sparse) == ("text", "text")
    assert [i.mau.id for i in mem.retrieve("support group").items] == ["D1:1"]
    mem.close()
    with pytest.raises(StoreVersionError) as err:
        Memory.open(tmp_path / "old", "omni", read_only=True)
    msg = str(err.value)
    assert "\n" not in msg and "embedded with index text 'text'" in msg and "index_text.dense=text" in msg
    ok = Memory.open(tmp_path / "old", "omni", overrides=["memory.ingest.index_text.dense=text"], read_only=True)
    ok.close()
    assert json.loads((tmp_path / "old" / "manifest.json").read_text())["count"] == 1  # nothing was rewritten


def test_neighbour_context_takes_the_turns_around_within_the_session_only():
    turns = [*TURNS, Turn("D2:1", "Melanie", "A new day.", TS, "S2")]
    assert neighbour_context(turns, 0, turn_text) == {}
    ctx = neighbour_context(turns, 1, turn_text)
    assert ctx["D1:1"] == " | after: Melanie: The beach was lovely, we painted a sunset."
    assert ctx["D1:2"] == (" | before: Caroline: I went to a support group yesterday."
                           " | after: Caroline: Pottery is my new hobby. [shared an image: a clay bowl]")
    assert "D2:1" not in ctx  # alone in its session: nothing to add
    two = neighbour_context(turns, 2, turn_text, earlier=lambda sid: [("Bob", "old one"), ("Ann", "old two")])
    assert two["D1:1"].startswith(" | before: Bob: old one / Ann: old two | after: Melanie: The beach")
    assert two["D2:1"] == " | before: Bob: old one / Ann: old two"


def test_both_indexes_see_the_neighbours_and_the_reader_sees_the_turn_alone(tmp_path, embedder):
    mem = Memory.create(tmp_path / "s", "omni", overrides=["memory.ingest.index_text.neighbors=1"])
    mem.add(TURNS[:2])
    mem.add(TURNS[2:])  # a later call: its first turn sees the stored turn before it, not the other way
    first, second, third = (mem.store.get(t.id) for t in TURNS)
    assert first.details[CONTEXT_KEY] == " | after: Melanie: The beach was lovely, we painted a sunset."
    assert CONTEXT_KEY in second.details and "Pottery" not in second.details[CONTEXT_KEY]
    assert third.details[CONTEXT_KEY] == " | before: Melanie: The beach was lovely, we painted a sunset."
    want = embedder.embed_one("Caroline (8 May 2023): Pottery is my new hobby. [shared an image: a clay bowl]"
                              " | before: Melanie: The beach was lovely, we painted a sunset.")
    assert np.allclose(third.embedding, want, atol=1e-5)
    # BM25 finds the pottery turn by a word only its neighbour says; the reader's line is the turn alone
    hits = [i.mau.id for i in mem.retrieve("sunset").items]
    assert "D1:3" in hits
    lines = mem.context("sunset").render()
    assert "Pottery is my new hobby. [shared an image: a clay bowl]\n" in lines + "\n" and "| before" not in lines
    mem.save()
    mem.close()
    again = Memory.open(tmp_path / "s", "omni", overrides=["memory.ingest.index_text.neighbors=1"], read_only=True)
    assert again.store.get("D1:3").details[CONTEXT_KEY] == third.details[CONTEXT_KEY]
    again.close()
