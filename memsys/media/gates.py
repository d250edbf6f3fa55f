"""Novelty gates for media, run before anything is stored (docs/design.md section 2).

Pure decision logic: the gates see numbers (vectors, probabilities, energies) or
word sets, never files, so they are unit-testable and reusable by the benchmark.

* :class:`VisionNoveltyGate`: cosine of a frame/image vector with the reference
  vector(s). ``> reject_above`` (0.9): static, not stored. ``< accept_below``
  (0.7): novel, stored, and it becomes the new reference. In between is
  "uncertain" and our decision is: the item is kept (images, flagged
  ``uncertain``) or folded into the current scene (video, ``keep_uncertain=False``),
  and in both cases the reference does NOT move. Only a clear change moves the
  reference, so a slow pan or drift accumulates against the old reference until
  it crosses ``accept_below`` and starts a new scene, instead of every drifting
  frame re-anchoring the comparison and the change never being detected.
* :class:`AudioGate`: per speech segment found by the VAD: RMS energy below
  ``silence_energy`` is silence (rejected whatever the VAD said), mean speech
  probability ``<= vad_threshold`` is not speech (rejected), speech shorter than
  ``min_speech_ms`` is "uncertain" (kept and flagged by default, as the text
  gate keeps its uncertain band).
* :class:`CrossModalGate`: an image caption whose word set overlaps a recent
  text (Jaccard, the text gate's measure and window) above ``reject_above`` says
  nothing the text memory does not already say: "redundant".
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from memsys.ingest.text_gate import jaccard, word_set
from memsys.records import IngestDecision, Modality


class VisionNoveltyGate:
    """Stateful: one per image stream or per video."""

    def __init__(self, reject_above: float = 0.9, accept_below: float = 0.7, window: int = 1,
                 keep_uncertain: bool = True):
        if not accept_below <= reject_above:
            raise ValueError(f"vision gate: accept_below {accept_below} must be <= reject_above {reject_above}")
        self.reject_above, self.accept_below = reject_above, accept_below
        self.keep_uncertain = keep_uncertain
        self._refs: deque[np.ndarray] = deque(maxlen=max(window, 1))

    def seed(self, vectors: Iterable[np.ndarray]) -> None:
        """Prime with reference vectors (oldest first), e.g. when a store is reopened."""
        for v in vectors:
            self._refs.append(np.asarray(v, np.float32))

    @property
    def has_reference(self) -> bool:
        return bool(self._refs)

    def similarity(self, vec: np.ndarray) -> float:
        if not self._refs:
            return 0.0
        return float(max(float(np.dot(r, vec)) for r in self._refs))

    def accept(self, vec: np.ndarray) -> None:
        """Make ``vec`` the newest reference (what a "novel" decision does when committed)."""
        self._refs.append(np.asarray(vec, np.float32))

    def check(self, vec: np.ndarray, *, commit: bool = True) -> IngestDecision:
        """Judge ``vec``; with ``commit=False`` the reference is left alone so the caller
        can run other gates first and call :meth:`accept` only if the item is stored."""
        vec = np.asarray(vec, np.float32)
        if not self._refs:
            if commit:
                self.accept(vec)
            return IngestDecision(True, "novel", 0.0, "first image: no reference yet")
        sim = self.similarity(vec)
        if sim > self.reject_above:
            return IngestDecision(False, "static", sim, f"cosine {sim:.2f} > {self.reject_above} to the reference")
        if sim < self.accept_below:
            if commit:
                self.accept(vec)
            return IngestDecision(True, "novel", sim, f"cosine {sim:.2f} < {self.accept_below}: new reference")
        return IngestDecision(
            self.keep_uncertain, "uncertain", sim,
            f"cosine {sim:.2f} in [{self.accept_below}, {self.reject_above}]: "
            + ("kept, reference unchanged" if self.keep_uncertain else "same scene, reference unchanged"),
        )


@dataclass(frozen=True, slots=True)
class SpeechSegment:
    """A candidate segment from the VAD, in seconds of the source file."""

    start: float
    end: float
    speech_prob: float  # mean Silero probability over the segment's windows
    rms: float  # root-mean-square amplitude, full scale 1.0

    @property
    def duration(self) -> float:
        return self.end - self.start


class AudioGate:
    def __init__(self, vad_threshold: float = 0.5, silence_energy: float = 0.01, min_speech_ms: int = 500,
                 keep_uncertain: bool = True):
        self.vad_threshold, self.silence_energy = vad_threshold, silence_energy
        self.min_speech_s = min_speech_ms / 1000.0
        self.keep_uncertain = keep_uncertain

    def is_silent(self, rms: float) -> bool:
        return rms < self.silence_energy

    def check(self, seg: SpeechSegment) -> IngestDecision:
        if self.is_silent(seg.rms):
            return IngestDecision(False, "silence", seg.rms, f"energy {seg.rms:.4f} < {self.silence_energy}")
        if seg.speech_prob <= self.vad_threshold:
            return IngestDecision(False, "no_speech", seg.speech_prob,
                                  f"speech probability {seg.speech_prob:.2f} <= {self.vad_threshold}")
        if seg.duration < self.min_speech_s:
            return IngestDecision(self.keep_uncertain, "uncertain", seg.speech_prob,
                                  f"speech {seg.duration * 1000:.0f} ms < {self.min_speech_s * 1000:.0f} ms")
        return IngestDecision(True, "speech", seg.speech_prob,
                              f"speech probability {seg.speech_prob:.2f}, {seg.duration:.1f} s")


#: the caption a text turn carries for its own image (memsys.ingest.text.turn_text)
_SHARED_IMAGE_RE = re.compile(r"\[shared an image:[^\]]*\]")


def text_without_own_caption(text: str) -> str:
    """A text MAU's words minus the ``[shared an image: ...]`` caption of its own image."""
    return _SHARED_IMAGE_RE.sub(" ", text)


