"""Video ingestion: one MAU per scene, plus the soundtrack's speech, stored together.

Scene MAUs carry prev/next links; pointer = the whole file (stored once, shared by its
scenes), ``time_span`` = the scene's seconds; ``details["keyframe_pointer"]`` = a
downscaled JPEG of the scene's first frame. The soundtrack (``media.video_audio``) adds
audio MAUs ``<base>:speechNNN`` built as for an audio file, with ``time_span`` in video
seconds, ``details`` ``track="video_audio"`` and ``scene_mau_id``, and a RELATED link to
that scene.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

from memsys.errors import DuplicateIdError
from memsys.media import MediaInputError
from memsys.media.audio import load_audio
from memsys.media.audio_ingest import TranscriptFn, speech_maus
from memsys.media.captioning import Captioner, call_captioner, caption_line
from memsys.media.encoders import ImageEncoder
from memsys.media.gates import VisionNoveltyGate
from memsys.media.image import encode_jpeg
from memsys.media.ingest_state import read_new_item
from memsys.media.mau_fields import MauMeta, link_chain, put_blob, time_shift
from memsys.media.report import MediaItemReport, MediaReport, finish_item, item_label
from memsys.media.video import Scene, SceneSegmentation, segment_scenes
from memsys.records import MAU, IngestDecision, Link, LinkKind, Modality


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
    sp = speech_maus(memory, clip, item, base=base, stem="speech", sha=sha, transcript_fn=transcript_fn,
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
    meta: MauMeta


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
    key_pointer, nb = put_blob(memory.store.cold, key, "jpg")
    scene_caption = call_captioner(v.captioner, key, "image/jpeg", item, f"scene {k}") if v.captioner else None
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
              timestamp=time_shift(meta.timestamp, sc.start), pointer=v.pointer, session_id=meta.session_id,
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
    link_chain(maus)
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
    item = MediaItemReport(item_label(video), "video")
    try:
        if (new := read_new_item(memory, video, cfg.max_video_bytes, "video", item, report)) is None:
            return []
        data, sha, st = new
        with st.lock:
            enc = st.encoder_for(memory, encoder)
        seg = _segment_video(cfg, data, enc, sample_fps, item)
        base = id or f"vid-{sha[:16]}"
        clip_pointer, new_bytes = put_blob(memory.store.cold, data, seg.info.ext)
        segmented = _SegmentedVideo(seg, enc.name, base, sha, clip_pointer, caption_line(caption), captioner,
                                 MauMeta(timestamp, session_id, speaker))
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
        finish_item(report, item)
        return maus
    except (MediaInputError, DuplicateIdError) as exc:
        finish_item(report, item, exc)
        return []
