"""Video: frame sampling with PyAV and scene segmentation with the vision gate.

Frames are decoded in stream order and sampled at ``sample_fps``; each sampled
frame is embedded by the image encoder and compared with the current scene's
reference frame (:class:`memsys.media.gates.VisionNoveltyGate` with
``keep_uncertain=False``): "novel" opens a new scene whose first frame is its
keyframe; "static" and "uncertain" frames extend the current scene.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from memsys.media import MediaInputError
from memsys.media.encoders import ImageEncoder
from memsys.media.gates import VisionNoveltyGate

_EXT_MIME = {
    ".mp4": "video/mp4", ".m4v": "video/mp4", ".mov": "video/quicktime", ".webm": "video/webm",
    ".mkv": "video/x-matroska", ".avi": "video/x-msvideo", ".mpg": "video/mpeg", ".mpeg": "video/mpeg",
}
_FORMAT_MIME = {"mp4": "video/mp4", "mov": "video/quicktime", "webm": "video/webm", "matroska": "video/x-matroska",
                "avi": "video/x-msvideo", "mpeg": "video/mpeg"}


@dataclass
class VideoInfo:
    mime: str
    ext: str
    codec: str
    width: int
    height: int
    duration: float  # seconds (0.0 when the container does not say)
    fps: float
    # the first audio stream's start in container seconds (a soundtrack may begin late;
    # negative encoder priming counts as 0); None when the file has no sound
    audio_start: float | None = None


@dataclass
class SampledFrame:
    time: float
    image: Any  # PIL.Image.Image


@dataclass
class Scene:
    start: float
    end: float
    keyframe: SampledFrame
    decision: Any  # the gate's IngestDecision that opened the scene
    frames: int = 1  # sampled frames in the scene
    static: int = 0
    uncertain: int = 0


@dataclass
class SceneSegmentation:
    scenes: list[Scene]
    sampled: int
    info: VideoInfo
    notes: list[str] = field(default_factory=list)


def _err(name: str, exc: Exception) -> MediaInputError:
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return MediaInputError(f"video {name}: unsupported codec or corrupt file ({msg})")


def _mime(name: str, container_format: str) -> tuple[str, str]:
    ext = Path(name).suffix.lower()
    if ext in _EXT_MIME:
        return _EXT_MIME[ext], ext.lstrip(".")
    for key, mime in _FORMAT_MIME.items():
        if key in container_format:
            return mime, "mp4" if key == "mp4" else key
    return "application/octet-stream", "bin"


def _open(data: bytes, name: str) -> Any:
    try:
        import av
    except ImportError as exc:
        from memsys.errors import MissingDependencyError

        raise MissingDependencyError("PyAV is not installed: pip install 'omni-memsys[media]'") from exc
    try:
        container = av.open(io.BytesIO(data))
    except Exception as exc:  # av.error.InvalidDataError etc.
        raise _err(name, exc) from exc
    if not container.streams.video:
        container.close()
        raise MediaInputError(f"video {name}: no video stream")
    return container


def _audio_start(container: Any) -> float | None:
    if not container.streams.audio:
        return None
    audio = container.streams.audio[0]
    if audio.start_time is None or audio.time_base is None:
        return 0.0
    return max(0.0, float(audio.start_time * audio.time_base))


def sample_frames(data: bytes, name: str, sample_fps: float, max_frames: int,
                  notes: list[str] | None = None) -> tuple[VideoInfo, Iterator[SampledFrame]]:
    """Video metadata and a generator of frames at ``sample_fps`` (first frame always)."""
    if sample_fps <= 0:
        raise MediaInputError(f"video {name}: sample_fps must be > 0, got {sample_fps}")
    container = _open(data, name)
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"
    ctx = stream.codec_context
    duration = 0.0
    if stream.duration is not None and stream.time_base is not None:
        duration = float(stream.duration * stream.time_base)
    elif container.duration is not None:
        duration = container.duration / 1_000_000
    fps = float(stream.average_rate or stream.guessed_rate or 0.0)
    mime, ext = _mime(name, container.format.name or "")
    info = VideoInfo(mime, ext, ctx.name or "?", int(ctx.width or 0), int(ctx.height or 0), duration, fps,
                     _audio_start(container))
    notes = notes if notes is not None else []

    def frames() -> Iterator[SampledFrame]:
        step = 1.0 / sample_fps
        next_t, count, index = 0.0, 0, 0
        try:
            for frame in container.decode(stream):
                t = float(frame.time) if frame.time is not None else (index / fps if fps else index * step)
                index += 1
                if t + 1e-6 < next_t:
                    continue
                yield SampledFrame(t, frame.to_image())
                count += 1
                if count >= max_frames:
                    notes.append(f"stopped at {max_frames} sampled frames (media.video_max_frames)")
                    break
                next_t = max(next_t + step, t + step * 0.5)
        except MediaInputError:
            raise
        except Exception as exc:
            if count == 0:
                raise _err(name, exc) from exc
            notes.append(f"decoding stopped at {t:.1f} s: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        finally:
            container.close()
        if count == 0:
            raise MediaInputError(f"video {name}: no decodable frames")

    return info, frames()


def segment_scenes(data: bytes, name: str, encoder: ImageEncoder, gate: VisionNoveltyGate,
                   sample_fps: float, max_frames: int) -> SceneSegmentation:
    """Sample, embed and gate frames; one :class:`Scene` per accepted reference frame."""
    notes: list[str] = []
    info, frames = sample_frames(data, name, sample_fps, max_frames, notes)
    scenes: list[Scene] = []
    sampled = 0
    last_t = 0.0
    for f in frames:
        sampled += 1
        last_t = f.time
        d = gate.check(np.asarray(encoder.encode([f.image])[0], np.float32))
        if d.accepted:
            if scenes:
                scenes[-1].end = f.time
            scenes.append(Scene(f.time, f.time, f, d))
            continue
        cur = scenes[-1]
        cur.frames += 1
        cur.static += d.verdict == "static"
        cur.uncertain += d.verdict == "uncertain"
    end = max(info.duration, last_t + (1.0 / info.fps if info.fps else 0.0))
    if scenes:
        scenes[-1].end = end
    return SceneSegmentation(scenes, sampled, info, notes)


def write_test_video(path: str | Path, scenes: list[np.ndarray] | list[Any], seconds_per_scene: float = 2.0,
                     fps: int = 10, codec: str = "mpeg4", motion_px: int = 2) -> Path:
    """Write a small video of still scenes (with slight motion) for tests and benchmarks.

    ``scenes`` are RGB arrays (H, W, 3) or PIL images of the same size; each is
    shown for ``seconds_per_scene`` while shifting ``motion_px`` pixels per
    second, so consecutive frames are near-duplicates and scene cuts are hard.
    """
    import av
    from PIL import Image

    arrays = [np.asarray(s.convert("RGB") if isinstance(s, Image.Image) else s, np.uint8) for s in scenes]
    h, w = arrays[0].shape[:2]
    path = Path(path)
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        n = int(round(seconds_per_scene * fps))
        for arr in arrays:
            for i in range(n):
                shift = int(round(motion_px * i / fps))
                frame = av.VideoFrame.from_ndarray(np.roll(arr, shift, axis=1), format="rgb24")
                for packet in stream.encode(frame):
                    out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path
