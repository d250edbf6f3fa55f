"""Video MAUs: PyAV-generated clips with known scene cuts, scene gating, cold storage, errors."""

from __future__ import annotations

import io
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from memsys.config import EmbedderConfig, MemoryConfig
from memsys.media import MediaInputError, MediaReport, ingest_files, ingest_video
from memsys.media.video import write_test_video
from memsys.memory import Memory
from memsys.records import LinkKind, Modality
from tests.support.media import scene as synthetic_scene

pytest.importorskip("av")


def scene(seed: int, size=(320, 240)) -> np.ndarray:
    return np.asarray(synthetic_scene(seed, size))


def make_memory(tmp_path: Path, **media) -> Memory:
    cfg = MemoryConfig(embedder=EmbedderConfig(backend="hashing", cache=False))
    for k, v in media.items():
        setattr(cfg.ingest.media, k, v)
    return Memory.create(tmp_path / "store", cfg)


@pytest.fixture(scope="module")
def three_scenes(tmp_path_factory) -> Path:
    """6 s at 10 fps: three 2-second scenes (two cuts), each slowly panning 2 px/s."""
    return write_test_video(tmp_path_factory.mktemp("video") / "walk.mp4", [scene(1), scene(2), scene(3)],
                            seconds_per_scene=2.0, fps=10)


def test_three_scenes_become_three_linked_maus(tmp_path, three_scenes):
    mem = make_memory(tmp_path)
    ts = datetime(2024, 7, 1, 9, 0)
    report = MediaReport()
    maus = ingest_video(mem, three_scenes, sample_fps=2.0, caption="a walk through town", timestamp=ts,
                        session_id="S1", report=report)
    item = report.items[0]
    assert item.error is None
    assert len(maus) == 3  # scene changes kept, static frames dropped
    assert item.stats["frames_sampled"] == 12 and item.stats["scenes"] == 3 and item.stats["frames_static"] == 9
    assert [m.time_span for m in maus] == [(0.0, 2.0), (2.0, 4.0), (4.0, 6.0)]
    assert [m.timestamp for m in maus] == [ts, ts + timedelta(seconds=2), ts + timedelta(seconds=4)]
    assert all(m.modality == Modality.VIDEO and m.session_id == "S1" for m in maus)
    assert maus[0].summary == "[video scene 0.0-2.0 s] a walk through town"
    # prev/next chain
    assert [(link.kind, link.target) for link in maus[1].links] == [(LinkKind.PREV, maus[0].id),
                                                                    (LinkKind.NEXT, maus[2].id)]
    assert [link.kind for link in maus[0].links] == [LinkKind.NEXT]
    # raw clip: the whole file once in cold storage, shared by all scenes
    assert len({m.pointer for m in maus}) == 1
    assert mem.store.cold.get(maus[0].pointer) == three_scenes.read_bytes()
    assert maus[0].details["mime"] == "video/mp4"
    # keyframes: decodable JPEGs in cold storage, one per scene, matching their scene
    keys = [Image.open(io.BytesIO(mem.store.cold.get(m.details["keyframe_pointer"]))) for m in maus]
    assert all(k.format == "JPEG" and k.size == (320, 240) for k in keys)
    for k, seed in zip(keys, (1, 2, 3)):
        diff = np.abs(np.asarray(k, np.float32) - scene(seed).astype(np.float32)).mean()
        assert diff < 20
    assert item.bytes_stored == item.bytes_in + sum(mem.store.cold.size(m.details["keyframe_pointer"]) for m in maus)
    # the same file again is a duplicate
    again = MediaReport()
    assert ingest_video(mem, three_scenes, report=again) == []
    assert again.items[0].decision.verdict == "duplicate"


def test_static_video_is_one_scene_and_returning_scene_is_new(tmp_path):
    static = write_test_video(tmp_path / "static.mp4", [scene(5), scene(5)], seconds_per_scene=2.0, fps=10)
    maus = ingest_video(make_memory(tmp_path), static, sample_fps=2.0)
    assert len(maus) == 1 and maus[0].time_span == (0.0, 4.0)
    back = write_test_video(tmp_path / "aba.mp4", [scene(6), scene(7), scene(6)], seconds_per_scene=1.0, fps=10)
    maus = ingest_video(make_memory(tmp_path / "b"), back, sample_fps=2.0)
    assert len(maus) == 3  # the gate compares with the current reference only (consecutive frames)


def test_sample_fps_and_max_frames(tmp_path, three_scenes):
    report = MediaReport()
    ingest_video(make_memory(tmp_path), three_scenes, sample_fps=0.5, report=report)
    assert report.items[0].stats["frames_sampled"] == 3
    capped = MediaReport()
    mem = make_memory(tmp_path / "cap", video_max_frames=5)  # frames at 0.0 ... 2.0 s
    maus = ingest_video(mem, three_scenes, sample_fps=2.0, report=capped)
    assert capped.items[0].stats["frames_sampled"] == 5 and len(maus) == 2
    assert "video_max_frames" in capped.items[0].notes[0]


def test_captioner_runs_per_keyframe(tmp_path, three_scenes):
    calls = []

    def captioner(data: bytes, mime: str) -> str:
        calls.append(mime)
        return f"scene number {len(calls)}"

    maus = ingest_video(make_memory(tmp_path), three_scenes, 2.0, captioner=captioner)
    assert calls == ["image/jpeg"] * 3
    assert maus[2].summary == "[video scene 4.0-6.0 s] scene number 3"


def test_bad_videos_are_reported(tmp_path, three_scenes):
    mem = make_memory(tmp_path, max_video_bytes=100_000)
    (tmp_path / "junk.mp4").write_bytes(np.random.default_rng(0).bytes(5000))
    (tmp_path / "text.mkv").write_text("not a video at all")
    import wave

    with wave.open(str(tmp_path / "sound.mov"), "wb") as w:  # audio only, video extension
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000), w.writeframes(b"\x00\x01" * 16000)
    (tmp_path / "big.mp4").write_bytes(b"\0" * 100_001)
    report = ingest_files(mem, [tmp_path / "junk.mp4", tmp_path / "text.mkv", tmp_path / "sound.mov",
                                tmp_path / "big.mp4"])
    errors = [i.error or "" for i in report.items]
    assert "unsupported codec or corrupt file" in errors[0]
    assert "unsupported codec or corrupt file" in errors[1]
    assert "no video stream" in errors[2]
    assert "over the" in errors[3] and "byte cap" in errors[3]
    assert len(mem) == 0
    with pytest.raises(MediaInputError):
        ingest_video(mem, tmp_path / "junk.mp4")


def test_truncated_video_keeps_what_decodes(tmp_path, three_scenes):
    data = three_scenes.read_bytes()
    report = MediaReport()
    maus = ingest_video(make_memory(tmp_path), data[: len(data) * 2 // 3], 2.0, report=report)
    item = report.items[0]
    # an mp4 cut short loses its index (moov at the end) or its tail: either a clear error or fewer scenes
    assert (item.error and "video" in item.error) or (1 <= len(maus) <= 3)
