"""Media ingestion: images, audio and video -> gated MAUs in a ``Memory``.

Every public function takes the memory first and an optional ``report``
(:class:`MediaReport`). A bad item (corrupt image, zero-length audio, unsupported
codec, over the size cap, sample rate below the minimum) raises a one-line
:class:`MediaInputError` when no report is given; with a report the error is
recorded for that item and the function returns ``None`` / ``[]`` so a batch
carries on. Missing dependencies and store failures always raise: they would
fail every following item too.

What a MAU holds per modality (the summary is what gets embedded and searched):

* image: summary ``[image <image_id>] <caption>``; pointer = the image bytes as
  given; ``details``: mime, width, height, sha256, caption_source, novelty,
  image_encoder and ``image_vec_pointer`` (the encoder vector as raw float16 in
  the cold tier, so the hot tier stays small and a reopened store can re-seed
  the vision gate).
* audio: one MAU per kept speech segment, summary = transcript or
  ``[speech segment 12.3-15.8 s]``; pointer = that segment as a 16 kHz mono WAV;
  ``time_span`` = seconds in the source file; prev/next links.
* video: one MAU per scene, prev/next links; pointer = the whole file (stored
  once, shared by its scenes), ``time_span`` = the scene's seconds;
  ``details["keyframe_pointer"]`` = a downscaled JPEG of the scene's first frame.
  Its soundtrack (``media.video_audio``) adds audio MAUs ``<base>:speechNNN``
  built as for an audio file, with ``time_span`` in video seconds, ``details``
  ``track="video_audio"`` and ``scene_mau_id``, and a RELATED link to that scene.
"""

from __future__ import annotations

import logging
import threading
import weakref
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from memsys.errors import ConfigError, DuplicateIdError
from memsys.media import MediaInputError
from memsys.media.audio import AudioClip, encode_wav, find_speech_segments, load_audio, rms
from memsys.media.encoders import ImageEncoder, make_image_encoder
from memsys.media.gates import AudioGate, CrossModalGate, SpeechSegment, VisionNoveltyGate, recent_text_window
from memsys.media.image import DecodedImage, decode_image, encode_jpeg, read_media_bytes
from memsys.media.video import Scene, SceneSegmentation, segment_scenes
from memsys.records import MAU, IngestDecision, Link, LinkKind, Modality
from memsys.store.atomic import sha256_bytes
from memsys.store.cold import POINTER_PREFIX, ColdStore

log = logging.getLogger(__name__)

Captioner = Callable[[bytes, str], str]  # (image bytes, mime) -> caption
TranscriptFn = Callable[[np.ndarray, int], str]  # (float32 mono samples, sample rate) -> text

IMAGE_EXTS = {".jpg", ".jpeg", ".png", ".gif", ".webp", ".bmp", ".tif", ".tiff"}
AUDIO_EXTS = {".wav", ".mp3", ".flac", ".ogg", ".m4a", ".opus"}
VIDEO_EXTS = {".mp4", ".m4v", ".mov", ".webm", ".mkv", ".avi", ".mpg", ".mpeg"}


# ----------------------------------------------------------------------------- reports
@dataclass
class MediaItemReport:
    """What happened to one input item (a file or bytes)."""

    item: str
    modality: str
    decision: IngestDecision | None = None  # item-level verdict; None when it failed
    mau_ids: list[str] = field(default_factory=list)
    error: str | None = None  # one line
    notes: list[str] = field(default_factory=list)  # resampling, captioner failures...
    parts: list[dict[str, Any]] = field(default_factory=list)  # per segment / scene decisions
    stats: dict[str, float] = field(default_factory=dict)
    bytes_in: int = 0
    bytes_stored: int = 0  # bytes newly written to the cold tier for this item

    def line(self) -> str:
        if self.error:
            return f"ERROR {self.modality}: {self.error}"  # errors name their item
        d = self.decision
        verdict = f"{d.verdict} ({d.reason})" if d and d.reason else (d.verdict if d else "?")
        note = f" [{'; '.join(self.notes)}]" if self.notes else ""
        return f"{'kept' if self.mau_ids else 'dropped'} {self.modality} {self.item}: {verdict}, {len(self.mau_ids)} MAU(s){note}"


