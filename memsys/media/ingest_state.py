"""Ingest state that outlives one call, per memory: the image encoder, the image vision gate and
the sha256 of every stored file.

It is kept per ``Memory`` (weakly) so consecutive calls share one novelty reference and
identical bytes are stored once, whatever the modality. The gate is re-seeded from the image
vectors kept in the cold tier (raw float16), so a reopened store keeps its gate.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

import numpy as np

from memsys.errors import ConfigError
from memsys.media.encoders import ImageEncoder, make_image_encoder
from memsys.media.gates import VisionNoveltyGate
from memsys.media.image import read_media_bytes
from memsys.media.report import MediaItemReport, MediaReport, finish_item
from memsys.records import IngestDecision, Modality
from memsys.store.atomic import sha256_bytes
from memsys.store.cold import ColdStore

log = logging.getLogger(__name__)


class MediaState:
    """Gate state that must persist across calls for one memory (the image stream)."""

    def __init__(self, memory: Any):
        cfg = memory.cfg.ingest.media
        if cfg.image_uncertain not in ("keep", "drop"):
            raise ConfigError(f"media.image_uncertain must be keep | drop, got {cfg.image_uncertain!r}")
        if not 0.0 <= cfg.vision_accept_below <= cfg.vision_reject_above <= 1.0:
            raise ConfigError(f"media.vision_accept_below ({cfg.vision_accept_below}) must be <= "
                              f"media.vision_reject_above ({cfg.vision_reject_above}), both in [0, 1]")
        self.lock = threading.RLock()
        self.encoder: ImageEncoder | None = None
        self.image_gate = VisionNoveltyGate(cfg.vision_reject_above, cfg.vision_accept_below, cfg.vision_window,
                                            keep_uncertain=cfg.image_uncertain == "keep")
        self.seen_sha: dict[str, str] = {}  # sha256 of an ingested file -> first MAU id
        for m in memory.store.maus:
            sha = m.details.get("sha256") or m.details.get("source_sha256")
            if m.modality != Modality.TEXT and sha:
                self.seen_sha.setdefault(sha, m.id)

    def encoder_for(self, memory: Any, override: ImageEncoder | None) -> ImageEncoder:
        enc = override or self.encoder or make_image_encoder(memory.cfg.ingest.media)
        if self.encoder is None or enc.name != self.encoder.name:
            self.encoder = enc
            self._seed_image_gate(memory, enc)
        return enc

    def _seed_image_gate(self, memory: Any, enc: ImageEncoder) -> None:
        """References from stored images of the same encoder (so a reopened store keeps its gate)."""
        cfg = memory.cfg.ingest.media
        self.image_gate = VisionNoveltyGate(cfg.vision_reject_above, cfg.vision_accept_below, cfg.vision_window,
                                            keep_uncertain=cfg.image_uncertain == "keep")
        refs = []
        for m in reversed(memory.store.maus):
            if len(refs) >= cfg.vision_window:
                break
            ptr = m.details.get("image_vec_pointer")
            if m.modality == Modality.IMAGE and ptr and m.details.get("image_encoder") == enc.name \
                    and m.details.get("vision", m.details.get("novelty")) == "novel":
                try:
                    refs.append(load_image_vector(memory.store.cold, ptr))
                except Exception as exc:  # a missing vector only weakens the gate
                    log.warning("image vector %s of %s unreadable: %s", ptr, m.id, exc)
        self.image_gate.seed(reversed(refs))


_STATES: "weakref.WeakKeyDictionary[Any, MediaState]" = weakref.WeakKeyDictionary()
_STATES_LOCK = threading.Lock()


def media_state(memory: Any) -> MediaState:
    with _STATES_LOCK:
        st = _STATES.get(memory)
        if st is None:
            st = _STATES[memory] = MediaState(memory)
        return st


def load_image_vector(cold: ColdStore, pointer: str) -> np.ndarray:
    """An image-encoder vector kept in the cold tier (little-endian float16: half the bytes,
    and cosines change by < 1e-3, far below the gate's 0.7 / 0.9 thresholds)."""
    return np.frombuffer(cold.get(pointer), "<f2").astype(np.float32)


def already_stored(st: Any, sha: str, item: "MediaItemReport", report: "MediaReport | None") -> bool:
    """Identical bytes are stored once: report the duplicate (call with ``st.lock`` held)."""
    if sha not in st.seen_sha:
        return False
    item.decision = IngestDecision(False, "duplicate", 1.0, f"same bytes as MAU {st.seen_sha[sha]!r}")
    finish_item(report, item)
    return True


def read_new_item(memory: Any, source: Any, max_bytes: int, kind: str, item: "MediaItemReport",
                  report: "MediaReport | None") -> "tuple[bytes, str, MediaState] | None":
    """An item's bytes, their sha256 and the memory's media state; None when the same bytes are already
    stored (reported as a duplicate). Audio and video start the same way; image decodes first."""
    data, item.item = read_media_bytes(source, max_bytes, kind)
    item.bytes_in = len(data)
    sha = sha256_bytes(data)
    st = media_state(memory)
    with st.lock:
        if already_stored(st, sha, item, report):
            return None
    return data, sha, st
