"""ResponseCache on real SQLite files in tmp_path."""

from __future__ import annotations

import sqlite3
import statistics
import threading
import time

import pytest

from harness.errors import CacheError
from harness.reply_cache import ResponseCache, request_key

REPLY = {"text": "7 May 2023", "parsed": None, "prompt_tokens": 12, "completion_tokens": 4, "model": "m"}


def key(**overrides) -> str:
    fields = dict(model="m", messages=[{"role": "user", "content": "q"}], response_format=None,
                  temperature=0.0, max_tokens=64, seed=0)
    fields.update(overrides)
    return request_key(**fields)


def test_roundtrip_persists_across_instances(tmp_path):
    path = tmp_path / "c.sqlite"
    with ResponseCache(path) as cache:
        assert cache.get(key()) is None
        cache.put(key(), "m", REPLY)
        assert cache.get(key()) == REPLY
        assert cache.stats().hits == 1 and cache.stats().misses == 1 and cache.stats().writes == 1
    with ResponseCache(path) as again:
        assert again.get(key()) == REPLY and len(again) == 1


def test_key_is_canonical_and_covers_reply_shaping_fields():
    assert key(messages=[{"content": "q", "role": "user"}]) == key()  # dict order does not matter
    assert key(temperature=0) == key(temperature=0.0)
    variants = [
        key(model="other"), key(temperature=0.7), key(max_tokens=65), key(seed=None), key(seed=1),
        key(response_format={"type": "json_object"}), key(messages=[{"role": "user", "content": "q2"}]),
    ]
    assert len({key(), *variants}) == len(variants) + 1


def test_hit_latency_under_5_ms(tmp_path):
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        for i in range(500):
            cache.put(key(max_tokens=i), "m", REPLY)
        timings = []
        for i in range(200):
            started = time.perf_counter()
            assert cache.get(key(max_tokens=i)) is not None
            timings.append(time.perf_counter() - started)
    assert statistics.median(timings) < 0.005


def test_corrupt_file_is_moved_aside_and_replaced(tmp_path):
    path = tmp_path / "c.sqlite"
    garbage = b"this is not a database, just bytes " * 200
    path.write_bytes(garbage)
    with pytest.warns(RuntimeWarning, match="corrupt") as warned:
        cache = ResponseCache(path)
    assert "\n" not in str(warned[0].message)
    moved = list(tmp_path.glob("c.sqlite.corrupt-*"))
    assert len(moved) == 1 and moved[0].read_bytes() == garbage  # nothing lost
    cache.put(key(), "m", REPLY)
    assert cache.get(key()) == REPLY and cache.stats().moved_aside == 1
    cache.close()


def test_corrupt_file_raises_one_line_error_naming_the_file_when_asked(tmp_path):
    path = tmp_path / "c.sqlite"
    path.write_bytes(b"\x00garbage" * 1000)
    with pytest.raises(CacheError) as info:
        ResponseCache(path, on_corrupt="raise")
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    assert path.read_bytes().startswith(b"\x00garbage")  # left untouched


def test_locked_database_waits_then_raises_cache_error(tmp_path):
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path, busy_timeout_s=0.2)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another writer holds the database
    try:
        started = time.perf_counter()
        with pytest.raises(CacheError, match="locked") as info:
            cache.put(key(), "m", REPLY)
        assert time.perf_counter() - started >= 0.15  # it waited for the busy timeout
        assert str(path) in str(info.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    cache.put(key(), "m", REPLY)  # usable again once the lock is gone
    cache.close()


def test_threads_share_one_cache(tmp_path):
    errors: list[BaseException] = []
    with ResponseCache(tmp_path / "c.sqlite") as cache:

        def worker(n: int) -> None:
            try:
                for i in range(50):
                    k = key(max_tokens=i, seed=n)
                    cache.put(k, "m", {**REPLY, "text": f"{n}-{i}"})
                    assert cache.get(k)["text"] == f"{n}-{i}"
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors and len(cache) == 400
