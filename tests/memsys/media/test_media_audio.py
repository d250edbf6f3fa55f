"""Audio MAUs with real Silero VAD: espeak-ng speech (skipped if absent), tones and silence."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import wave
from pathlib import Path

import numpy as np
import pytest

from memsys.config import EmbedderConfig, MemoryConfig
from memsys.media import MediaInputError, MediaReport, ingest_audio, ingest_files
from memsys.media.audio import _pcm_to_float, encode_wav, load_audio, resample
from memsys.memory import Memory
from memsys.records import LinkKind, Modality

ESPEAK = shutil.which("espeak-ng")
needs_espeak = pytest.mark.skipif(
    ESPEAK is None, reason="espeak-ng not installed (apt-get install espeak-ng) -- synthesized speech unavailable")


def write_wav(path: Path, samples: np.ndarray, rate: int, channels: int = 1, width: int = 2) -> Path:
    x = np.clip(samples, -1, 1)
    if channels > 1:
        x = np.repeat(x[:, None], channels, axis=1).ravel()
    pcm = {1: lambda v: (v * 127 + 128).astype(np.uint8), 2: lambda v: (v * 32767).astype("<i2")}[width](x)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return path


def speak(text: str) -> tuple[np.ndarray, int]:
    """espeak-ng speech as float32 mono at its native rate (22050 Hz)."""
    out = subprocess.run([ESPEAK, "--stdout", text], check=True, capture_output=True, timeout=60).stdout
    with wave.open(io.BytesIO(out)) as w:
        rate, raw = w.getframerate(), w.readframes(w.getnframes())
    return np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0, rate


def silence(seconds: float, rate: int) -> np.ndarray:
    return np.zeros(int(seconds * rate), np.float32)


def make_memory(tmp_path: Path, **media) -> Memory:
    cfg = MemoryConfig(embedder=EmbedderConfig(backend="hashing", cache=False))
    for k, v in media.items():
        setattr(cfg.ingest.media, k, v)
    return Memory.create(tmp_path / "store", cfg)


@pytest.fixture(scope="module")
def conversation(tmp_path_factory) -> tuple[Path, list[tuple[float, float]]]:
    """Two utterances separated by silence, with their true spans in seconds."""
    if ESPEAK is None:
        pytest.skip("espeak-ng not installed (apt-get install espeak-ng) -- synthesized speech unavailable")
    a, rate = speak("The meeting starts at nine tomorrow morning.")
    b, _ = speak("Please bring the quarterly report and your laptop.")
    parts, spans, t = [], [], 0.0
    for chunk, is_speech in ((silence(1.0, rate), False), (a, True), (silence(1.5, rate), False),
                             (b, True), (silence(1.0, rate), False)):
        if is_speech:
            spans.append((t, t + len(chunk) / rate))
        parts.append(chunk)
        t += len(chunk) / rate
    path = write_wav(tmp_path_factory.mktemp("audio") / "meeting.wav", np.concatenate(parts), rate)
    return path, spans


@needs_espeak
def test_speech_segments_from_real_speech(tmp_path, conversation):
    path, spans = conversation
    mem = make_memory(tmp_path)
    report = MediaReport()
    maus = ingest_audio(mem, path, report=report)
    item = report.items[0]
    assert item.error is None and "resampled 22050 -> 16000 Hz" in item.notes
    assert len(maus) >= 2
    for m in maus:
        assert m.modality == Modality.AUDIO
        assert re.fullmatch(r"\[speech segment \d+\.\d-\d+\.\d s\]", m.summary)
        a, b = m.time_span
        assert any(a < e + 0.2 and b > s - 0.2 for s, e in spans), f"{m.time_span} is not inside speech"
        clip = load_audio(mem.store.cold.get(m.pointer), m.id)  # the raw segment in the cold tier
        assert clip.sample_rate == 16000 and clip.duration == pytest.approx(b - a, abs=0.01)
    # every true utterance is covered by the segments found
    for s, e in spans:
        covered = sum(max(0.0, min(e, m.time_span[1]) - max(s, m.time_span[0])) for m in maus)
        assert covered / (e - s) > 0.7
    assert maus[0].links == [(maus[0].links[0])] and maus[0].links[0].kind == LinkKind.NEXT
    assert maus[1].links[0].kind == LinkKind.PREV and maus[1].links[0].target == maus[0].id
    assert item.decision.verdict == "speech" and item.stats["segments_kept"] == len(maus)
    assert item.bytes_stored < item.bytes_in  # silence is not stored


@needs_espeak
def test_transcript_fn_gives_the_summary(tmp_path, conversation):
    path, _ = conversation
    mem = make_memory(tmp_path)
    seen = []

    def transcribe(samples: np.ndarray, rate: int) -> str:
        seen.append((samples.dtype, rate, len(samples)))
        return f"utterance {len(seen)}"

    maus = ingest_audio(mem, path, transcript_fn=transcribe)
    assert [m.summary for m in maus] == [f"utterance {i + 1}" for i in range(len(maus))]
    assert all(dtype == np.float32 and rate == 16000 and n > 0 for dtype, rate, n in seen)
    assert mem.retrieve("utterance").candidates


@needs_espeak
def test_short_speech_is_uncertain(tmp_path):
    word, rate = speak("Yes.")
    path = write_wav(tmp_path / "yes.wav", np.concatenate([silence(1, rate), word, silence(1, rate)]), rate)
    mem = make_memory(tmp_path)
    report = MediaReport()
    maus = ingest_audio(mem, path, report=report)
    assert len(maus) == 1 and maus[0].details["novelty"] == "uncertain"
    assert maus[0].time_span[1] - maus[0].time_span[0] < 0.5
    strict = make_memory(tmp_path / "strict", audio_keep_uncertain=False)
    assert ingest_audio(strict, path) == []


@needs_espeak
def test_stereo_44k_is_resampled_and_downmixed(tmp_path):
    speech, rate = speak("Hello there, this is a stereo recording.")
    x44 = resample(speech, rate, 44100)
    path = write_wav(tmp_path / "stereo.wav", np.concatenate([silence(0.5, 44100), x44, silence(0.5, 44100)]),
                     44100, channels=2)
    report = MediaReport()
    maus = ingest_audio(make_memory(tmp_path), path, report=report)
    assert maus and "resampled 44100 -> 16000 Hz" in report.items[0].notes
    assert "downmixed 2 channels to mono" in report.items[0].notes


def test_silence_and_tones_store_nothing(tmp_path):
    rate = 16000
    t = np.arange(rate * 3) / rate
    mem = make_memory(tmp_path)
    quiet = write_wav(tmp_path / "quiet.wav", 0.002 * np.random.default_rng(0).normal(size=len(t)), rate)
    tone = write_wav(tmp_path / "tone.wav", 0.3 * np.sin(2 * np.pi * 440 * t) + 0.1 * np.sin(2 * np.pi * 880 * t), rate)
    report = ingest_files(mem, [quiet, tone])
    assert [i.decision.verdict for i in report.items] == ["silence", "no_speech"]
    assert report.mau_ids == [] and len(mem) == 0
    assert report.items[0].stats["rms"] < 0.01


def test_bad_audio_items(tmp_path):
    mem = make_memory(tmp_path)
    empty = write_wav(tmp_path / "empty.wav", np.zeros(0, np.float32), 16000)
    low = write_wav(tmp_path / "low.wav", 0.1 * np.ones(4000, np.float32), 4000)
    (tmp_path / "header.wav").write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt ")
    (tmp_path / "noise.mp3").write_bytes(np.random.default_rng(1).bytes(4000))
    (tmp_path / "zero.wav").write_bytes(b"")
    report = ingest_files(mem, [empty, low, tmp_path / "header.wav", tmp_path / "noise.mp3", tmp_path / "zero.wav",
                                tmp_path / "notes.txt"])
    errors = [i.error for i in report.items]
    assert "zero-length audio" in errors[0]
    assert "sample rate 4000 Hz below 8000 Hz, rejected" in errors[1]
    assert "audio" in errors[2] and ("corrupt" in errors[2] or "truncated" in errors[2])
    assert "unsupported or corrupt" in errors[3]
    assert "empty (0 bytes)" in errors[4]
    assert "unsupported file type '.txt'" in errors[5]
    with pytest.raises(MediaInputError, match="zero-length"):
        ingest_audio(mem, empty)


def test_vad_restores_torch_threads(tmp_path):
    import torch

    before = torch.get_num_threads()
    rate = 16000
    x = 0.2 * np.sin(2 * np.pi * 300 * np.arange(rate) / rate)
    ingest_audio(make_memory(tmp_path), write_wav(tmp_path / "t.wav", x, rate))
    assert torch.get_num_threads() == before


def test_pcm_widths_and_resampling():
    x = np.array([0.0, 0.5, -0.5, 0.99], np.float32)
    u8 = (x * 127 + 128).astype(np.uint8).tobytes()
    assert np.allclose(_pcm_to_float(u8, 1, 1), x, atol=0.02)  # 8-bit: 1/128 steps
    i24 = b"".join(int(v * 8388607).to_bytes(3, "little", signed=True) for v in x)
    assert np.allclose(_pcm_to_float(i24, 3, 1), x, atol=1e-6)
    stereo = np.array([[0.5, -0.5], [0.25, 0.25]], "<f4")
    assert np.allclose(_pcm_to_float((stereo * 32767).astype("<i2").tobytes(), 2, 2), [0.0, 0.25], atol=1e-3)
    rate_in, rate_out = 44100, 16000
    sine = np.sin(2 * np.pi * 1000 * np.arange(rate_in) / rate_in).astype(np.float32)
    y = resample(sine, rate_in, rate_out)
    assert len(y) == rate_out
    assert np.argmax(np.abs(np.fft.rfft(y))) == pytest.approx(1000, abs=2)  # 1 Hz bins over 1 s
    alias = resample(np.sin(2 * np.pi * 12000 * np.arange(rate_in) / rate_in), rate_in, rate_out)
    assert np.sqrt(np.mean(alias ** 2)) < 0.05  # above the new Nyquist: filtered, not aliased
    assert encode_wav(y, rate_out)[:4] == b"RIFF"


def test_non_wav_container_via_pyav(tmp_path):
    av = pytest.importorskip("av")
    rate = 16000
    t = np.arange(rate) / rate
    path = tmp_path / "tone.flac"
    try:
        with av.open(str(path), "w") as out:
            stream = out.add_stream("flac", rate=rate, layout="mono")
            frame = av.AudioFrame.from_ndarray((0.3 * np.sin(2 * np.pi * 440 * t) * 32767).astype(np.int16)[None, :],
                                               format="s16", layout="mono")
            frame.sample_rate = rate
            for packet in stream.encode(frame):
                out.mux(packet)
            for packet in stream.encode():
                out.mux(packet)
    except Exception as exc:  # an FFmpeg build without the flac encoder
        pytest.skip(f"cannot write FLAC with this PyAV build: {exc}")
    clip = load_audio(path.read_bytes(), str(path))
    assert clip.sample_rate == 16000 and clip.duration == pytest.approx(1.0, abs=0.05)
