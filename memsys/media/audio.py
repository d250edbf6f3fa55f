"""Audio loading, resampling, Silero voice-activity detection, WAV clips.

WAV (PCM 8/16/24/32-bit) is read with the standard library ``wave`` module and
numpy (no soundfile needed); other containers and non-PCM WAV fall back to PyAV,
which is already a media dependency. Audio at any rate from ``min_sample_rate``
up is *resampled* to ``audio_sample_rate`` (16 kHz, what Silero expects); lower
rates are *rejected* (too little bandwidth for speech). Stereo is downmixed.

Importing ``silero_vad`` sets torch to one thread process-wide; :func:`load_vad`
restores the previous thread count.
"""

from __future__ import annotations

import io
import threading
import warnings
import wave
from dataclasses import dataclass, field

import numpy as np

from memsys.media import MediaInputError
from memsys.media.gates import SpeechSegment

#: Silero's window at 16 kHz (the model only accepts 512-sample chunks there)
VAD_WINDOW = 512
VAD_RATE = 16000


@dataclass
class AudioClip:
    samples: np.ndarray  # float32 mono in [-1, 1] at ``sample_rate``
    sample_rate: int
    source_rate: int
    channels: int
    notes: list[str] = field(default_factory=list)  # e.g. "resampled 22050 -> 16000 Hz"

    @property
    def duration(self) -> float:
        return len(self.samples) / self.sample_rate if self.sample_rate else 0.0


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if len(x) else 0.0


def _lowpass_kernel(cutoff: float, taps: int = 63) -> np.ndarray:
    """Hann-windowed sinc; ``cutoff`` as a fraction of the sampling rate (< 0.5)."""
    n = np.arange(taps) - (taps - 1) / 2
    h = 2 * cutoff * np.sinc(2 * cutoff * n) * np.hanning(taps)
    return (h / h.sum()).astype(np.float64)


