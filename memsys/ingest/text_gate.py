"""Text novelty gate: Jaccard overlap of word sets against recent accepted summaries.

Released SimpleMem behaviour (docs/design.md section 2): overlap > 0.8 rejects as redundant,
0.5-0.8 is "uncertain" but kept, compared against the last 50 accepted texts.

The rule is computed through an inverted index of the window (word -> bit mask of the slots
holding it), so a check costs a lookup per word of its own and one numpy column sum, instead of
one set intersection and union per window entry (issue #16: the pairwise loop was ~2/3 of
ingest CPU). Scores are the same integers divided the same way, so every decision and score
equals the pairwise rule's (tests/memsys/test_ingest_text.py checks it on LoCoMo's turns).
"""

from __future__ import annotations

import re

import numpy as np

from memsys.config import TextNoveltyConfig
from memsys.records import IngestDecision

_WORD_RE = re.compile(r"\w+", re.UNICODE)
_findall = _WORD_RE.findall


def word_set(text: str) -> frozenset[str]:
    if text.isascii():  # ASCII: lowering first cannot move a word boundary
        return frozenset(_findall(text.lower()))
    return frozenset(map(str.lower, _findall(text)))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


class JaccardWindow:
    """The last ``size`` word sets, with the best Jaccard of a new set against them.

    ``best(words)`` equals ``max(jaccard(words, r) for r in window)`` (0.0 when empty). Each word
    of the window maps to a bit mask of the slots holding it, so the overlap with every slot is
    the column sum of the new set's masks (numpy), and a slot sharing no word scores
    0 / |union| = 0.0, as in the pairwise rule.
    """

    def __init__(self, size: int):
        self.size = max(size, 1)
        self._sets: list[frozenset[str] | None] = [None] * self.size  # ring of slots
        self._lens = np.zeros(self.size, np.int64)
        self._next = 0  # slot the next append overwrites
        self._count = 0
        self._empty = 0  # empty word sets in the window (only a seeded or min_words=0 window has them)
        self._masks: dict[str, int] = {}  # word -> bit mask of the slots holding it
        self._bytes = (self.size + 7) // 8

    def __len__(self) -> int:
        return self._count

    def append(self, words: frozenset[str]) -> None:
        slot, masks = self._next, self._masks
        bit = 1 << slot
        old = self._sets[slot]
        if old is None:
            self._count += 1
        else:
            self._empty -= not old
            keep = ~bit
            for w in old:
                m = masks[w] & keep
                if m:
                    masks[w] = m
                else:
                    del masks[w]
        self._sets[slot], self._lens[slot] = words, len(words)
        self._empty += not words
        get = masks.get
        for w in words:
            masks[w] = get(w, 0) | bit
        self._next = (slot + 1) % self.size

    def best(self, words: frozenset[str]) -> float:
        if not self._count:
            return 0.0
        if not words:  # jaccard(empty, empty) = 1.0, against any non-empty set 0.0
            return 1.0 if self._empty else 0.0
        found = [m for m in map(self._masks.get, words) if m]
        if not found:
            return 0.0
        if self.size <= 64:
            raw = np.array(found, "<u8").view(np.uint8)  # little-endian: byte k holds slots 8k..8k+7
        else:
            raw = np.frombuffer(b"".join(m.to_bytes(self._bytes, "little") for m in found), np.uint8)
        bits = np.unpackbits(raw.reshape(len(found), -1), axis=1, bitorder="little")
        overlap = bits.sum(0, dtype=np.int64)[: self.size]
        # slot by slot the pairwise rule's len(a & b) / len(a | b): the same integers, the same division
        return float((overlap / (len(words) + self._lens - overlap)).max())


class TextNoveltyGate:
    """Stateful gate; one per ingestion stream (e.g. per store)."""

    def __init__(self, cfg: TextNoveltyConfig):
        self.cfg = cfg
        self._recent = JaccardWindow(cfg.window)

    def seed(self, texts: list[str]) -> None:
        """Prime with already-stored summaries so re-opening a store keeps the gate's memory."""
        for t in texts[-self.cfg.window:]:
            self._recent.append(word_set(t))

    def check(self, text: str) -> IngestDecision:
        if not self.cfg.enabled:
            return IngestDecision(True, "novel", 0.0, "gate disabled")
        words = word_set(text)
        if len(words) < self.cfg.min_words:
            return IngestDecision(False, "empty", 0.0, "no words")
        best = self._recent.best(words)
        if best > self.cfg.reject_above:
            return IngestDecision(False, "redundant", best, f"overlap {best:.2f} > {self.cfg.reject_above}")
        self._recent.append(words)
        if best > self.cfg.uncertain_above:
            return IngestDecision(True, "uncertain", best, f"overlap {best:.2f} > {self.cfg.uncertain_above}")
        return IngestDecision(True, "novel", best)
