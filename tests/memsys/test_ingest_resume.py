"""A stopped ingest resumes (Memory.add(resume=True), ``memsys ingest --resume``).

Why these tests: a killed ``memsys ingest`` used to leave a store that neither a rerun (the store
exists) nor ``--append`` (duplicate turn ids) could finish, so the user started again from nothing.
The first test kills a real ingest process mid-way and checks that resuming writes exactly the
store an uninterrupted ingest writes: the same memories, links, neighbour index texts and vectors.
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import datetime, timedelta

import numpy as np
import pytest

from memsys.cli import cmd_ingest
from memsys.errors import ConfigError, DuplicateIdError, InputError
from memsys.ingest.readers import read_locomo_turns
from memsys.memory import Memory
from memsys.records import Turn

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


def test_resume_with_compression_is_refused_before_anything_is_written(tmp_path, embedder):
    turns = _turns(4)
    with Memory.create(tmp_path / "s", "naive") as mem:
        mem.add(turns[:2])
    with Memory.open(tmp_path / "s", "naive", overrides=["memory.ingest.compression.enabled=true"]) as mem:
        with pytest.raises(ConfigError, match="cannot resume half-way"):
            mem.add(turns, resume=True, llm=object())
        assert len(mem) == 2


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
