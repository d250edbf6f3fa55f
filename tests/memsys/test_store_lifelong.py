"""A store that grows (issue #16): ANN and tantivy indexes built incrementally equal a rebuild,
scoped queries stay inside their scope, and a writer killed at random points reopens complete."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta

import numpy as np
import pytest

from memsys.config import IndexConfig
from memsys.errors import DuplicateIdError
from memsys.index.scope import Scope, in_scope, scope_fields
from memsys.records import MAU, Status
from memsys.store import MemoryStore

DIM = 32
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda sigma omega piano violin garden".split()
# small thresholds, so a few thousand MAUs cross every one of them
SMALL = dict(dense_flat_max=800, scope_exact_max=300, sparse_exact_max=0, lazy_records_above=1500,
             record_cache=200, dense_snapshot_every=1000, hnsw_ef_search=256, ivf_nlist=16, ivf_nprobe=16)


def vectors(n: int, seed: int) -> np.ndarray:
    """Clustered unit vectors (like real embeddings, unlike uniform noise)."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((24, DIM))
    v = centers[rng.integers(0, 24, n)] + 0.35 * rng.standard_normal((n, DIM))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def make_maus(n: int, seed: int = 0) -> list[MAU]:
    rng = random.Random(seed)
    vecs = vectors(n, seed)
    t0 = datetime(2023, 1, 1)
    return [MAU(f"m{i}", " ".join(rng.choices(WORDS, k=rng.randint(3, 9))) + f" w{i}",
                timestamp=t0 + timedelta(hours=rng.randint(0, 24 * 365)) if i % 17 else None,
                session_id=f"s{i % 40}", embedding=vecs[i],
                details={"user": f"u{i % 5}", "conversation": f"c{i % 11}"})
            for i in range(n)]


def build(path, maus: list[MAU], batch: int, ann: str) -> MemoryStore:
    store = MemoryStore.create(path, embedder_name="random", dim=DIM, index=IndexConfig(dense_ann=ann, **SMALL))
    for start in range(0, len(maus), batch):
        store.add(maus[start:start + batch])
    return store


@pytest.mark.parametrize("ann", ["hnsw", "ivf"])
def test_incremental_add_equals_full_rebuild(tmp_path, ann):
    maus = make_maus(3000)
    grown = build(tmp_path / "grown", maus, 250, ann)
    rebuilt = build(tmp_path / "rebuilt", make_maus(3000), 3000, ann)
    assert grown.dense.kind == rebuilt.dense.kind == ann
    assert grown.sparse()._n == rebuilt.sparse()._n == 3000  # both answered by tantivy
    qv = vectors(60, seed=99)
    for i in range(60):
        query = " ".join(random.Random(i).choices(WORDS, k=3))
        assert grown.search_sparse(query, 20) == rebuilt.search_sparse(query, 20)  # tantivy: identical
        if ann == "ivf":  # nprobe == nlist: every list is scanned, so the result is exact and identical
            assert grown.search_dense(qv[i], 10) == rebuilt.search_dense(qv[i], 10)
    # HNSW's graph depends on insertion batches, so the two may differ where the search is
    # approximate; both must agree with each other and with the exact top-10 almost everywhere
    exact = [set(np.argsort(-(grown.embeddings @ qv[i]))[:10].tolist()) for i in range(60)]
    a = [{p for p, _ in grown.search_dense(qv[i], 10)} for i in range(60)]
    b = [{p for p, _ in rebuilt.search_dense(qv[i], 10)} for i in range(60)]
    for x, y in ((a, b), (a, exact), (b, exact)):
        assert np.mean([len(s & t) / 10 for s, t in zip(x, y)]) >= 0.98
    saved = [grown.search_dense(v, 10) for v in qv]
    grown.save()
    grown.close()
    reopened = MemoryStore.open(tmp_path / "grown")
    assert reopened.dense.kind == ann and len(reopened) == 3000
    assert [reopened.search_dense(v, 10) for v in qv] == [grown_hits for grown_hits in saved]
    reopened.close()
    rebuilt.close()


