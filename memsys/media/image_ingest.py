"""Image ingestion: one image -> at most one gated MAU.

The MAU's summary (what gets embedded and searched) is ``[image <image_id>] <caption>``;
pointer = the image bytes as given; ``details``: mime, width, height, sha256,
caption_source, novelty, image_encoder and ``image_vec_pointer`` (the encoder vector as
raw float16 in the cold tier, so the hot tier stays small and a reopened store can
re-seed the vision gate).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from memsys.errors import DuplicateIdError
from memsys.media import MediaInputError
from memsys.media.captioning import Captioner, call_captioner, caption_line
from memsys.media.encoders import ImageEncoder
from memsys.media.gates import CrossModalGate, recent_text_window
from memsys.media.image import DecodedImage, decode_image, read_media_bytes
from memsys.media.ingest_state import MediaState, already_stored, media_state
from memsys.media.mau_fields import MauMeta, put_blob
from memsys.media.report import MediaItemReport, MediaReport, finish_item, item_label
from memsys.records import MAU, IngestDecision, Modality
from memsys.store.atomic import sha256_bytes
from memsys.store.cold import ColdStore


def _crossmodal_decision(memory: Any, caption: str, vision: IngestDecision, item: MediaItemReport) -> IngestDecision:
    """The image's decision once its caption is checked against the recent text: a caption that repeats
    what was just said rejects the image; an uncertain one marks an otherwise clear image uncertain."""
    cfg, text_cfg = memory.cfg.ingest.media, memory.cfg.ingest.text
    cross = CrossModalGate(cfg.crossmodal_reject_above, text_cfg.uncertain_above).check(
        caption, recent_text_window(memory.store.maus, text_cfg.window))
    item.stats["crossmodal_jaccard"] = cross.score
    if not cross.accepted:
        return cross
    if cross.verdict == "uncertain" and vision.verdict != "uncertain":
        return IngestDecision(True, "uncertain", vision.score, f"{vision.reason}; {cross.reason}".strip("; "))
    return vision


@dataclass(frozen=True)
class _ImageBytes:
    """An image as read and decoded; ``source`` is what the caller passed (a path or the bytes)."""

    source: str | Path | bytes
    data: bytes
    dec: DecodedImage
    sha: str


@dataclass(frozen=True)
class _ImageVision:
    enc: ImageEncoder
    vec: np.ndarray
    decision: IngestDecision  # the vision gate's verdict (not committed to the gate yet)


@dataclass(frozen=True)
class _Caption:
    text: str | None
    source: str  # "given" | "captioner" | "none"


@dataclass(frozen=True)
class _ImageLabels:
    """The caller's names for one image, beside the shared when / where / who."""

    meta: MauMeta
    image_id: str | None
    source_id: str | None


def _read_image(image: str | Path | bytes, max_bytes: int, item: MediaItemReport) -> _ImageBytes:
    data, item.item = read_media_bytes(image, max_bytes, "image")
    item.bytes_in = len(data)
    dec = decode_image(data, item.item)  # a corrupt image fails before any state is touched
    return _ImageBytes(image, data, dec, sha256_bytes(data))


def _new_image_id(memory: Any, id: str | None, img: _ImageBytes, item: MediaItemReport) -> str:
    mid = id or f"img-{img.sha[:16]}"
    if mid in memory.store.positions:
        raise DuplicateIdError(f"image {item.item}: MAU id {mid!r} already in the store")
    return mid


def _vision_check(memory: Any, st: MediaState, encoder: ImageEncoder | None, img: _ImageBytes,
                  item: MediaItemReport) -> _ImageVision:
    """Encode and gate without committing, so a rejected caption leaves the reference as it was."""
    enc = st.encoder_for(memory, encoder)
    vec = np.asarray(enc.encode([img.dec.image])[0], np.float32)
    vision = st.image_gate.check(vec, commit=False)
    item.stats["vision_cosine"] = vision.score
    return _ImageVision(enc, vec, vision)


def _image_caption(caption: str | None, captioner: Captioner | None, img: _ImageBytes,
                   item: MediaItemReport) -> _Caption:
    """The given caption, else the captioner's (called only here, after the vision gate let the image in)."""
    source = "given" if caption and caption.strip() else "none"
    text = caption_line(caption)
    if text is None and captioner is not None:
        text = call_captioner(captioner, img.data, img.dec.mime, item, "image")
        source = "captioner" if text else "none"
    return _Caption(text, source)