def recent_text_window(maus: Sequence, window: int) -> list[tuple[str, frozenset[str]]]:
    """(id, word set) of the last ``window`` text MAUs, newest first: the text gate's window.

    Read from the store rather than from the text gate's private state, so it is
    the same after reopening a store. A text turn's caption of its own image is
    left out: it is there because of the image, not because the text said it.
    """
    out: list[tuple[str, frozenset[str]]] = []
    for m in reversed(maus):
        if len(out) >= window:
            break
        if m.modality == Modality.TEXT:
            out.append((m.id, word_set(text_without_own_caption(m.summary))))
    return out


class CrossModalGate:
    """Is an image caption already said by recent text? Stateless."""

    def __init__(self, reject_above: float = 0.8, uncertain_above: float | None = 0.5):
        self.reject_above, self.uncertain_above = reject_above, uncertain_above

    def best_match(self, caption: str, recent: Iterable[tuple[str, frozenset[str]]]) -> tuple[str | None, float]:
        words = word_set(caption)
        best_id, best = None, 0.0
        for mid, ws in recent:
            s = jaccard(words, ws) if words else 0.0
            if s > best:
                best_id, best = mid, s
        return best_id, best

    def check(self, caption: str, recent: Iterable[tuple[str, frozenset[str]]]) -> IngestDecision:
        if not word_set(caption):
            return IngestDecision(True, "novel", 0.0, "no caption words to compare")
        mid, best = self.best_match(caption, recent)
        if best > self.reject_above:
            return IngestDecision(False, "redundant", best,
                                  f"caption repeats text {mid!r} (Jaccard {best:.2f} > {self.reject_above})")
        if self.uncertain_above is not None and best > self.uncertain_above:
            return IngestDecision(True, "uncertain", best, f"caption overlaps text {mid!r} (Jaccard {best:.2f})")
        return IngestDecision(True, "novel", best)