def _brute_force(maus: list[MAU], scope: Scope, qv: np.ndarray, k: int) -> list[int]:
    allowed = [i for i, m in enumerate(maus) if in_scope(scope_fields(m), scope)]
    sims = np.stack([maus[i].embedding for i in allowed]) @ qv if allowed else np.zeros(0)
    return [allowed[j] for j in np.argsort(-sims, kind="stable")[:k]]


def test_scoped_queries_never_leave_their_scope(tmp_path):
    maus = make_maus(2500, seed=3)
    store = build(tmp_path / "s", maus, 500, "hnsw")
    rng = random.Random(5)
    qv = vectors(40, seed=7)
    t0 = datetime(2023, 1, 1)
    scopes = [Scope(user="u1"), Scope(conversation="c4"), Scope(user="u2", conversation="c7"),
              Scope(start=t0 + timedelta(days=100), end=t0 + timedelta(days=130)),
              Scope(conversation="c3", end=t0 + timedelta(days=200)), Scope(start=t0 + timedelta(days=300)),
              Scope(user="nobody")]
    for i, scope in enumerate(scopes * 4):
        inside = {j for j, m in enumerate(maus) if in_scope(scope_fields(m), scope)}
        dense = store.search_dense(qv[i], 15, scope)
        assert {p for p, _ in dense} <= inside
        if len(inside) <= SMALL["scope_exact_max"]:  # exact path: the true top-k of the scope
            assert [p for p, _ in dense] == _brute_force(maus, scope, qv[i], 15)
        else:
            assert len(dense) == min(15, len(inside))
        query = " ".join(rng.choices(WORDS, k=3))
        sparse = store.search_sparse(query, 30, scope)
        assert {p for p, _ in sparse} <= inside
        unscoped = {p for p, _ in store.search_sparse(query, 3000)}
        assert {p for p, _ in sparse} <= unscoped
        if inside:
            assert sparse, scope
    store.close()


def test_old_store_without_scope_table_is_upgraded_on_open(tmp_path):
    maus = make_maus(300, seed=1)
    store = MemoryStore.create(tmp_path / "old", embedder_name="random", dim=DIM,
                               index=IndexConfig(dense_ann="none", sparse_incremental=False))
    store.add(maus)
    store.save()
    store.hot_connection().execute("DROP TABLE mau_scope")  # as written before issue #16
    store.close()
    store = MemoryStore.open(tmp_path / "old")
    got = store.search_dense(maus[0].embedding, 5, Scope(user="u0"))
    assert got and all(maus[p].details["user"] == "u0" for p, _ in got)
    store.close()


def test_archived_status_and_lazy_records_survive_reopen(tmp_path):
    maus = make_maus(2000, seed=2)
    store = build(tmp_path / "s", maus, 1000, "hnsw")
    assert not isinstance(store.maus, list)  # past lazy_records_above
    m = store.get("m7")
    m.status = Status.ARCHIVED
    store.update([m])
    store.close()
    store = MemoryStore.open(tmp_path / "s")
    assert store.get("m7").status == Status.ARCHIVED and not store.active_mask()[7]
    assert store.maus[-1].id == "m1999" and [x.id for x in store.maus[10:13]] == ["m10", "m11", "m12"]
    assert store.last_in_sessions()["s0"] == "m1960"
    store.close()


def _hot_rows(store: MemoryStore) -> list[tuple]:
    conn = store.hot_connection()
    return (conn.execute("SELECT seq, id, record, embedding FROM maus ORDER BY seq").fetchall()
            + conn.execute("SELECT * FROM mau_scope ORDER BY seq").fetchall())


