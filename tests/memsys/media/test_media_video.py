"""Video MAUs: PyAV-generated clips with known scene cuts, scene gating, cold storage, errors,
and soundtracks (espeak-ng speech muxed in with PyAV) through the real Silero VAD."""

from __future__ import annotations

import io
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from memsys.config import EmbedderConfig, MemoryConfig
from memsys.media import MediaInputError, MediaReport, ingest_files, ingest_video
from memsys.media.audio import load_audio
from memsys.media.video import write_test_video
from memsys.memory import Memory
from memsys.records import Link, LinkKind, Modality
from tests.support.media import espeak, mux_audio
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
    # no audio stream: no soundtrack work, nothing reported about one
    assert item.mau_ids == [m.id for m in maus] and not item.notes
    assert not any(k.startswith(("speech_", "audio_")) for k in item.stats)
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


# ----------------------------------------------------------------------------- soundtracks
@pytest.fixture(scope="module")
def talking_video(tmp_path_factory, three_scenes) -> tuple[Path, list[tuple[float, float]]]:
    """``three_scenes`` with a 6 s soundtrack: one utterance in scene 0, one in scene 2, silence between."""
    a, b = espeak("Good morning everyone."), espeak("See you at the harbour.")
    if a is None or b is None:
        pytest.skip("espeak-ng not installed (apt-get install espeak-ng) -- synthesized speech unavailable")
    rate = a[1]
    track = np.zeros(6 * rate, np.float32)
    spans = []
    for (x, _), start in ((a, 0.3), (b, 4.2)):
        assert len(x) / rate < 1.7, "utterance no longer fits its scene"
        i = int(start * rate)
        track[i : i + len(x)] = x
        spans.append((start, start + len(x) / rate))
    return mux_audio(three_scenes, tmp_path_factory.mktemp("talk") / "talk.mp4", track, rate), spans


def test_soundtrack_speech_becomes_audio_maus_linked_to_scenes(tmp_path, talking_video):
    path, spans = talking_video
    mem = make_memory(tmp_path)
    ts = datetime(2024, 7, 1, 9, 0)
    report = MediaReport()
    maus = ingest_video(mem, path, 2.0, timestamp=ts, session_id="S1", speaker="Ana", report=report)
    item = report.items[0]
    assert item.error is None and "audio track resampled 22050 -> 16000 Hz" in item.notes
    scenes = [m for m in maus if m.modality == Modality.VIDEO]
    speech = [m for m in maus if m.modality == Modality.AUDIO]
    assert maus == scenes + speech and len(scenes) == 3 and len(speech) >= 2
    base = scenes[0].source_id
    assert [m.id for m in scenes] == [f"{base}:scene{k:03d}" for k in range(3)]
    assert [m.id for m in speech] == [f"{base}:speech{k:03d}" for k in range(len(speech))]
    assert item.mau_ids == [m.id for m in maus] and len(mem) == len(maus)
    assert item.stats["speech_segments_kept"] == len(speech) <= item.stats["speech_segments_found"]
    by_id = {m.id: m for m in scenes}
    for m in speech:
        a, b = m.time_span
        assert 0.0 <= a < b <= item.stats["duration_s"] + 0.1
        assert any(a < e + 0.2 and b > s - 0.2 for s, e in spans), f"{m.time_span} is not inside speech"
        assert m.source_id == base and m.session_id == "S1" and m.speaker == "Ana"
        assert m.timestamp == ts + timedelta(seconds=a)
        assert m.details["track"] == "video_audio" and m.details["source"] == str(path)
        assert m.details["source_sha256"] == scenes[0].details["source_sha256"]
        scene_id = m.details["scene_mau_id"]
        sa, sb = by_id[scene_id].time_span
        assert sa <= (a + b) / 2 < sb  # the scene on screen at the segment's midpoint
        assert Link(LinkKind.RELATED, scene_id) in m.links
        clip = load_audio(mem.store.cold.get(m.pointer), m.id)  # the segment as a WAV in the cold tier
        assert clip.sample_rate == 16000 and clip.duration == pytest.approx(b - a, abs=0.01)
    # speech only in the first and last scenes, none in the middle one
    assert {m.details["scene_mau_id"] for m in speech} == {scenes[0].id, scenes[2].id}
    assert speech[1].links[0] == Link(LinkKind.PREV, speech[0].id)  # consecutive speech stays chained
    for s, e in spans:  # every utterance is mostly covered
        covered = sum(max(0.0, min(e, m.time_span[1]) - max(s, m.time_span[0])) for m in speech)
        assert covered / (e - s) > 0.6
    assert [p["track"] for p in item.parts if "track" in p] == ["video_audio"] * item.stats["speech_segments_found"]


def test_ingest_files_transcribes_video_speech(tmp_path, talking_video):
    path, _ = talking_video
    mem = make_memory(tmp_path)
    report = ingest_files(mem, [path], transcript_fn=lambda x, rate: f"said {len(x) / rate:.1f} s", sample_fps=2.0)
    speech = [m for m in mem.store.maus if m.modality == Modality.AUDIO]
    assert speech and all(m.summary.startswith("said ") and m.details["transcript_source"] == "transcript_fn"
                          for m in speech)
    assert report.mau_ids == [m.id for m in mem.store.maus]


def test_video_audio_off_skips_the_soundtrack(tmp_path, talking_video):
    path, _ = talking_video
    report = MediaReport()
    maus = ingest_video(make_memory(tmp_path, video_audio=False), path, 2.0, report=report)
    assert len(maus) == 3 and all(m.modality == Modality.VIDEO for m in maus)
    assert "speech_segments_found" not in report.items[0].stats and not report.items[0].notes


def test_silent_soundtrack_adds_no_speech(tmp_path, three_scenes):
    quiet = mux_audio(three_scenes, tmp_path / "quiet.mp4", np.zeros(6 * 16000, np.float32), 16000)
    report = MediaReport()
    maus = ingest_video(make_memory(tmp_path), quiet, 2.0, report=report)
    item = report.items[0]
    assert len(maus) == 3 and all(m.modality == Modality.VIDEO for m in maus)
    assert item.stats["speech_segments_found"] == 0 and item.stats["speech_segments_kept"] == 0


def test_corrupt_soundtrack_keeps_the_scenes(tmp_path, three_scenes):
    broken = mux_audio(three_scenes, tmp_path / "broken.mp4", None, corrupt=True)
    report = MediaReport()
    maus = ingest_video(make_memory(tmp_path), broken, 2.0, report=report)
    item = report.items[0]
    assert item.error is None and len(maus) == 3 and all(m.modality == Modality.VIDEO for m in maus)
    assert len(item.notes) == 1 and item.notes[0].startswith("audio track skipped: ") and "\n" not in item.notes[0]
    assert "speech_segments_found" not in item.stats