def _drop(report: "MediaReport | None", item: MediaItemReport, decision: IngestDecision) -> None:
    item.decision = decision
    finish_item(report, item)


def _image_details(img: _ImageBytes, vision: _ImageVision, cap: _Caption, decision: IngestDecision,
                   vec_pointer: str, image_id: str | None) -> dict[str, Any]:
    dec = img.dec
    return {
        "mime": dec.mime, "width": dec.width, "height": dec.height, "bytes": len(img.data), "sha256": img.sha,
        "caption_source": cap.source, "novelty": decision.verdict, "vision": vision.decision.verdict,
        "image_encoder": vision.enc.name, "image_vec_pointer": vec_pointer,
        **({"caption": cap.text} if cap.text else {}), **({"image_id": image_id} if image_id else {}),
        **({} if isinstance(img.source, (bytes, bytearray, memoryview)) else {"source": str(img.source)}),
    }


def _image_mau(mid: str, img: _ImageBytes, vision: _ImageVision, cap: _Caption, decision: IngestDecision,
               labels: _ImageLabels, cold: ColdStore) -> tuple[MAU, int]:
    """The image MAU with its bytes and encoder vector in the cold tier, and the bytes newly written."""
    dec = img.dec
    pointer, new_bytes = put_blob(cold, img.data, dec.ext)
    vec_pointer, new_vec = put_blob(cold, np.asarray(vision.vec, "<f2").tobytes(), "f16")
    tag = f"[image {labels.image_id}]" if labels.image_id else "[image]"
    summary = f"{tag} {cap.text}" if cap.text else f"{tag} {dec.width}x{dec.height} {dec.mime} (no caption)"
    details = _image_details(img, vision, cap, decision, vec_pointer, labels.image_id)
    meta = labels.meta
    mau = MAU(id=mid, summary=summary, modality=Modality.IMAGE, timestamp=meta.timestamp, pointer=pointer,
              session_id=meta.session_id, source_id=labels.source_id or labels.image_id, speaker=meta.speaker,
              details=details, persons=meta.persons)
    return mau, new_bytes + new_vec


def ingest_image(memory: Any, image: str | Path | bytes, caption: str | None = None, *,
                 timestamp: datetime | None = None, session_id: str | None = None, id: str | None = None,
                 image_id: str | None = None, speaker: str | None = None, source_id: str | None = None,
                 captioner: Captioner | None = None, encoder: ImageEncoder | None = None,
                 report: MediaReport | None = None) -> MAU | None:
    """Gate and store one image; the MAU, or None when a gate rejected it (or it failed).

    Order: exact duplicate (same bytes already stored) -> vision gate -> caption
    (given, else ``captioner``) -> cross-modal gate. The captioner runs only for
    images the vision gate lets through, so static images cost no LLM call.
    """
    cfg = memory.cfg.ingest.media
    item = MediaItemReport(item_label(image), "image")
    try:
        img = _read_image(image, cfg.max_image_bytes, item)
        st = media_state(memory)
        with st.lock:
            if already_stored(st, img.sha, item, report):
                return None
            mid = _new_image_id(memory, id, img, item)
            vision = _vision_check(memory, st, encoder, img, item)
            if not vision.decision.accepted:
                _drop(report, item, vision.decision)
                return None
            cap = _image_caption(caption, captioner, img, item)
            decision = (_crossmodal_decision(memory, cap.text, vision.decision, item) if cap.text and cfg.crossmodal
                        else vision.decision)
            if not decision.accepted:
                _drop(report, item, decision)
                return None
            labels = _ImageLabels(MauMeta(timestamp, session_id, speaker), image_id, source_id)
            mau, new_bytes = _image_mau(mid, img, vision, cap, decision, labels, memory.store.cold)
            memory.add_maus([mau])
            if vision.decision.verdict == "novel":  # only a clear visual change moves the reference
                st.image_gate.accept(vision.vec)
            st.seen_sha[img.sha] = mid
        item.decision, item.mau_ids, item.bytes_stored = decision, [mid], new_bytes
        finish_item(report, item)
        return mau
    except (MediaInputError, DuplicateIdError) as exc:
        finish_item(report, item, exc)
        return None