def test_batch_add_equals_one_by_one_add(tmp_path):
    """What is stored and found does not depend on how the MAUs were batched (issue #16's batching)."""
    small = {**SMALL, "sparse_commit_every": 700}
    stores = []
    for name, batch in (("one", 1), ("some", 97), ("all", 2000)):
        store = MemoryStore.create(tmp_path / name, embedder_name="random", dim=DIM, index=IndexConfig(dense_ann="ivf", **small))
        maus = make_maus(2000, seed=4)
        for start in range(0, len(maus), batch):
            store.add(maus[start:start + batch])
        stores.append(store)
    one = stores[0]
    qv = vectors(30, seed=8)
    for other in stores[1:]:
        assert _hot_rows(other) == _hot_rows(one)
        assert other.dense.kind == one.dense.kind == "ivf"
        np.testing.assert_array_equal(other.embeddings, one.embeddings)
        assert other.active_mask().tolist() == one.active_mask().tolist() == [True] * 2000
        for i in range(30):
            query = " ".join(random.Random(i).choices(WORDS, k=3))
            assert other.search_sparse(query, 20) == one.search_sparse(query, 20)
            assert other.search_sparse(query, 20, Scope(user="u3")) == one.search_sparse(query, 20, Scope(user="u3"))
            assert other.search_dense(qv[i], 10) == one.search_dense(qv[i], 10)
    for store in stores:
        store.close()


def test_sparse_commits_are_deferred_but_every_add_is_searchable(tmp_path):
    store = build(tmp_path / "s", make_maus(1200, seed=6), 100, "none")  # sparse_commit_every: default 20k
    tv = store._tantivy
    assert tv.pending == 1200  # nothing committed yet ...
    assert 1199 in {p for p, _ in store.search_sparse("w1199", 5)}  # ... yet a read sees every add
    assert tv.pending == 0 and tv.indexed_upto() == 1200
    store.close()
    store = MemoryStore.create(tmp_path / "t", embedder_name="random", dim=DIM,
                               index=IndexConfig(dense_ann="none", **{**SMALL, "sparse_commit_every": 500}))
    for start in range(0, 1200, 100):
        store.add(make_maus(1200, seed=6)[start:start + 100])
        assert store._tantivy.pending == (start + 100) % 500
    store.close()


def test_an_update_replaces_the_bm25_document_of_its_mau(tmp_path):
    store = build(tmp_path / "s", make_maus(600), 200, "none")
    m = store.get("m5")
    m.summary = "zzzrewritten text"
    store.update([m])
    assert [p for p, _ in store.search_sparse("zzzrewritten", 5)] == [5]
    assert 5 not in {p for p, _ in store.search_sparse("w5", 600)}  # the old document is gone
    assert len(store.sparse()) == 600
    store.close()


def test_a_read_only_store_under_the_exact_threshold_never_opens_tantivy(tmp_path, caplog):
    """The sandbox opens the shared store cache read-only on a read-only mount, where tantivy cannot
    take its lock file: a LoCoMo-sized store warned "unreadable" on every evaluation for an index
    it never consults. A damaged tantivy folder stands in for the refused lock here."""
    store = MemoryStore.create(tmp_path / "s", embedder_name="random", dim=DIM,
                               index=IndexConfig(dense_ann="none", **{**SMALL, "sparse_exact_max": 1000}))
    store.add(make_maus(300))
    store.close()
    (tmp_path / "s" / "sparse.tantivy" / "meta.json").write_text("{not json")
    with caplog.at_level("WARNING"):
        ro = MemoryStore.open(tmp_path / "s", read_only=True)
    assert "unreadable" not in caplog.text
    assert [p for p, _ in ro.search_sparse("w42", 1)] == [42]  # the exact in-memory BM25 answers
    ro.close()