def resample(x: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    """Band-limited resampling: low-pass below the new Nyquist, then linear interpolation.

    Good enough for VAD and speech clips (not for hi-fi audio); no scipy needed.
    """
    if rate_in == rate_out or len(x) == 0:
        return x.astype(np.float32)
    y = x.astype(np.float64)
    if rate_out < rate_in:
        y = np.convolve(y, _lowpass_kernel(0.45 * rate_out / rate_in), mode="same")
    n_out = int(round(len(x) * rate_out / rate_in))
    t_out = np.arange(n_out) * (rate_in / rate_out)
    return np.interp(t_out, np.arange(len(y)), y).astype(np.float32)


def _pcm_to_float(raw: bytes, width: int, channels: int) -> np.ndarray:
    if width == 1:  # 8-bit WAV is unsigned
        x = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        x = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    elif width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        v = np.where(v & 0x800000, v - 0x1000000, v)
        x = v.astype(np.float32) / 8388608.0
    elif width == 4:
        x = np.frombuffer(raw, "<i4").astype(np.float32) / 2147483648.0
    else:
        raise MediaInputError(f"unsupported PCM sample width {width} bytes")
    if channels > 1:
        x = x[: len(x) - len(x) % channels].reshape(-1, channels).mean(axis=1)
    return x


def _decode_wav(data: bytes, name: str) -> tuple[np.ndarray, int, int] | None:
    """(mono float32, rate, channels) for PCM WAV; None if not a PCM WAV file."""
    if not (data[:4] == b"RIFF" and data[8:12] == b"WAVE"):
        return None
    try:
        with wave.open(io.BytesIO(data), "rb") as w:
            rate, channels, width, frames = w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes()
            raw = w.readframes(frames)
    except wave.Error as exc:
        if "unknown format" in str(exc):  # float / compressed WAV: let PyAV try
            return None
        raise MediaInputError(f"audio {name}: corrupt WAV ({exc})") from exc
    except EOFError as exc:
        raise MediaInputError(f"audio {name}: truncated WAV header") from exc
    if frames == 0 or not raw:
        raise MediaInputError(f"audio {name}: zero-length audio (no samples)")
    return _pcm_to_float(raw, width, channels), rate, channels


def _decode_with_av(data: bytes, name: str, rate_out: int) -> tuple[np.ndarray, int, int]:
    """Any container PyAV/FFmpeg reads, decoded and resampled to mono float at ``rate_out``."""
    try:
        import av
    except ImportError as exc:
        raise MediaInputError(f"audio {name}: not PCM WAV and PyAV is not installed (pip install av)") from exc
    try:
        with av.open(io.BytesIO(data)) as container:
            if not container.streams.audio:
                raise MediaInputError(f"audio {name}: no audio stream")
            stream = container.streams.audio[0]
            rate_in, channels = int(stream.codec_context.sample_rate or 0), int(stream.codec_context.channels or 0)
            resampler = av.AudioResampler(format="flt", layout="mono", rate=rate_out)
            chunks = []
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    chunks.append(out.to_ndarray().reshape(-1))
            for out in resampler.resample(None):
                chunks.append(out.to_ndarray().reshape(-1))
    except MediaInputError:
        raise
    except Exception as exc:  # av.error.FFmpegError and friends
        raise MediaInputError(f"audio {name}: unsupported or corrupt ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from exc
    x = np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, np.float32)
    if len(x) == 0:
        raise MediaInputError(f"audio {name}: zero-length audio (no samples)")
    return x, rate_in, channels


def load_audio(data: bytes, name: str, target_rate: int = VAD_RATE, min_rate: int = 8000) -> AudioClip:
    """Decode to mono float32 at ``target_rate``; resample other rates, reject below ``min_rate``."""
    notes: list[str] = []
    decoded = _decode_wav(data, name)
    if decoded is None:
        x, rate_in, channels = _decode_with_av(data, name, target_rate)
        if rate_in and rate_in < min_rate:
            raise MediaInputError(f"audio {name}: sample rate {rate_in} Hz below {min_rate} Hz, rejected")
        if rate_in and rate_in != target_rate:
            notes.append(f"resampled {rate_in} -> {target_rate} Hz")
        rate_in = rate_in or target_rate
    else:
        x, rate_in, channels = decoded
        if rate_in < min_rate:
            raise MediaInputError(f"audio {name}: sample rate {rate_in} Hz below {min_rate} Hz, rejected")
        if rate_in != target_rate:
            x = resample(x, rate_in, target_rate)
            notes.append(f"resampled {rate_in} -> {target_rate} Hz")
    if channels > 1:
        notes.append(f"downmixed {channels} channels to mono")
    x = np.clip(np.nan_to_num(x, nan=0.0, posinf=1.0, neginf=-1.0), -1.0, 1.0).astype(np.float32)
    return AudioClip(x, target_rate, rate_in, channels, notes)


def encode_wav(samples: np.ndarray, rate: int) -> bytes:
    """16-bit mono PCM WAV bytes (what level 3 hands a reader)."""
    pcm = (np.clip(samples, -1.0, 1.0) * 32767.0).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return buf.getvalue()


# ----------------------------------------------------------------------------- VAD
_vad_model = None
_vad_lock = threading.Lock()


def silero_module():
    """``import silero_vad`` without its side effect on the whole process.

    The package calls ``torch.set_num_threads(1)`` at import time; the previous
    thread count is put back.
    """
    import torch

    threads = torch.get_num_threads()
    try:
        import silero_vad
    except ImportError as exc:
        from memsys.errors import MissingDependencyError

        raise MissingDependencyError("silero-vad is not installed: pip install 'omni-memsys[media]'") from exc
    finally:
        torch.set_num_threads(threads)
    return silero_vad


def load_vad():
    """The Silero VAD model (shipped inside silero-vad, no download), loaded once per process."""
    global _vad_model
    with _vad_lock:
        if _vad_model is None:
            import torch

            threads = torch.get_num_threads()
            try:
                with warnings.catch_warnings():  # silero-vad's own importlib/jit deprecation notices
                    warnings.simplefilter("ignore", DeprecationWarning)
                    _vad_model = silero_module().load_silero_vad()
            finally:
                torch.set_num_threads(threads)
        return _vad_model


def speech_probabilities(samples: np.ndarray, rate: int = VAD_RATE) -> np.ndarray:
    """Silero speech probability per 512-sample window (32 ms at 16 kHz)."""
    import torch

    if rate != VAD_RATE:
        raise ValueError(f"VAD runs at {VAD_RATE} Hz, got {rate}")
    model = load_vad()
    audio = torch.from_numpy(np.ascontiguousarray(samples, dtype=np.float32))
    probs = np.zeros((len(samples) + VAD_WINDOW - 1) // VAD_WINDOW, np.float32)
    # One 512-sample window per call: intra-op threads only add overhead here
    # (measured 5-20x slower with 2 threads on a shared 2-core machine), so the
    # VAD runs single-threaded and the caller's thread count is restored after.
    with _vad_lock, torch.inference_mode():  # the model carries state across windows
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            model.reset_states()
            for i, start in enumerate(range(0, len(samples), VAD_WINDOW)):
                chunk = audio[start : start + VAD_WINDOW]
                if len(chunk) < VAD_WINDOW:
                    chunk = torch.nn.functional.pad(chunk, (0, VAD_WINDOW - len(chunk)))
                probs[i] = float(model(chunk, VAD_RATE).item())
        finally:
            torch.set_num_threads(threads)
    return probs


def find_speech_segments(samples: np.ndarray, rate: int, *, threshold: float, min_segment_ms: int,
                         min_silence_ms: int, pad_ms: int) -> list[SpeechSegment]:
    """Candidate speech segments with their mean speech probability and RMS energy.

    Silero's own segmentation (hysteresis around ``threshold``) is used with a
    small minimum length, so that short speech reaches the gate and is judged
    "uncertain" there instead of vanishing inside the VAD.
    """
    probs = speech_probabilities(samples, rate)
    spans = silero_module().get_speech_timestamps_from_probs(
        probs.tolist(), sampling_rate=rate, threshold=threshold, min_speech_duration_ms=min_segment_ms,
        min_silence_duration_ms=min_silence_ms, speech_pad_ms=pad_ms, audio_length_samples=len(samples),
    )
    out = []
    for s in spans:
        a, b = int(s["start"]), int(s["end"])
        w0, w1 = a // VAD_WINDOW, max(a // VAD_WINDOW + 1, (b + VAD_WINDOW - 1) // VAD_WINDOW)
        out.append(SpeechSegment(a / rate, b / rate, float(probs[w0:w1].mean()), rms(samples[a:b])))
    return out