@dataclass
class MediaReport:
    items: list[MediaItemReport] = field(default_factory=list)

    @property
    def errors(self) -> list[MediaItemReport]:
        return [i for i in self.items if i.error]

    @property
    def mau_ids(self) -> list[str]:
        return [m for i in self.items for m in i.mau_ids]

    def count(self, modality: str | None = None) -> dict[str, int]:
        items = [i for i in self.items if modality is None or i.modality == modality]
        return {
            "items": len(items),
            "kept": sum(bool(i.mau_ids) for i in items),
            "dropped": sum(not i.mau_ids and not i.error for i in items),
            "errors": sum(bool(i.error) for i in items),
            "maus": sum(len(i.mau_ids) for i in items),
        }

    def lines(self) -> list[str]:
        return [i.line() for i in self.items]

    def to_dict(self) -> dict[str, Any]:
        return {"counts": self.count(), "items": [asdict(i) for i in self.items]}


# ----------------------------------------------------------------------------- per-memory state
class _MediaState:
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


_STATES: "weakref.WeakKeyDictionary[Any, _MediaState]" = weakref.WeakKeyDictionary()
_STATES_LOCK = threading.Lock()


def media_state(memory: Any) -> _MediaState:
    with _STATES_LOCK:
        st = _STATES.get(memory)
        if st is None:
            st = _STATES[memory] = _MediaState(memory)
        return st


# ----------------------------------------------------------------------------- helpers
def _put(cold: ColdStore, data: bytes, ext: str) -> tuple[str, int]:
    """Cold pointer and the number of bytes newly written (0 when deduplicated)."""
    existed = cold.path(f"{POINTER_PREFIX}{sha256_bytes(data)}.{ext.lstrip('.')}").exists()
    return cold.put(data, ext), 0 if existed else len(data)


def load_image_vector(cold: ColdStore, pointer: str) -> np.ndarray:
    """An image-encoder vector kept in the cold tier (little-endian float16: half the bytes,
    and cosines change by < 1e-3, far below the gate's 0.7 / 0.9 thresholds)."""
    return np.frombuffer(cold.get(pointer), "<f2").astype(np.float32)


def _label(source: Any) -> str:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return f"<{len(source)} bytes>"
    return str(source)


def _finish(report: "MediaReport | None", item: MediaItemReport, exc: Exception | None = None) -> None:
    if exc is not None:
        if report is None:
            raise exc
        item.error = str(exc)
    if report is not None:
        report.items.append(item)


def _offset(ts: datetime | None, seconds: float) -> datetime | None:
    return ts + timedelta(seconds=round(seconds, 3)) if ts is not None else None


@dataclass(frozen=True)
class _MauMeta:
    """The caller's when / where / who, copied onto every MAU an item yields."""

    timestamp: datetime | None
    session_id: str | None
    speaker: str | None

    @property
    def persons(self) -> list[str]:
        return [self.speaker] if self.speaker else []


def _one_line(text: str | None) -> str | None:
    """A caller's caption with its whitespace collapsed; None when it is blank."""
    return " ".join(text.split()) if text and text.strip() else None


def _link_chain(maus: Sequence[MAU]) -> None:
    for a, b in zip(maus, maus[1:]):
        a.links.append(Link(LinkKind.NEXT, b.id))
        b.links.append(Link(LinkKind.PREV, a.id))


