"""Batch ingestion: media files dispatched by extension, and lists of images in order.

A bad item in a batch is recorded in the :class:`MediaReport` and the rest go on. Each
modality has its own module (``image_ingest``, ``audio_ingest``, ``video_ingest``);
this one only routes to them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Mapping

from memsys.media.audio_ingest import TranscriptFn, ingest_audio
from memsys.media.captioning import Captioner
from memsys.media.encoders import ImageEncoder
from memsys.media.image_ingest import ingest_image
from memsys.media.report import MediaItemReport, MediaReport
from memsys.media.video_ingest import ingest_video

IMAGE_EXTS = {".jpg", ".jpeg", ".png", ".gif", ".webp", ".bmp", ".tif", ".tiff"}
AUDIO_EXTS = {".wav", ".mp3", ".flac", ".ogg", ".m4a", ".opus"}
VIDEO_EXTS = {".mp4", ".m4v", ".mov", ".webm", ".mkv", ".avi", ".mpg", ".mpeg"}


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