UPDATE_THEN_DIE = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from memsys.config import IndexConfig
    from memsys.store import MemoryStore
    from tests.memsys.test_store_lifelong import DIM, SMALL, make_maus

    store = MemoryStore.create(Path(sys.argv[1]), embedder_name="random", dim=DIM, index=IndexConfig(**SMALL))
    store.add(make_maus(500))
    store.save()  # committed: the 500 MAUs as first written
    m = store.get("m5")
    m.summary = "zzzrewritten text"
    store.update([m])  # its BM25 document waits for a commit that never comes
    store.add(make_maus(600)[500:])
    os._exit(0)
    """
)


def test_updates_and_adds_left_uncommitted_by_a_dead_writer_are_redone_on_open(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(UPDATE_THEN_DIE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, str(script), str(tmp_path / "s")], env=env, check=True, timeout=300)
    store = MemoryStore.open(tmp_path / "s")
    assert len(store) == 600 and store._tantivy.indexed_upto() == 600
    assert [p for p, _ in store.search_sparse("zzzrewritten", 5)] == [5]
    assert 5 not in {p for p, _ in store.search_sparse("w5", 600)}
    assert 599 in {p for p, _ in store.search_sparse("w599", 5)}
    assert store.hot_connection().execute("SELECT COUNT(*) FROM sparse_todo").fetchone()[0] == 0
    store.close()


def test_duplicate_id_in_a_lazy_store_is_refused_whole(tmp_path):
    maus = make_maus(2000, seed=2)
    store = build(tmp_path / "s", maus[:1800], 600, "none")
    assert not isinstance(store.positions, dict)  # lazy: the hot tier's unique index answers
    before = _hot_rows(store)
    batch = maus[1800:1900] + [make_maus(20, seed=2)[17]]  # "m17" is stored already
    with pytest.raises(DuplicateIdError, match="'m17'"):
        store.add(batch)
    assert _hot_rows(store) == before and len(store) == 1800 and len(store.dense) == 1800
    store.add(maus[1800:])  # the store goes on as if the failed batch never came
    assert len(store) == 2000 and store.get("m1999").summary == maus[1999].summary
    store.close()


CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from memsys.config import IndexConfig
    from memsys.store import MemoryStore
    from tests.memsys.test_store_lifelong import DIM, SMALL, make_maus

    path, batch = Path(sys.argv[1]), int(sys.argv[2])
    if (path / "manifest.json").exists():
        store = MemoryStore.open(path)
    else:
        store = MemoryStore.create(path, embedder_name="random", dim=DIM, index=IndexConfig(**SMALL))
    maus = make_maus(20000)
    n = len(store)
    print("ready", n, flush=True)
    while n < len(maus):
        store.add(maus[n:n + batch])
        n = min(n + batch, len(maus))
        print("committed", n, flush=True)
    """
)


@pytest.mark.slow
def test_writer_killed_at_random_points_reopens_complete_to_its_last_batch(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(CHILD)
    path, batch = tmp_path / "store", 300
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    rng = random.Random(16)
    committed = 0
    reference = make_maus(20000)
    for _ in range(5):
        proc = subprocess.Popen([sys.executable, str(script), str(path), str(batch)], stdout=subprocess.PIPE,
                                text=True, env=env)
        assert proc.stdout.readline().split()[0] == "ready"
        # kill mid-ingest whatever the machine's speed: after a random number of commits, then a random
        # moment inside the next batch
        for _ in range(rng.randint(1, 6)):
            line = proc.stdout.readline()
            committed = max(committed, int(line.split()[1])) if line else committed
        time.sleep(rng.uniform(0.0, 0.2))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        for line in proc.stdout.read().splitlines():
            committed = max(committed, int(line.split()[1]))
        proc.stdout.close()
        store = MemoryStore.open(path)
        try:
            n = len(store)
            assert committed <= n <= committed + batch and (n % batch == 0 or n == len(reference))  # at most the batch in flight lost
            assert len(store.dense) == n and store._tantivy.indexed_upto() == n  # indexes caught up
            probe = rng.randrange(n)
            assert store.get(f"m{probe}").summary == reference[probe].summary
            assert store.search_dense(reference[probe].embedding, 1)[0][0] == probe
            assert probe in {p for p, _ in store.search_sparse(f"w{probe}", 5)}
        finally:
            store.close()
        committed = n
    assert committed >= 3 * batch
