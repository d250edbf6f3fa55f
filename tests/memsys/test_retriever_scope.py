"""Scoped retrieval through the public API: nothing outside the scope reaches the context by any path
(dense hits, BM25 hits, neighbouring turns), and a narrow scope still gets its full depth."""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta

import pytest

from memsys import Memory, Scope, Turn
from memsys.cli import _scope
from memsys.errors import InputError
from memsys.ingest.readers import read_jsonl_turns

DAY0 = datetime(2023, 5, 1, 10, 0)
DISHES = ["lasagna", "ramen", "paella", "curry", "risotto", "tacos", "dumplings", "gumbo"]


def _turns() -> list[Turn]:
    """Bob talks about cooking far more (and more on-topic) than Alice; Alice's turns are spread over days."""
    turns = []
    for i, dish in enumerate(DISHES):
        turns.append(Turn(f"b{i}", "Bob", f"I cooked {dish} for dinner tonight, cooking {dish} is my favourite.",
                          DAY0 + timedelta(hours=i), "bob-s1", user="bob", conversation="bob-chat"))
    for i, (dish, what) in enumerate(zip(DISHES[:4], ["garden", "hike", "book", "concert"])):
        turns.append(Turn(f"a{i}", "Alice", f"I cooked {dish} after the {what}.", DAY0 + timedelta(days=i),
                          "alice-s1", user="alice", conversation="alice-chat"))
    return turns


@pytest.fixture(scope="module")
def memory(tmp_path_factory, embedder):
    cfg_over = ["memory.retrieval.top_k=6", "memory.retrieval.dense_k=6", "memory.retrieval.sparse_k=6",
                "memory.retrieval.expand_top=6", "memory.retrieval.expand_window=2",
                "memory.ingest.text.enabled=false"]
    mem = Memory.create(tmp_path_factory.mktemp("scoped") / "s", "omni", overrides=cfg_over, embedder=embedder)
    mem.add(_turns())
    yield mem
    mem.close()


def _ids(mem: Memory, query: str, scope: Scope | None) -> list[str]:
    return [it.mau.id for it in mem.retrieve(query, scope=scope).items]


def test_user_scope_keeps_out_every_other_user_and_keeps_full_depth(memory):
    unscoped = _ids(memory, "What did I cook for dinner?", None)
    assert any(i.startswith("b") for i in unscoped)  # Bob's turns win an unscoped query
    alice = _ids(memory, "What did I cook for dinner?", Scope(user="alice"))
    # every Alice turn is found although Bob's outrank them all: the scope filters inside the index query
    assert sorted(alice) == ["a0", "a1", "a2", "a3"]
    bob = _ids(memory, "What did I cook?", Scope(conversation="bob-chat"))
    assert len(bob) >= 6 and all(i.startswith("b") for i in bob)


def test_time_range_scope_stops_neighbouring_turn_expansion_at_the_bound(memory):
    # a1 is on day 1; its session neighbours a0 (day 0) and a2 (day 2) lie outside the range
    day1 = Scope(user="alice", start=DAY0 + timedelta(days=1), end=DAY0 + timedelta(days=1, hours=23))
    assert _ids(memory, "What did Alice cook after the hike?", day1) == ["a1"]
    # without the bound the same query expands into the neighbours (so the bound is what kept them out)
    assert {"a0", "a2"} & set(_ids(memory, "What did Alice cook after the hike?", Scope(user="alice")))


def test_an_empty_scope_is_no_scope_and_a_scope_nobody_is_in_returns_nothing(memory):
    q = "What did I cook for dinner?"
    assert _ids(memory, q, Scope()) == _ids(memory, q, None)
    assert _ids(memory, q, Scope(user="carol")) == []


def test_jsonl_turns_carry_user_and_conversation(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"id": "x1", "speaker": "Al", "text": "hi", "user": "u7", "conversation": "c1"}\n'
                 '{"id": "x2", "speaker": "Al", "text": "hello"}\n')
    a, b = list(read_jsonl_turns(f))
    assert (a.user, a.conversation) == ("u7", "c1") and (b.user, b.conversation) == (None, None)


def test_cli_scope_flags_parse_dates_and_refuse_bad_ones():
    ns = argparse.Namespace(user="alice", conversation=None, since="2023-05-02", until="2023-05-02")
    s = _scope(ns)
    assert s == Scope(user="alice", start=datetime(2023, 5, 2), end=datetime(2023, 5, 2, 23, 59, 59, 999999))
    assert _scope(argparse.Namespace(user=None, conversation=None, since=None, until=None)) is None
    with pytest.raises(InputError, match="--since 'yesterday' is not an ISO 8601 date"):
        _scope(argparse.Namespace(user=None, conversation=None, since="yesterday", until=None))


def test_the_durable_bm25_index_sees_the_speaker_and_filters_the_scope_inside_its_query(tmp_path, embedder):
    """Above ``index.sparse_exact_max`` the store's own tantivy index answers; it indexes the preset's
    sparse index text (omni: the speaker first), so a speaker's name finds turns that never say it."""
    from memsys.index.tantivy_bm25 import TantivyIndex

    mem = Memory.create(tmp_path / "s", "omni", embedder=embedder,
                        overrides=["memory.index.sparse_exact_max=4", "memory.ingest.text.enabled=false"])
    with mem:
        mem.add(_turns())
        assert isinstance(mem.retriever.sparse_index(), TantivyIndex)
        hits = mem.store.search_sparse("Alice", 10)
        assert sorted(mem.store.maus[p].id for p, _ in hits) == ["a0", "a1", "a2", "a3"]
        day = Scope(start=DAY0 + timedelta(days=2), end=DAY0 + timedelta(days=3))
        assert sorted(mem.store.maus[p].id for p, _ in mem.store.search_sparse("Alice cooked", 10, day)) == ["a2", "a3"]
    reopened = Memory.open(tmp_path / "s", read_only=True, embedder=embedder)
    with reopened:
        assert reopened.store.sparse_index_text == "speaker"
        assert {m.mau.id for m in reopened.retrieve("What did Alice cook?", scope=Scope(user="alice")).items} \
            <= {"a0", "a1", "a2", "a3"}
