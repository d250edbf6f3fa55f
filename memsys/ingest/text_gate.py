"""Text novelty gate: Jaccard overlap of word sets against recent accepted summaries.

Released SimpleMem behaviour (DESIGN.md): overlap > 0.8 rejects as redundant,
0.5-0.8 is "uncertain" but kept, compared against the last 50 accepted texts.
"""

from __future__ import annotations

import re
from collections import deque

from memsys.config import TextNoveltyConfig
from memsys.records import IngestDecision

_WORD_RE = re.compile(r"\w+", re.UNICODE)


def word_set(text: str) -> frozenset[str]:
    return frozenset(w.lower() for w in _WORD_RE.findall(text))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


class TextNoveltyGate:
    """Stateful gate; one per ingestion stream (e.g. per store)."""

    def __init__(self, cfg: TextNoveltyConfig):
        self.cfg = cfg
        self._recent: deque[frozenset[str]] = deque(maxlen=max(cfg.window, 1))

    def seed(self, texts: list[str]) -> None:
        """Prime with already-stored summaries so re-opening a store keeps the gate's memory."""
        for t in texts[-self.cfg.window:]:
            self._recent.append(word_set(t))

    def check(self, text: str) -> IngestDecision:
        words = word_set(text)
        if not self.cfg.enabled:
            return IngestDecision(True, "novel", 0.0, "gate disabled")
        if len(words) < self.cfg.min_words:
            return IngestDecision(False, "empty", 0.0, "no words")
        best = max((jaccard(words, r) for r in self._recent), default=0.0)
        if best > self.cfg.reject_above:
            return IngestDecision(False, "redundant", best, f"overlap {best:.2f} > {self.cfg.reject_above}")
        self._recent.append(words)
        if best > self.cfg.uncertain_above:
            return IngestDecision(True, "uncertain", best, f"overlap {best:.2f} > {self.cfg.uncertain_above}")
        return IngestDecision(True, "novel", best)
