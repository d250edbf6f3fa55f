"""The persistent store (memsys.store): round trips, damage, crashes, read-only use, cold tier."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from dataclasses import fields
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from harness.atomic import atomic_write_json, sha256_bytes
from harness.errors import (
    DuplicateIdError,
    InputError,
    StoreCorruptError,
    StoreError,
    StoreReadOnlyError,
    StoreVersionError,
)
from memsys.records import MAU, Link, LinkKind, Modality, Status, TimeMention
from memsys.store import STORE_VERSION, MemoryStore
from memsys.store.codec import mau_from_json, mau_to_json
from memsys.store.cold import ColdStore

TOPICS = [
    "Caroline went to a LGBTQ support group and felt accepted",
    "Melanie painted a sunrise over the lake with her kids",
    "Caroline is researching adoption agencies for next year",
    "Melanie ran a charity race for mental health awareness",
    "The camping trip to the beach had a meteor shower",
    "Caroline gave a talk at a school about transgender youth",
    "Melanie's pottery class made a bowl with a dog face",
    "A violin concert in the park was rained out",
]
QUERIES = ["support group", "painting a sunrise", "adoption agencies", "charity race", "meteor shower camping"]


def rich_mau(i: int, vec: np.ndarray) -> MAU:
    """A MAU with every field set to a non-default value."""
    t0 = datetime(2023, 5, 8, 13, 56) + timedelta(days=i)
    return MAU(
        id=f"D{i // 10 + 1}:{i % 10 + 1}",
        summary=f"{TOPICS[i % len(TOPICS)]} (memory {i})",
        modality=[Modality.TEXT, Modality.IMAGE, Modality.AUDIO, Modality.VIDEO][i % 4],
        timestamp=t0 if i % 5 else t0.replace(tzinfo=timezone.utc, microsecond=123456),
        pointer=f"cold:{i:064x}.txt",
        links=[Link(LinkKind.PREV, f"p{i}"), Link(LinkKind.RELATED, f"r{i}")] if i % 2 else [],
        embedding=vec,
        session_id=f"session_{i // 10 + 1}",
        source_id=f"D{i // 10 + 1}:{i % 10 + 1}",
        speaker=["Caroline", "Melanie"][i % 2],
        details={"text": f"full original text number {i} \u00e9\u00e8 \U0001f3a8", "nested": {"a": [1, 2.5, None, True]},
                 "resolved_times": ["yesterday = 7 May 2023"]},
        status=[Status.ACTIVE, Status.PINNED, Status.ARCHIVED][i % 3],
        persons=["Caroline", "Melanie"][: i % 3],
        entities=[f"entity{i}"],
        keywords=["support", "group"] if i % 2 else [],
        location="Boston" if i % 3 else None,
        topic="lgbtq" if i % 4 else None,
        time_mentions=[TimeMention("yesterday", t0 - timedelta(days=1), t0 - timedelta(microseconds=1), "day")]
        if i % 2 else [],
        time_span=(1.5, 3.25) if i % 4 == 2 else None,
    )


def assert_same_mau(a: MAU, b: MAU) -> None:
    for f in fields(MAU):
        va, vb = getattr(a, f.name), getattr(b, f.name)
        if f.name == "embedding":
            np.testing.assert_array_equal(np.asarray(va, np.float32), np.asarray(vb, np.float32))
        else:
            assert va == vb, (a.id, f.name, va, vb)


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text
    return text


@pytest.fixture(scope="module")
def vectors(embedder) -> np.ndarray:
    texts = [f"{TOPICS[i % len(TOPICS)]} (memory {i})" for i in range(40)]
    return embedder.embed(texts)


@pytest.fixture(scope="module")
def saved_store(tmp_path_factory, vectors):
    """A saved store of 40 rich MAUs, plus the in-memory originals and reference search results."""
    path = tmp_path_factory.mktemp("store") / "s"
    store = MemoryStore.create(path, embedder_name="all-MiniLM-L6-v2", dim=384)
    originals = [rich_mau(i, vectors[i]) for i in range(40)]
    store.add(originals[:25])
    store.add(originals[25:])
    store.save()
    qvecs = vectors[[0, 1, 2, 3, 4]]
    reference = {
        "dense": [store.dense.search(q, 10) for q in qvecs],
        "sparse": [store.sparse().search(q, 10) for q in QUERIES],
    }
    store.close()
    return path, originals, qvecs, reference


def copy_store(saved_store, tmp_path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(saved_store[0], dst)
    return dst


def assert_searches_match(store: MemoryStore, saved_store) -> None:
    _, _, qvecs, reference = saved_store
    assert [store.dense.search(q, 10) for q in qvecs] == reference["dense"]
    assert [store.sparse().search(q, 10) for q in QUERIES] == reference["sparse"]


# ------------------------------------------------------------------ round trip
def test_codec_round_trips_every_field(vectors):
    for i in range(12):
        m = rich_mau(i, vectors[i])
        back = mau_from_json(mau_to_json(m))
        back.embedding = m.embedding
        assert_same_mau(m, back)


def test_save_and_open_round_trip_exactly(saved_store):
    path, originals, _, _ = saved_store
    store = MemoryStore.open(path, read_only=True)
    try:
        assert len(store) == 40 and store.dim == 384
        assert [m.id for m in store.maus] == [m.id for m in originals]  # insertion order kept
        for a in originals:
            assert_same_mau(a, store.get(a.id))
        np.testing.assert_array_equal(store.embeddings, np.stack([m.embedding for m in originals]))
        assert len(store.dense) == 40
        assert_searches_match(store, saved_store)
        manifest = json.loads((path / "manifest.json").read_text())
        assert manifest["count"] == 40 and manifest["version"] == STORE_VERSION
        assert manifest["indices"]["dense"]["count"] == 40
        assert manifest["embedder"] == {"name": "all-MiniLM-L6-v2", "dim": 384}
    finally:
        store.close()


def test_search_top_hit_is_the_matching_memory(saved_store):
    path, originals, _, _ = saved_store
    store = MemoryStore.open(path, read_only=True)
    try:
        for q in range(5):
            pos, score = store.dense.search(originals[q].embedding, 1)[0]
            assert pos == q and score == pytest.approx(1.0, abs=1e-5)
        top = store.sparse().search("pottery bowl dog face", 3)
        assert "pottery" in store.maus[top[0][0]].summary
        sims = store.similarity(originals[0].embedding, [0, 1])
        assert sims[0] == pytest.approx(1.0, abs=1e-5) and sims[1] < 0.99
    finally:
        store.close()


def test_update_persists_and_unknown_update_fails(saved_store, tmp_path):
    path = copy_store(saved_store, tmp_path)
    store = MemoryStore.open(path)
    m = store.get("D1:1")
    m.status = Status.ARCHIVED
    m.links.append(Link(LinkKind.NEXT, "D1:2"))
    store.update([m])
    with pytest.raises(StoreError, match="unknown MAU 'nope'"):
        store.update([MAU(id="nope", summary="x")])
    store.close()
    reopened = MemoryStore.open(path, read_only=True)
    got = reopened.get("D1:1")
    assert got.status == Status.ARCHIVED and Link(LinkKind.NEXT, "D1:2") in got.links
    assert reopened.active_mask()[0] == np.False_ and reopened.active_mask(include_archived=True) is None
    reopened.close()


def test_sparse_indices_follow_writes_and_are_kept_per_setting(saved_store, tmp_path, vectors):
    path = copy_store(saved_store, tmp_path)
    store = MemoryStore.open(path)
    assert store.sparse().search("zebra", 5) == []
    store.add([MAU(id="z1", summary="a zebra crossing", embedding=vectors[0], details={"text": "a striped horse"})])
    assert store.sparse().search("zebra", 5)[0][0] == 40  # a write invalidates the built index
    assert store.sparse("rank_bm25").search("zebra", 5)[0][0] == 40
    assert store.sparse().search("striped horse", 5)[0][0] == 40  # detail text is indexed by default
    assert store.sparse(fields="summary").search("striped horse", 5) == []
    assert store.sparse() is store.sparse("bm25s", "summary_and_details")  # built once per setting
    store.close()


# ------------------------------------------------------------------ bad writes
def test_bad_adds_raise_typed_errors_and_lose_nothing(saved_store, tmp_path, vectors):
    path = copy_store(saved_store, tmp_path)
    store = MemoryStore.open(path)
    new = lambda mid, summary="fresh memory": MAU(id=mid, summary=summary, embedding=vectors[0])  # noqa: E731
    cases = [
        ([new("n1"), new("n1")], DuplicateIdError, "'n1'"),  # duplicate inside the batch
        ([new("n2"), new("D1:1")], DuplicateIdError, "'D1:1'"),  # duplicate against the store
        ([new("n3"), MAU(id="n4", summary="no vector")], StoreError, "no 384-d embedding"),
        ([MAU(id="n5", summary="short", embedding=np.ones(12, np.float32))], StoreError, "384-d"),
        ([new("n6"), new("n7", "lone surrogate \ud800 here")], InputError, "not valid UTF-8"),
    ]
    for batch, err, fragment in cases:
        with pytest.raises(err) as info:
            store.add(batch)
        assert fragment in one_line(info.value)
        assert len(store) == 40 and len(store.dense) == 40
    # the failed writes left no open transaction behind: the store still takes writes
    store.add([new("n8")])
    store.close()
    reopened = MemoryStore.open(path)
    assert len(reopened) == 41 and "n8" in reopened.positions
    assert not ({"n1", "n2", "n3", "n5", "n6", "n7"} & set(reopened.positions))
    reopened.close()


def test_create_refuses_a_non_empty_directory(tmp_path):
    (tmp_path / "something.txt").write_text("x")
    with pytest.raises(StoreError, match="not empty"):
        MemoryStore.create(tmp_path, embedder_name="m", dim=8)


# ------------------------------------------------------------------ read-only
def test_read_only_open_refuses_writes_and_still_searches(saved_store, tmp_path):
    # a path with characters that must be escaped in an SQLite URI
    weird = tmp_path / "we?rd #dir %41"
    shutil.copytree(saved_store[0], weird)
    store = MemoryStore.open(weird, read_only=True)
    try:
        for call in (lambda: store.add([MAU(id="x", summary="x", embedding=np.zeros(384, np.float32))]),
                     lambda: store.update([store.get("D1:1")]), store.save):
            with pytest.raises(StoreReadOnlyError) as info:
                call()
            assert str(weird) in one_line(info.value)
        assert len(store) == 40
        assert_searches_match(store, saved_store)
    finally:
        store.close()


# ------------------------------------------------------------------ damaged stores
def test_deleted_dense_index_is_rebuilt(saved_store, tmp_path):
    path = copy_store(saved_store, tmp_path)
    (path / "dense.faiss").unlink()
    store = MemoryStore.open(path, read_only=True)
    assert len(store.dense) == 40
    assert_searches_match(store, saved_store)
    store.close()


@pytest.mark.parametrize("fix_checksum", [False, True], ids=["checksum-mismatch", "undecodable"])
def test_garbage_dense_index_is_rebuilt(saved_store, tmp_path, fix_checksum):
    path = copy_store(saved_store, tmp_path)
    garbage = os.urandom(5000)
    (path / "dense.faiss").write_bytes(garbage)
    if fix_checksum:  # the checksum matches, so the snapshot has to fail to deserialize
        manifest = json.loads((path / "manifest.json").read_text())
        manifest["indices"]["dense"]["sha256"] = sha256_bytes(garbage)
        atomic_write_json(path / "manifest.json", manifest)
    store = MemoryStore.open(path, read_only=True)
    assert len(store.dense) == 40
    assert_searches_match(store, saved_store)
    store.close()


def test_garbage_sparse_snapshot_is_rebuilt(saved_store, tmp_path):
    path = copy_store(saved_store, tmp_path)
    (path / "sparse.json").write_text('["not", "the corpus"]')
    store = MemoryStore.open(path, read_only=True)
    assert_searches_match(store, saved_store)
    store.close()


@pytest.mark.parametrize("content", [b"{ this is not json", b"\xff\xfe\x00garbage", b""], ids=["text", "binary", "empty"])
def test_garbage_manifest_is_a_one_line_corrupt_error_naming_the_file(saved_store, tmp_path, content):
    path = copy_store(saved_store, tmp_path)
    (path / "manifest.json").write_bytes(content)
    with pytest.raises(StoreCorruptError) as info:
        MemoryStore.open(path)
    assert str(path / "manifest.json") in one_line(info.value)


@pytest.mark.parametrize(
    "edit, error, fragment",
    [
        (lambda m: m.update(version=STORE_VERSION + 1), StoreVersionError, f"version {STORE_VERSION + 1}"),
        (lambda m: m.update(version="0"), StoreVersionError, "re-ingest"),
        (lambda m: m.update(format="something-else"), StoreCorruptError, "not a memsys store manifest"),
        (lambda m: m.pop("embedder"), StoreCorruptError, "embedder.dim"),
        (lambda m: m.update(embedder={"name": "x", "dim": "384"}), StoreCorruptError, "embedder.dim"),
    ],
    ids=["newer-version", "older-version", "wrong-format", "no-embedder", "bad-dim"],
)
def test_foreign_or_other_version_manifest_is_refused(saved_store, tmp_path, edit, error, fragment):
    path = copy_store(saved_store, tmp_path)
    manifest = json.loads((path / "manifest.json").read_text())
    edit(manifest)
    atomic_write_json(path / "manifest.json", manifest)
    with pytest.raises(error) as info:
        MemoryStore.open(path)
    message = one_line(info.value)
    assert fragment in message and "manifest.json" in message


def test_foreign_directory_error_names_the_manifest(tmp_path):
    (tmp_path / "notes.txt").write_text("not a store")
    with pytest.raises(StoreError) as info:
        MemoryStore.open(tmp_path)
    assert "manifest.json" in one_line(info.value)
    with pytest.raises(StoreError, match="not a directory"):
        MemoryStore.open(tmp_path / "missing")


@pytest.mark.parametrize("damage", ["garbage", "truncated", "deleted"])
def test_corrupt_hot_tier_is_a_corrupt_error_naming_the_file(saved_store, tmp_path, damage):
    path = copy_store(saved_store, tmp_path)
    hot = path / "hot.sqlite"
    if damage == "garbage":
        hot.write_bytes(os.urandom(hot.stat().st_size))
    elif damage == "truncated":  # header intact, pages gone
        hot.write_bytes(hot.read_bytes()[:2048])
    else:
        hot.unlink()
    for read_only in (False, True):
        with pytest.raises(StoreCorruptError) as info:
            MemoryStore.open(path, read_only=read_only)
        assert str(hot) in one_line(info.value)


# ------------------------------------------------------------------ crash safety
CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import numpy as np
    from memsys.records import MAU
    from memsys.store import MemoryStore

    path, batch = Path(sys.argv[1]), int(sys.argv[2])
    if (path / "manifest.json").exists():
        store = MemoryStore.open(path)
    else:
        store = MemoryStore.create(path, embedder_name="random", dim=384)
    n = len(store)  # ids are m0..m{n-1}: every batch commits whole or not at all
    print("ready", n, flush=True)
    rounds = 0
    while True:
        vecs = np.random.default_rng(n).standard_normal((batch, 384)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        maus = [MAU(id=f"m{n + i}", summary=f"memory number w{n + i} about topic {(n + i) % 7}",
                    embedding=vecs[i], details={"text": "x" * 300}) for i in range(batch)]
        print("begin", n, n + batch - 1, flush=True)
        store.add(maus)
        n += batch
        print("committed", n, flush=True)
        rounds += 1
        if rounds % 2 == 0:
            print("saving", flush=True)
            store.save()
            print("saved", flush=True)
    """
)