def _call_captioner(captioner: Captioner, data: bytes, mime: str, item: MediaItemReport, what: str) -> str | None:
    try:
        text = captioner(data, mime)
    except Exception as exc:  # an LLM failure must not lose the image
        item.notes.append(f"captioner failed for {what}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        return None
    text = " ".join(str(text or "").split())
    return text or None


def llm_captioner(client: Any, prompt: str = "Describe this image in one or two factual sentences: "
                  "the objects, people, text and setting you see.", max_tokens: int = 120) -> Captioner:
    """A captioner from any client with an OpenAI-style ``chat(messages, max_tokens=)``
    returning an object with ``.text`` (memsys.llm.client.LLMClient does); the model must
    accept images (``LLMConfig.supports_vision``)."""
    import base64

    def caption(data: bytes, mime: str) -> str:
        url = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
        reply = client.chat([{"role": "user", "content": [
            {"type": "text", "text": prompt}, {"type": "image_url", "image_url": {"url": url}}]}],
            max_tokens=max_tokens)
        return str(getattr(reply, "text", reply))

    return caption


# ----------------------------------------------------------------------------- images
def _already_stored(st: Any, sha: str, item: "MediaItemReport", report: "MediaReport | None") -> bool:
    """Identical bytes are stored once: report the duplicate (call with ``st.lock`` held)."""
    if sha not in st.seen_sha:
        return False
    item.decision = IngestDecision(False, "duplicate", 1.0, f"same bytes as MAU {st.seen_sha[sha]!r}")
    _finish(report, item)
    return True


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

    meta: _MauMeta
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


def _vision_check(memory: Any, st: _MediaState, encoder: ImageEncoder | None, img: _ImageBytes,
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
    text = _one_line(caption)
    if text is None and captioner is not None:
        text = _call_captioner(captioner, img.data, img.dec.mime, item, "image")
        source = "captioner" if text else "none"
    return _Caption(text, source)


def _drop(report: "MediaReport | None", item: MediaItemReport, decision: IngestDecision) -> None:
    item.decision = decision
    _finish(report, item)


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
    pointer, new_bytes = _put(cold, img.data, dec.ext)
    vec_pointer, new_vec = _put(cold, np.asarray(vision.vec, "<f2").tobytes(), "f16")
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
    item = MediaItemReport(_label(image), "image")
    try:
        img = _read_image(image, cfg.max_image_bytes, item)
        st = media_state(memory)
        with st.lock:
            if _already_stored(st, img.sha, item, report):
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
            labels = _ImageLabels(_MauMeta(timestamp, session_id, speaker), image_id, source_id)
            mau, new_bytes = _image_mau(mid, img, vision, cap, decision, labels, memory.store.cold)
            memory.add_maus([mau])
            if vision.decision.verdict == "novel":  # only a clear visual change moves the reference
                st.image_gate.accept(vision.vec)
            st.seen_sha[img.sha] = mid
        item.decision, item.mau_ids, item.bytes_stored = decision, [mid], new_bytes
        _finish(report, item)
        return mau
    except (MediaInputError, DuplicateIdError) as exc:
        _finish(report, item, exc)
        return None


@dataclass
class ImageItem:
    """One image for :func:`ingest_images` (fields as in :func:`ingest_image`)."""

    source: str | Path | bytes
    caption: str | None = None
    timestamp: datetime | None = None
    session_id: str | None = None
    id: str | None = None
    image_id: str | None = None
    speaker: str | None = None
    source_id: str | None = None


def ingest_images(memory: Any, items: Iterable[ImageItem], *, captioner: Captioner | None = None,
                  encoder: ImageEncoder | None = None, report: MediaReport | None = None) -> MediaReport:
    """Ingest images in order; a bad one is reported and the rest go on."""
    report = report if report is not None else MediaReport()
    for it in items:
        ingest_image(memory, it.source, it.caption, timestamp=it.timestamp, session_id=it.session_id, id=it.id,
                     image_id=it.image_id, speaker=it.speaker, source_id=it.source_id, captioner=captioner,
                     encoder=encoder, report=report)
    return report


# ----------------------------------------------------------------------------- audio
@dataclass
class _Speech:
    """What :func:`_speech_maus` found in one audio track (MAUs not yet in the store)."""

    maus: list[MAU]
    segments: int  # candidate segments the VAD found
    verdicts: dict[str, int]  # gate verdict -> segment count
    silence: IngestDecision | None  # set when the whole track is below the energy floor
    rms: float
    new_bytes: int

    @property
    def speech_s(self) -> float:
        return sum(m.time_span[1] - m.time_span[0] for m in self.maus)  # type: ignore[index]


@dataclass(frozen=True)
class _SpeechTrack:
    """One decoded track and where its speech MAUs go: ids ``{base}:{stem}NNN``, spans shifted by ``t0``."""

    clip: AudioClip
    base: str
    stem: str
    sha: str
    t0: float
    track: str | None
    transcript_fn: TranscriptFn | None
    meta: _MauMeta


def _speech_candidates(cfg: Any, gate: AudioGate, clip: AudioClip) -> tuple[list[SpeechSegment], IngestDecision | None, float]:
    """The VAD's candidate segments, the whole-track silence verdict, and the track's RMS.

    A track below the energy floor is silence as a whole: the VAD is not run on it.
    """
    total_rms = rms(clip.samples)
    if gate.is_silent(total_rms):
        silence = IngestDecision(False, "silence", total_rms,
                                 f"whole file energy {total_rms:.4f} < {cfg.silence_energy}")
        return [], silence, total_rms
    segments = find_speech_segments(clip.samples, clip.sample_rate, threshold=cfg.vad_threshold,
                                    min_segment_ms=cfg.vad_min_segment_ms,
                                    min_silence_ms=cfg.vad_min_silence_ms, pad_ms=cfg.vad_speech_pad_ms)
    return segments, None, total_rms


def _segment_span(tr: _SpeechTrack, seg: SpeechSegment) -> tuple[float, float]:
    return round(tr.t0 + seg.start, 3), round(tr.t0 + seg.end, 3)


def _segment_part(tr: _SpeechTrack, seg: SpeechSegment, d: IngestDecision) -> dict[str, Any]:
    part: dict[str, Any] = {"span": list(_segment_span(tr, seg)), "verdict": d.verdict,
                            "speech_prob": round(seg.speech_prob, 3), "rms": round(seg.rms, 4), "mau_id": None}
    if tr.track:
        part["track"] = tr.track
    return part


def _transcribe(tr: _SpeechTrack, samples: np.ndarray, seg: SpeechSegment, item: MediaItemReport) -> str | None:
    if tr.transcript_fn is None:
        return None
    try:
        return " ".join(str(tr.transcript_fn(samples, tr.clip.sample_rate) or "").split()) or None
    except Exception as exc:  # an ASR failure must not lose the segment
        item.notes.append(f"transcript failed for {tr.t0 + seg.start:.1f}-{tr.t0 + seg.end:.1f} s: "
                          f"{type(exc).__name__}")
        return None


def _segment_details(tr: _SpeechTrack, seg: SpeechSegment, d: IngestDecision, transcript: str | None,
                     item: MediaItemReport) -> dict[str, Any]:
    details: dict[str, Any] = {"mime": "audio/wav", "source": item.item, "source_sha256": tr.sha,
                               "speech_prob": round(seg.speech_prob, 4), "rms": round(seg.rms, 5),
                               "novelty": d.verdict, "transcript_source": "transcript_fn" if transcript else "none"}
    if transcript:
        details["transcript"] = transcript
    if tr.track:
        details["track"] = tr.track
    return details


def _segment_mau(memory: Any, tr: _SpeechTrack, seg: SpeechSegment, d: IngestDecision, n: int,
                 item: MediaItemReport) -> tuple[MAU, int]:
    """The ``n``-th kept segment as a MAU, its WAV in the cold tier, and the bytes newly written."""
    rate = tr.clip.sample_rate
    a, b = int(seg.start * rate), int(seg.end * rate)
    samples = tr.clip.samples[a:b]
    transcript = _transcribe(tr, samples, seg, item)
    pointer, nb = _put(memory.store.cold, encode_wav(samples, rate), "wav")
    mid = f"{tr.base}:{tr.stem}{n:03d}"
    if mid in memory.store.positions:
        raise DuplicateIdError(f"{item.modality} {item.item}: MAU id {mid!r} already in the store")
    details = _segment_details(tr, seg, d, transcript, item)
    placeholder = f"[speech segment {tr.t0 + seg.start:.1f}-{tr.t0 + seg.end:.1f} s]"
    meta = tr.meta
    mau = MAU(id=mid, summary=transcript or placeholder,
              modality=Modality.AUDIO, timestamp=_offset(meta.timestamp, tr.t0 + seg.start), pointer=pointer,
              session_id=meta.session_id, source_id=tr.base, speaker=meta.speaker, details=details,
              persons=meta.persons, time_span=_segment_span(tr, seg))
    return mau, nb


def _speech_maus(memory: Any, clip: AudioClip, item: MediaItemReport, *, base: str, stem: str, sha: str,
                 transcript_fn: TranscriptFn | None, timestamp: datetime | None, session_id: str | None,
                 speaker: str | None, t0: float = 0.0, track: str | None = None) -> _Speech:
    """Gate a decoded track's speech into prev/next-linked MAUs ``{base}:{stem}NNN``.

    Shared by audio files and video soundtracks so both get the same gate,
    segment WAVs and details; the caller adds the MAUs, which lets a video store
    its scenes and speech together or not at all. ``t0`` shifts spans and
    timestamps onto the caller's timeline (a soundtrack that starts late);
    ``track`` tags details and report parts so a video's speech parts are told
    apart from its scenes.
    """
    cfg = memory.cfg.ingest.media
    gate = AudioGate(cfg.vad_threshold, cfg.silence_energy, cfg.min_speech_ms, cfg.audio_keep_uncertain)
    tr = _SpeechTrack(clip, base, stem, sha, t0, track, transcript_fn, _MauMeta(timestamp, session_id, speaker))
    segments, silence, total_rms = _speech_candidates(cfg, gate, clip)
    maus: list[MAU] = []
    new_bytes = 0
    verdicts: dict[str, int] = {}
    for seg in segments:
        d = gate.check(seg)
        verdicts[d.verdict] = verdicts.get(d.verdict, 0) + 1
        part = _segment_part(tr, seg, d)
        item.parts.append(part)
        if not d.accepted:
            continue
        mau, nb = _segment_mau(memory, tr, seg, d, len(maus), item)
        new_bytes += nb
        maus.append(mau)
        part["mau_id"] = mau.id
    _link_chain(maus)
    return _Speech(maus, len(segments), verdicts, silence, total_rms, new_bytes)


def ingest_audio(memory: Any, audio: str | Path | bytes, transcript_fn: TranscriptFn | None = None, *,
                 timestamp: datetime | None = None, session_id: str | None = None, id: str | None = None,
                 speaker: str | None = None, report: MediaReport | None = None) -> list[MAU]:
    """Speech segments of an audio file as MAUs (silence and non-speech are not stored)."""
    cfg = memory.cfg.ingest.media
    item = MediaItemReport(_label(audio), "audio")
    try:
        data, item.item = read_media_bytes(audio, cfg.max_audio_bytes, "audio")
        item.bytes_in = len(data)
        sha = sha256_bytes(data)
        st = media_state(memory)
        with st.lock:
            if _already_stored(st, sha, item, report):
                return []
        clip = load_audio(data, item.item, cfg.audio_sample_rate, cfg.min_sample_rate)
        item.notes.extend(clip.notes)
        sp = _speech_maus(memory, clip, item, base=id or f"aud-{sha[:16]}", stem="seg", sha=sha,
                          transcript_fn=transcript_fn, timestamp=timestamp, session_id=session_id, speaker=speaker)
        maus = sp.maus
        item.decision = sp.silence
        if maus:
            memory.add_maus(maus)
            with st.lock:
                st.seen_sha[sha] = maus[0].id
        speech_s = sp.speech_s
        item.stats.update(duration_s=round(clip.duration, 3), rms=round(sp.rms, 5), segments_found=sp.segments,
                          segments_kept=len(maus), speech_s=round(speech_s, 3),
                          **{f"verdict_{k}": v for k, v in sp.verdicts.items()})
        if item.decision is None:
            summary = ", ".join(f"{v} {k}" for k, v in sorted(sp.verdicts.items())) or "no speech found"
            item.decision = IngestDecision(bool(maus), "speech" if maus else "no_speech",
                                           speech_s / clip.duration if clip.duration else 0.0,
                                           f"{len(maus)} of {sp.segments} segments kept ({summary})")
        item.mau_ids, item.bytes_stored = [m.id for m in maus], sp.new_bytes
        _finish(report, item)
        return maus
    except (MediaInputError, DuplicateIdError) as exc:
        _finish(report, item, exc)
        return []


# ----------------------------------------------------------------------------- video
def _scene_at(scenes: Sequence[MAU], t: float) -> MAU:
    """The scene whose span holds ``t`` (half-open, so a cut belongs to the new scene), else the nearest."""
    for m in scenes:
        a, b = m.time_span  # type: ignore[misc]
        if a <= t < b:
            return m
    return min(scenes, key=lambda m: min(abs(t - m.time_span[0]), abs(t - m.time_span[1])))  # type: ignore[index]


def _video_speech(memory: Any, data: bytes, t0: float | None, item: MediaItemReport, scenes: Sequence[MAU], *,
                  base: str, sha: str, transcript_fn: TranscriptFn | None, timestamp: datetime | None,
                  session_id: str | None, speaker: str | None) -> tuple[list[MAU], int]:
    """Speech MAUs of a video's soundtrack, each tied to the scene at its midpoint, and new cold bytes.

    A damaged soundtrack is a note, not an error: the scenes are the video's
    main content and must not be lost to its audio. The scene link lets
    retrieval hop from what was said to what was on screen.
    """
    cfg = memory.cfg.ingest.media
    if t0 is None:  # no audio stream: no audio work
        return [], 0
    try:
        clip = load_audio(data, item.item, cfg.audio_sample_rate, cfg.min_sample_rate)
    except MediaInputError as exc:
        item.notes.append(f"audio track skipped: {exc}")
        return [], 0
    item.notes.extend(f"audio track {n}" for n in clip.notes)
    sp = _speech_maus(memory, clip, item, base=base, stem="speech", sha=sha, transcript_fn=transcript_fn,
                      timestamp=timestamp, session_id=session_id, speaker=speaker, t0=t0, track="video_audio")
    for m in sp.maus:
        scene = _scene_at(scenes, (m.time_span[0] + m.time_span[1]) / 2)  # type: ignore[index]
        m.details["scene_mau_id"] = scene.id
        m.links.append(Link(LinkKind.RELATED, scene.id))
    item.stats.update(speech_segments_found=sp.segments, speech_segments_kept=len(sp.maus),
                      speech_s=round(sp.speech_s, 3), audio_rms=round(sp.rms, 5))
    return sp.maus, sp.new_bytes


@dataclass(frozen=True)
class _SegmentedVideo:
    """A video cut into scenes, with what every scene MAU shares."""

    seg: SceneSegmentation
    encoder_name: str
    base: str
    sha: str
    pointer: str  # the whole file, stored once
    caption: str | None  # the caller's caption of the whole video
    captioner: Captioner | None
    meta: _MauMeta


def _segment_video(cfg: Any, data: bytes, enc: ImageEncoder, sample_fps: float | None,
                   item: MediaItemReport) -> SceneSegmentation:
    """Scenes from a gate of its own: a window of one frame, so a scene is a change from the last one."""
    gate = VisionNoveltyGate(cfg.vision_reject_above, cfg.vision_accept_below, 1, keep_uncertain=False)
    seg = segment_scenes(data, item.item, enc, gate, sample_fps or cfg.video_sample_fps, cfg.video_max_frames)
    item.notes.extend(seg.notes)
    return seg


def _scene_span(sc: Scene) -> tuple[float, float]:
    return round(sc.start, 3), round(sc.end, 3)


def _scene_details(v: _SegmentedVideo, k: int, sc: Scene, key_pointer: str, text: str,
                   item: MediaItemReport) -> dict[str, Any]:
    seg = v.seg
    span = _scene_span(sc)
    return {"mime": seg.info.mime, "codec": seg.info.codec, "source": item.item, "source_sha256": v.sha,
            "scene": k, "scenes": len(seg.scenes), "frames": sc.frames, "novelty": sc.decision.verdict,
            "keyframe_pointer": key_pointer, "keyframe_mime": "image/jpeg", "keyframe_time": sc.keyframe.time,
            "image_encoder": v.encoder_name,
            "text": f"[video {Path(item.item).name}, scene {k + 1}/{len(seg.scenes)}, "
                    f"{span[0]:.1f}-{span[1]:.1f} s] {text}".strip()}


def _scene_mau(memory: Any, v: _SegmentedVideo, k: int, sc: Scene, item: MediaItemReport) -> tuple[MAU, int]:
    """Scene ``k`` as a MAU, its keyframe as a JPEG in the cold tier, and the bytes newly written."""
    cfg = memory.cfg.ingest.media
    key = encode_jpeg(sc.keyframe.image, cfg.keyframe_max_side, cfg.keyframe_jpeg_quality)
    key_pointer, nb = _put(memory.store.cold, key, "jpg")
    scene_caption = _call_captioner(v.captioner, key, "image/jpeg", item, f"scene {k}") if v.captioner else None
    text = " ".join(t for t in (v.caption, scene_caption) if t)
    span = _scene_span(sc)
    tag = f"[video scene {span[0]:.1f}-{span[1]:.1f} s]"
    mid = f"{v.base}:scene{k:03d}"
    if mid in memory.store.positions:
        raise DuplicateIdError(f"video {item.item}: MAU id {mid!r} already in the store")
    details = _scene_details(v, k, sc, key_pointer, text, item)
    if scene_caption:
        details["caption"] = scene_caption
    meta = v.meta
    mau = MAU(id=mid, summary=f"{tag} {text}".strip(), modality=Modality.VIDEO,
              timestamp=_offset(meta.timestamp, sc.start), pointer=v.pointer, session_id=meta.session_id,
              source_id=v.base, speaker=meta.speaker, details=details, persons=meta.persons, time_span=span)
    return mau, nb


def _scene_maus(memory: Any, v: _SegmentedVideo, item: MediaItemReport) -> tuple[list[MAU], int]:
    """One prev/next-linked MAU per scene, and the keyframe bytes newly written."""
    maus: list[MAU] = []
    new_bytes = 0
    for k, sc in enumerate(v.seg.scenes):
        mau, nb = _scene_mau(memory, v, k, sc, item)
        new_bytes += nb
        maus.append(mau)
        item.parts.append({"span": list(_scene_span(sc)), "verdict": sc.decision.verdict,
                           "frames": sc.frames, "static": sc.static, "uncertain": sc.uncertain, "mau_id": mau.id})
    _link_chain(maus)
    return maus, new_bytes


def _describe_video(item: MediaItemReport, seg: SceneSegmentation) -> None:
    static = sum(s.static for s in seg.scenes)
    uncertain = sum(s.uncertain for s in seg.scenes)
    item.stats.update(duration_s=round(seg.info.duration, 3), frames_sampled=seg.sampled,
                      scenes=len(seg.scenes), frames_static=static, frames_uncertain=uncertain)
    item.decision = IngestDecision(True, "novel", len(seg.scenes) / max(seg.sampled, 1),
                                   f"{len(seg.scenes)} scenes from {seg.sampled} sampled frames "
                                   f"({static} static, {uncertain} uncertain)")


def ingest_video(memory: Any, video: str | Path | bytes, sample_fps: float | None = None, *,
                 caption: str | None = None, captioner: Captioner | None = None,
                 transcript_fn: TranscriptFn | None = None,
                 timestamp: datetime | None = None, session_id: str | None = None, id: str | None = None,
                 speaker: str | None = None, encoder: ImageEncoder | None = None,
                 report: MediaReport | None = None) -> list[MAU]:
    """One MAU per scene (new scene = sampled frame with cosine < accept_below to the reference),
    then the soundtrack's speech MAUs (``media.video_audio``), all stored together.

    ``caption`` describes the whole video and is put in every scene's summary;
    ``captioner`` (if given) captions each scene's keyframe; ``transcript_fn``
    (if given) transcribes each speech segment, as for :func:`ingest_audio`.
    """
    cfg = memory.cfg.ingest.media
    item = MediaItemReport(_label(video), "video")
    try:
        data, item.item = read_media_bytes(video, cfg.max_video_bytes, "video")
        item.bytes_in = len(data)
        sha = sha256_bytes(data)
        st = media_state(memory)
        with st.lock:
            if _already_stored(st, sha, item, report):
                return []
            enc = st.encoder_for(memory, encoder)
        seg = _segment_video(cfg, data, enc, sample_fps, item)
        base = id or f"vid-{sha[:16]}"
        clip_pointer, new_bytes = _put(memory.store.cold, data, seg.info.ext)
        segmented = _SegmentedVideo(seg, enc.name, base, sha, clip_pointer, _one_line(caption), captioner,
                                 _MauMeta(timestamp, session_id, speaker))
        maus, nb = _scene_maus(memory, segmented, item)
        new_bytes += nb
        speech: list[MAU] = []
        if cfg.video_audio:
            speech, nb = _video_speech(memory, data, seg.info.audio_start, item, maus, base=base, sha=sha, transcript_fn=transcript_fn,
                                       timestamp=timestamp, session_id=session_id, speaker=speaker)
            new_bytes += nb
        memory.add_maus(maus + speech)
        with st.lock:
            st.seen_sha[sha] = maus[0].id
        _describe_video(item, seg)
        maus += speech
        item.mau_ids, item.bytes_stored = [m.id for m in maus], new_bytes
        _finish(report, item)
        return maus
    except (MediaInputError, DuplicateIdError) as exc:
        _finish(report, item, exc)
        return []


# ----------------------------------------------------------------------------- batches
def ingest_files(memory: Any, paths: Iterable[str | Path], *, captions: Mapping[str, str] | None = None,
                 captioner: Captioner | None = None, transcript_fn: TranscriptFn | None = None,
                 sample_fps: float | None = None, timestamp: datetime | None = None,
                 session_id: str | None = None, report: MediaReport | None = None) -> MediaReport:
    """Ingest media files by extension; unknown types and bad files are reported, the rest go on."""
    report = report if report is not None else MediaReport()
    captions = captions or {}
    for p in paths:
        path = Path(p)
        ext = path.suffix.lower()
        if ext in IMAGE_EXTS:
            ingest_image(memory, path, captions.get(str(p)) or captions.get(path.name), timestamp=timestamp,
                         session_id=session_id, captioner=captioner, report=report)
        elif ext in AUDIO_EXTS:
            ingest_audio(memory, path, transcript_fn, timestamp=timestamp, session_id=session_id, report=report)
        elif ext in VIDEO_EXTS:
            ingest_video(memory, path, sample_fps, caption=captions.get(str(p)) or captions.get(path.name),
                         captioner=captioner, transcript_fn=transcript_fn, timestamp=timestamp,
                         session_id=session_id, report=report)
        else:
            report.items.append(MediaItemReport(str(path), "unknown",
                                                error=f"unsupported file type {ext or '(none)'!r}"))
    return report
