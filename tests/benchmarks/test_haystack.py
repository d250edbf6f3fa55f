"""The lifelong haystack generator (benchmarks/haystack.py) on the real LoCoMo and Mem-Gallery files."""

from __future__ import annotations

from itertools import islice

import pytest

from benchmarks.datasets.locomo import load_locomo
from benchmarks.datasets.memgallery import load_memgallery
from benchmarks.haystack import distractor_sources, generate_haystack, planted_items


@pytest.fixture(scope="module")
def data():
    lo, mg = load_locomo(), load_memgallery()
    planted = lo.conversations[0]
    return planted, distractor_sources([lo, mg], planted.id)


def test_haystack_is_deterministic_sized_and_holds_the_planted_conversation_in_order(data):
    planted, sources = data
    items = list(generate_haystack(6000, planted, sources, seed=3))
    assert len(items) == 6000 and len({it.id for it in items}) == 6000
    assert items == list(generate_haystack(6000, planted, sources, seed=3))
    assert items != list(generate_haystack(6000, planted, sources, seed=4))
    plant = [it for it in items if it.planted]
    assert plant == planted_items(planted)  # every planted turn, in its own order, stored as alone
    first, last = items.index(plant[0]), items.index(plant[-1])
    assert last - first > 6000 * 0.9  # spread through the stream, not bunched
    assert planted.id not in {it.source_key.split("/")[0] for it in items if not it.planted}


def test_distractors_rename_speakers_and_shift_dates(data):
    planted, sources = data
    by_id = {c.id: c for c in sources}
    renamed = shifted = 0
    for it in islice((i for i in generate_haystack(20000, planted, sources, seed=0) if not i.planted), 3000):
        conv_id, turn_id = it.source_key.split("/", 1)
        src = by_id[conv_id].turn(turn_id)
        assert not it.text.startswith(f"{src.speaker}:")  # the speaker is renamed
        assert it.text.startswith(f"{it.speaker}: ") and it.speaker != src.speaker  # and recorded apart
        renamed += src.speaker not in it.text
        if it.timestamp and src.timestamp:
            shifted += it.timestamp != src.timestamp
    assert renamed > 2900 and shifted > 2500