def _expected_vector(i: int, batch: int) -> np.ndarray:
    start = i - i % batch
    vecs = np.random.default_rng(start).standard_normal((batch, 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)  # exactly as the writer computes it
    return vecs[i - start]


def _hot_journal_blocks_read_only(hot: Path) -> bool:
    """Whether a plain read-only SQLite connection fails here (a hot journal needs a rollback)."""
    conn = sqlite3.connect(f"{hot.resolve().as_uri()}?mode=ro", uri=True)
    try:
        conn.execute("SELECT COUNT(*) FROM maus").fetchone()
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        conn.close()


def test_store_survives_sigkill_at_several_points(tmp_path):
    """A real writer process is SIGKILLed mid-batch, mid-save, between batches; every state opens."""
    script = tmp_path / "writer.py"
    script.write_text(CHILD)
    path = tmp_path / "store"
    hot, journal = path / "hot.sqlite", path / "hot.sqlite-journal"
    batch = 1500  # ~3 MB per transaction: more than SQLite's page cache, so pages spill to the file
    rng = random.Random(7)
    committed = 0
    # Kill triggers: right after the n-th "begin" line; "hot": inside the write transaction once
    # database pages were written (the journal is then needed to roll back); on "saving"; after
    # a random delay; right after the n-th "committed" line.
    plan = [("begin", 1), ("hot", 2), ("saving", 1), ("delay", 0.6), ("committed", 2), ("hot", 1)]
    hot_journals = 0
    for trigger, value in plan:
        proc = subprocess.Popen([sys.executable, str(script), str(path), str(batch)], stdout=subprocess.PIPE,
                                text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            ready = proc.stdout.readline().split()
            assert ready and ready[0] == "ready", ready
            assert int(ready[1]) == committed
            in_flight, seen = 0, 0
            deadline = time.monotonic() + 60
            if trigger == "delay":
                time.sleep(value * rng.random() + 0.05)
            else:
                while time.monotonic() < deadline:
                    line = proc.stdout.readline().split()
                    assert line, "writer exited early"
                    if line[0] == "begin":
                        in_flight = int(line[2]) + 1
                    elif line[0] == "committed":
                        committed, in_flight = int(line[1]), 0
                    seen += line[0] == ("begin" if trigger == "hot" else trigger)
                    if seen >= value:
                        break
                if trigger == "hot":
                    size = hot.stat().st_size
                    while proc.poll() is None and time.monotonic() < deadline:
                        if journal.exists() and hot.stat().st_size > size:
                            break
                        time.sleep(0.0002)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            for line in proc.stdout.read().splitlines():  # commits it reported before dying happened
                parts = line.split()
                if parts and parts[0] == "committed":
                    committed = int(parts[1])
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
        assert proc.returncode == -signal.SIGKILL
        hot_journals += _hot_journal_blocks_read_only(hot)

        # Read-only first: it must cope with a hot rollback journal left by the killed writer.
        for read_only in (True, False):
            store = MemoryStore.open(path, read_only=read_only)
            try:
                n = len(store)
                assert n >= committed, (trigger, n, committed)
                assert n % batch == 0, "a batch was committed partially"
                assert n <= max(committed, in_flight) + batch
                assert [m.id for m in store.maus] == [f"m{i}" for i in range(n)]
                assert len(store.dense) == n  # the snapshot is stale or torn: rebuilt from the hot tier
                if n:
                    probe = rng.randrange(n)
                    np.testing.assert_array_equal(store.maus[probe].embedding, _expected_vector(probe, batch))
                    assert store.dense.search(_expected_vector(probe, batch), 1)[0][0] == probe
                    assert store.sparse().search(f"w{probe}", 1)[0][0] == probe
            finally:
                store.close()
        committed = n
    assert committed >= 3 * batch
    assert hot_journals >= 1, "no kill left a hot journal: the mid-transaction case was not exercised"


# ------------------------------------------------------------------ cold tier
def test_cold_store_dedupes_and_round_trips(tmp_path):
    cold = ColdStore(tmp_path / "cold")
    data = os.urandom(4096)
    p1 = cold.put(data, "jpg")
    p2 = cold.put(data, ".jpg")
    assert p1 == p2 and p1.startswith("cold:") and p1.endswith(".jpg")
    assert len([f for f in (tmp_path / "cold").rglob("*") if f.is_file()]) == 1
    assert cold.get(p1) == data and cold.get(p1, verify=True) == data and cold.size(p1) == 4096
    assert cold.put(data, "png") != p1  # another extension is another object
    text = "raw turn text \u00e9 \U0001f3a8"
    pt = cold.put_text(text)
    assert cold.get_text(pt) == text and cold.put_text(text) == pt
    # pointers are relative: they survive moving the store
    shutil.move(tmp_path / "cold", tmp_path / "moved")
    assert ColdStore(tmp_path / "moved").get(p1) == data


def test_cold_store_errors(tmp_path):
    cold = ColdStore(tmp_path)
    pointer = cold.put(b"original", "bin")
    cold.path(pointer).write_bytes(b"tampered")
    assert cold.get(pointer) == b"tampered"
    with pytest.raises(StoreCorruptError, match="does not match its hash"):
        cold.get(pointer, verify=True)
    cold.path(pointer).unlink()
    with pytest.raises(StoreCorruptError, match="cold content missing"):
        cold.get(pointer)
    with pytest.raises(StoreError, match="not a cold-storage pointer"):
        cold.get("/etc/passwd")


def test_atomic_json_write_leaves_no_temp_files(tmp_path):
    target = tmp_path / "deep" / "state.json"
    atomic_write_json(target, {"b": 1, "a": [1, 2]})
    atomic_write_json(target, {"b": 2})
    assert json.loads(target.read_text()) == {"b": 2}
    assert [p.name for p in target.parent.iterdir()] == ["state.json"]
