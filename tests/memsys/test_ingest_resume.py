"""A stopped ingest resumes (Memory.add(resume=True), ``memsys ingest --resume``).

Why these tests: a killed ``memsys ingest`` used to leave a store that neither a rerun (the store
exists) nor ``--append`` (duplicate turn ids) could finish, so the user started again from nothing.
The first test kills a real ingest process mid-way and checks that resuming writes exactly the
store an uninterrupted ingest writes: the same memories, links, neighbour index texts and vectors.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta

import numpy as np
import pytest

from launcher.main import main
from memsys.cli import cmd_ingest
from memsys.errors import DuplicateIdError, InputError
from memsys.ingest.readers import read_locomo_turns
from memsys.memory import Memory
from memsys.records import Turn
from tests.support.openai_server import OpenAITestServer, Reply

T0 = datetime(2023, 5, 8, 13, 56)


def _turns(n: int = 10) -> list[Turn]:
    said = ["I adopted a puppy named Max.", "That is wonderful news!", "He chewed my running shoes.",
            "Puppies do that.", "I signed up for a pottery class.", "What will you make first?",
            "A bowl for my mom.", "She will love it.", "We went camping by the lake.", "The stars were bright."]
    return [Turn(f"D{i // 5 + 1}:{i % 5 + 1}", ("Ana", "Ben")[i % 2], said[i % len(said)],
                 T0 + timedelta(days=i // 5, minutes=i), f"S{i // 5 + 1}") for i in range(n)]


def _snapshot(mem: Memory) -> list[tuple]:
    return [(m.id, m.summary, m.speaker, m.timestamp, sorted(m.details.items()), [(l.kind, l.target) for l in m.links])
            for m in mem.store.maus]


def _rows(path) -> int:
    try:
        conn = sqlite3.connect(f"{(path / 'hot.sqlite').resolve().as_uri()}?mode=ro", uri=True)
        try:
            return conn.execute("SELECT COUNT(*) FROM maus").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:  # not created yet, or mid-transaction
        return 0


@pytest.mark.slow
def test_a_killed_ingest_resumes_to_the_store_an_uninterrupted_one_writes(tmp_path, embedder, locomo_path):
    store = tmp_path / "killed"
    # A cache of its own: with the session's warm one the ingest could finish before the kill.
    env = {**os.environ, "MEMSYS_CACHE_DIR": str(tmp_path / "cache"), "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "launcher.main", "ingest", str(locomo_path), "--conversation", "conv-30",
            f"store={store}", "memory=omni"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while _rows(store) == 0 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # the first batch of 256 turns is committed: kill inside the second
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the ingest ended before it could be killed"
    turns = read_locomo_turns(locomo_path, "conv-30")["conv-30"]
    stored_at_kill = _rows(store)
    assert 0 < stored_at_kill < len(turns) - 5, stored_at_kill

    with pytest.raises(InputError, match="--resume finishes an ingest"):
        cmd_ingest(argparse.Namespace(file=locomo_path, conversation="conv-30", append=False, resume=False,
                                      overrides=[f"store={store}", "memory=omni"]))
    for _ in range(2):  # the second resume finds everything processed and adds nothing
        assert cmd_ingest(argparse.Namespace(file=locomo_path, conversation="conv-30", append=False, resume=True,
                                             overrides=[f"store={store}", "memory=omni"])) == 0

    with Memory.create(tmp_path / "whole", "omni") as whole:
        whole.add(turns)
    with Memory.open(store, read_only=True) as resumed, Memory.open(tmp_path / "whole", read_only=True) as whole:
        assert len(resumed) > stored_at_kill
        assert _snapshot(resumed) == _snapshot(whole)
        np.testing.assert_allclose(resumed.store.embeddings, whole.store.embeddings, atol=1e-5)


def test_resume_skips_what_was_stored_and_adds_the_rest_as_one_call_would(tmp_path, embedder):
    turns = _turns()
    with Memory.create(tmp_path / "whole", "omni") as whole:
        whole.add(turns, batch_size=4)
    with Memory.create(tmp_path / "part", "omni") as part:
        # What a call stopped after its first batch leaves: that batch, with the neighbours it saw then.
        part.add(turns[:4], batch_size=4)
    with Memory.open(tmp_path / "part", "omni") as part:
        report = part.add(turns, batch_size=4, resume=True)
        assert (report.resumed_after, report.accepted + report.rejected) == (4, 6)
        mine, theirs = _snapshot(part), _snapshot(whole)
        # turns[3]'s "after" neighbour was not in the part's input; everything the resume wrote is the same
        assert [r for r in mine if r[0] != turns[3].id] == [r for r in theirs if r[0] != turns[3].id]
        assert part.add(turns, resume=True).accepted == 0


def test_resume_refuses_a_store_written_from_other_input(tmp_path, embedder):
    turns = _turns(4)
    with Memory.create(tmp_path / "s", "naive") as mem:
        mem.add(turns)
        other = [Turn(t.id, t.speaker, t.text + " Really.", t.timestamp, t.session_id) for t in turns]
        with pytest.raises(DuplicateIdError, match="stored with other content"):
            mem.add(other, resume=True)
        with pytest.raises(DuplicateIdError, match="resume=True skips"):
            mem.add(turns)


COMPRESSION = ["memory.ingest.compression.enabled=true", "memory.ingest.compression.window_turns=2",
               "memory.ingest.compression.overlap_turns=0", "memory.ingest.compression.workers=1"]


SAID = ["I adopted a puppy named Max.", "That is wonderful news!", "He chewed my running shoes.",
        "I signed up for a pottery class.", "We went camping by the lake.", "My sister moved to Lisbon.",
        "I finished the marathon in four hours.", "The garden tomatoes are ripe now.", "I started learning Korean.",
        "Our band plays at the cafe on Friday.", "I repainted the kitchen yellow.", "The new job starts in June.",
        "I baked sourdough for the first time.", "We adopted a second cat, Luna.", "I fixed the old bicycle.",
        "My grandmother turned ninety.", "I read three novels this month.", "The flight to Tokyo was delayed.",
        "I volunteered at the food bank.", "We planted an apple tree."]


def _restate(body: dict) -> str:
    """The scripted compressor: one restatement per turn of the window, plus the same fact about the
    speakers from every window, which each later window consolidates into the first one."""
    prompt = body["messages"][-1]["content"]
    said = re.findall(r"^\((D\d+:\d+)\) (\w+): (.*)$", prompt, flags=re.M)
    items = [(f"{who} said: {text}", tid) for tid, who, text in said] + [("Ana and Ben are old friends.", said[0][0])]
    return json.dumps({"memories": [{"statement": st, "persons": [], "keywords": [], "source_turns": [tid]}
                                    for st, tid in items]})


class _Compressor:
    """Answers every window; holds the reply to the window starting at ``hold`` until released."""

    def __init__(self, hold: str):
        self.hold, self.release = f"({hold})", threading.Event()

    def __call__(self, body: dict) -> Reply:
        if self.hold in body["messages"][-1]["content"]:
            self.release.wait(120)
        return Reply.ok(_restate(body))


def _ingest_args(data, store, srv, resume: bool) -> list[str]:
    return [str(data), *(["--resume"] if resume else []), f"store={store}", "memory=naive", *COMPRESSION,
            "llm=openai", f"llm.base_url={srv.base_url}", "llm.model=scripted", "++llm.cache=false"]


@pytest.mark.slow
def test_an_ingest_killed_during_compression_resumes_at_the_first_window_it_had_not_written(tmp_path, embedder):
    from memsys.ingest.compress import done_windows

    turns = [Turn(t.id, t.speaker, text, t.timestamp, t.session_id) for t, text in zip(_turns(20), SAID)]
    data = tmp_path / "turns.jsonl"  # 4 sessions of 5 turns: 12 windows of 2 (or 1)
    _jsonl(data, turns)
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    env = {**os.environ, "MEMSYS_CACHE_DIR": str(tmp_path / "cache")}
    compressor = _Compressor(hold="D3:3")  # the 8th window
    with OpenAITestServer(compressor) as srv:
        proc = subprocess.Popen([sys.executable, "-m", "launcher.main", "ingest", *_ingest_args(data, killed, srv, False)],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 240
            while not any(compressor.hold in r["messages"][-1]["content"] for r in srv.chat_requests):
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()[-2000:]
                time.sleep(0.05)
            while _rows(killed) <= 20:  # the held request waits; windows before it are being written
                assert time.monotonic() < deadline
                time.sleep(0.05)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            compressor.release.set()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == -signal.SIGKILL
        with Memory.open(killed, read_only=True) as mem:
            written = done_windows(m for m in mem.store.maus if m.details.get("compressed"))
            assert len(mem) > 20 and 1 <= len(written) < 12, len(written)  # every turn, some restatements
        asked_before = len(srv.chat_requests)
        for _ in range(2):  # the second resume finds every window written and asks nothing
            assert main(["ingest", *_ingest_args(data, killed, srv, True)]) == 0
        assert len(srv.chat_requests) - asked_before == 12 - len(written)
        assert main(["ingest", *_ingest_args(data, whole, srv, False)]) == 0
    with Memory.open(killed, read_only=True) as resumed, Memory.open(whole, read_only=True) as one:
        assert _snapshot(resumed) == _snapshot(one)
        restated = [m for m in one.store.maus if m.details.get("compressed")]
        friends = [m for m in restated if m.summary == "Ana and Ben are old friends."]
        assert len(restated) == 21 and len(friends) == 1  # 20 turns, and the fact every window repeats
        assert friends[0].details["consolidated"] == ["Ana and Ben are old friends."]
        assert len(friends[0].details["source_ids"]) == 12  # the first turn of each window
        assert len(done_windows(restated)) == 12
        np.testing.assert_allclose(resumed.store.embeddings, one.store.embeddings, atol=1e-5)


def _jsonl(path, turns: list[Turn]) -> None:
    import json

    path.write_text("".join(json.dumps({"id": t.id, "speaker": t.speaker, "text": t.text,
                                        "timestamp": t.timestamp.isoformat(), "session_id": t.session_id}) + "\n"
                            for t in turns), encoding="utf-8")


@pytest.mark.parametrize("resume", [False, True])
def test_an_ingest_killed_while_creating_its_store_starts_again(resume, tmp_path, embedder):
    from memsys.errors import StoreCorruptError
    from memsys.store.hot import HotTier
    from memsys.store.store import half_created

    turns, data, store = _turns(4), tmp_path / "turns.jsonl", tmp_path / "s"
    _jsonl(data, turns)
    store.mkdir()
    HotTier.create(store, "memsys-store/1").close()  # what create writes before its manifest: the kill came here
    assert half_created(store)
    with pytest.raises(StoreCorruptError, match="creation was stopped before it held anything") as info:
        Memory.open(store)
    assert "\n" not in str(info.value)
    ns = argparse.Namespace(file=data, conversation=None, append=False, resume=resume, overrides=[f"store={store}",
                                                                                                   "memory=naive"])
    assert cmd_ingest(ns) == 0
    with Memory.open(store, read_only=True) as mem:
        assert [m.id for m in mem.store.maus] == [t.id for t in turns]


def test_a_folder_with_memories_but_no_manifest_is_never_cleared(tmp_path, embedder):
    from memsys.errors import StoreError
    from memsys.store.store import half_created

    turns = _turns(4)
    with Memory.create(tmp_path / "s", "naive") as mem:
        mem.add(turns)
    (tmp_path / "s" / "manifest.json").unlink()  # damage: the rows must survive it
    for f in list((tmp_path / "s").iterdir()):
        if f.name != "hot.sqlite":
            if f.is_dir():
                import shutil

                shutil.rmtree(f)
            else:
                f.unlink()
    assert not half_created(tmp_path / "s")
    with pytest.raises(StoreError, match="exists and is not empty"):
        Memory.create(tmp_path / "s", "naive")
    assert _rows(tmp_path / "s") == 4
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "notes.txt").write_text("mine")  # a user's folder: not ours to clear
    assert not half_created(tmp_path / "t")
