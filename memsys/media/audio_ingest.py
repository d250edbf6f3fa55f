"""Audio ingestion: the speech of an audio track -> one gated MAU per kept speech segment.

Summary = transcript or ``[speech segment 12.3-15.8 s]``; pointer = that segment as a
16 kHz mono WAV; ``time_span`` = seconds in the source file; prev/next links. The
segment gate and MAU builder (:func:`speech_maus`) also serve video soundtracks,
so both get the same gate, WAVs and details.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

import numpy as np

from memsys.errors import DuplicateIdError
from memsys.media import MediaInputError
from memsys.media.audio import AudioClip, encode_wav, find_speech_segments, load_audio, rms
from memsys.media.gates import AudioGate, SpeechSegment
from memsys.media.ingest_state import read_new_item
from memsys.media.mau_fields import MauMeta, link_chain, put_blob, time_shift
from memsys.media.report import MediaItemReport, MediaReport, finish_item, item_label
from memsys.records import MAU, IngestDecision, Modality

TranscriptFn = Callable[[np.ndarray, int], str]  # (float32 mono samples, sample rate) -> text


@dataclass
class _Speech:
    """What :func:`speech_maus` found in one audio track (MAUs not yet in the store)."""

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
    meta: MauMeta


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
    pointer, nb = put_blob(memory.store.cold, encode_wav(samples, rate), "wav")
    mid = f"{tr.base}:{tr.stem}{n:03d}"
    if mid in memory.store.positions:
        raise DuplicateIdError(f"{item.modality} {item.item}: MAU id {mid!r} already in the store")
    details = _segment_details(tr, seg, d, transcript, item)
    placeholder = f"[speech segment {tr.t0 + seg.start:.1f}-{tr.t0 + seg.end:.1f} s]"
    meta = tr.meta
    mau = MAU(id=mid, summary=transcript or placeholder,
              modality=Modality.AUDIO, timestamp=time_shift(meta.timestamp, tr.t0 + seg.start), pointer=pointer,
              session_id=meta.session_id, source_id=tr.base, speaker=meta.speaker, details=details,
              persons=meta.persons, time_span=_segment_span(tr, seg))
    return mau, nb


def speech_maus(memory: Any, clip: AudioClip, item: MediaItemReport, *, base: str, stem: str, sha: str,
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
    tr = _SpeechTrack(clip, base, stem, sha, t0, track, transcript_fn, MauMeta(timestamp, session_id, speaker))
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
    link_chain(maus)
    return _Speech(maus, len(segments), verdicts, silence, total_rms, new_bytes)


def ingest_audio(memory: Any, audio: str | Path | bytes, transcript_fn: TranscriptFn | None = None, *,
                 timestamp: datetime | None = None, session_id: str | None = None, id: str | None = None,
                 speaker: str | None = None, report: MediaReport | None = None) -> list[MAU]:
    """Speech segments of an audio file as MAUs (silence and non-speech are not stored)."""
    cfg = memory.cfg.ingest.media
    item = MediaItemReport(item_label(audio), "audio")
    try:
        if (new := read_new_item(memory, audio, cfg.max_audio_bytes, "audio", item, report)) is None:
            return []
        data, sha, st = new
        clip = load_audio(data, item.item, cfg.audio_sample_rate, cfg.min_sample_rate)
        item.notes.extend(clip.notes)
        sp = speech_maus(memory, clip, item, base=id or f"aud-{sha[:16]}", stem="seg", sha=sha,
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
        finish_item(report, item)
        return maus
    except (MediaInputError, DuplicateIdError) as exc:
        finish_item(report, item, exc)
        return []
