"""A lifelong haystack: one LoCoMo conversation planted among up to 1M distractor turns.

Why: a memory kept for months holds far more than one benchmark conversation, and
retrieval must still find that conversation's evidence. Distractors are the other
LoCoMo conversations and the Mem-Gallery topics, copied over and over with renamed
speakers and shifted dates, so they look like real dialogue about similar things.
The planted conversation's turns are spread evenly through the stream (its sessions
in their own order), so recall is measured against distractors ingested before and
after it.

Everything is deterministic in (seed, size): the same call yields the same items.
Items are produced lazily in ingestion order, so a 1M stream never sits in memory.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterator, Sequence

from benchmarks.datasets.schema import Benchmark, Conversation

#: first names for renamed speakers (a distractor copy never reuses its source's names)
NAMES = tuple(
    """Ada Ben Cleo Dev Ema Finn Gia Hugo Iris Jon Kai Lena Milo Nora Omar Pia Quin Rosa Sami Tara
    Umar Vera Wes Xena Yara Zane Alba Bruno Cora Dion Elsa Fabio Greta Hans Ines Jude Kira Luca Maya
    Nico Olga Pavel Rhea Sven Thea Ugo Vito Wanda Yuri Zoe""".split()
)
_DAY = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class HaystackItem:
    """One turn of the lifelong stream, as a memory would ingest it."""

    id: str  # unique in the stream; planted turns keep their dataset id behind "planted/"
    text: str  # "Speaker: text" (+ image caption), renamed for distractors
    user: str  # the owner of the memory slice (a distractor copy is its own user)
    conversation: str  # conversation id in the stream
    timestamp: datetime | None
    source_key: str  # (source conversation, turn id): distractors of one source turn share it
    planted: bool
    speaker: str = ""  # the (renamed) speaker, as a memory records it apart from the text


def _turn_text(speaker: str, text: str, caption: str | None) -> str:
    line = f"{speaker}: {text}"
    return f"{line} [image: {caption}]" if caption else line


def _source_turns(conv: Conversation) -> list[tuple[str, str, str, str | None, datetime | None]]:
    """(turn id, speaker, text, caption, timestamp) of a conversation, in order."""
    return [(t.id, t.speaker, t.text, t.image_caption, t.timestamp or s.date)
            for s in conv.sessions for t in s.turns]


def planted_items(conv: Conversation) -> list[HaystackItem]:
    """The planted conversation as it is stored alone (same text, ids and scope as in the stream)."""
    return [HaystackItem(f"planted/{tid}", _turn_text(spk, text, cap), "planted", conv.id, ts,
                         f"{conv.id}/{tid}", True, spk)
            for tid, spk, text, cap, ts in _source_turns(conv)]


def _renamer(speakers: Sequence[str], rng: random.Random) -> tuple[dict[str, str], re.Pattern | None]:
    names = [n for n in NAMES if n not in speakers]
    mapping = {s: n for s, n in zip(speakers, rng.sample(names, len(speakers)))}
    words = sorted((s for s in mapping if s), key=len, reverse=True)
    return mapping, (re.compile(r"\b(" + "|".join(map(re.escape, words)) + r")\b") if words else None)


def _distractor_copy(conv: Conversation, copy: int, rng: random.Random) -> Iterator[HaystackItem]:
    speakers = sorted({t.speaker for s in conv.sessions for t in s.turns})
    mapping, pattern = _renamer(speakers, rng)
    shift = rng.randint(-3 * 365, 3 * 365) * _DAY
    user = f"user-{copy}"
    cid = f"{conv.id}#{copy}"
    for tid, spk, text, cap, ts in _source_turns(conv):
        renamed = pattern.sub(lambda m: mapping[m.group(1)], text) if pattern else text
        yield HaystackItem(f"{cid}/{tid}", _turn_text(mapping.get(spk, spk), renamed, cap), user, cid,
                           ts + shift if ts else None, f"{conv.id}/{tid}", False, mapping.get(spk, spk))


def distractor_sources(benchmarks: Sequence[Benchmark], planted_id: str) -> list[Conversation]:
    return [c for b in benchmarks for c in b.conversations if c.id != planted_id and c.sessions]


def generate_haystack(size: int, planted: Conversation, sources: Sequence[Conversation],
                      seed: int = 0) -> Iterator[HaystackItem]:
    """``size`` items in ingestion order: distractor copies, with the planted turns spread evenly."""
    if not sources:
        raise ValueError("a haystack needs at least one distractor conversation")
    plant = planted_items(planted)
    if size < len(plant):
        raise ValueError(f"size {size} is smaller than the planted conversation ({len(plant)} turns)")
    n_distract = size - len(plant)
    every = n_distract / len(plant)  # distractors between two planted turns
    rng = random.Random(seed)
    emitted = planted_i = copy = 0

    def distractors() -> Iterator[HaystackItem]:
        nonlocal copy
        while True:
            conv = sources[rng.randrange(len(sources))]
            yield from _distractor_copy(conv, copy, random.Random(rng.random()))
            copy += 1

    stream = distractors()
    while emitted < n_distract or planted_i < len(plant):
        if planted_i < len(plant) and emitted >= planted_i * every:
            yield plant[planted_i]
            planted_i += 1
        else:
            yield next(stream)
            emitted += 1
